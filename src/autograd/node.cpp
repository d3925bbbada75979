// Node bookkeeping shared by every rule: sequence numbers, edges, attaching a
// node to an op's output, broadcast reduction and teardown.

#include "autograd/node.h"

#include "autograd/meta.h"
#include "autograd/record.h"
#include "forge/ops.h"

namespace forge::autograd {

namespace {
// Recording order on this thread: one thread drives a context and its tape.
thread_local std::uint64_t next_sequence_nr = 0;

// Note [Iterative teardown]
// Dropping the last reference to a node drops its edges' references to the
// nodes before it; done by recursion, a chain of 100,000 ops would need
// 100,000 nested destructor frames. Instead the first node to die on a thread
// drains a thread-local list: a node whose count reaches zero while the list
// is draining is linked in (through its own `next_dead_`, so teardown never
// allocates) and deleted by the loop, not by its consumer's destructor.
thread_local Node* dead_nodes = nullptr;
thread_local bool draining = false;
}  // namespace

Node::Node(const char* name, std::span<Edge> edges, std::span<SavedTensor> saved) noexcept
    : name_(name), sequence_nr_(next_sequence_nr++), edges_(edges), saved_(saved) {}

std::uint64_t peek_sequence_nr() noexcept { return next_sequence_nr; }

void Node::on_last_release() noexcept {
  next_dead_ = dead_nodes;
  dead_nodes = this;
  if (draining) return;
  draining = true;
  while (dead_nodes) {
    Node* n = dead_nodes;
    dead_nodes = n->next_dead_;
    delete n;
  }
  draining = false;
}

// Note [Saved values under create_graph]
// A saved value is a view without history (a node must not hold its own
// output, and a view that kept its input's history would pin it twice). A
// backward that records needs the history back: the derivative of a VJP
// that reads x must flow to x. SavedTensor::source names which tensor of the
// op a value was, and unpacking rebuilds it from what the node already holds:
// an input that is a leaf is that leaf itself (its gradient must reach its
// .grad), an input with a history is a fresh view attached to the edge's
// node, and the output a fresh view attached to this node. Anything else
// (masks, indices, values that need no gradient) is read as saved.
Tensor Node::unpack(const SavedTensor& s) {
  const Tensor& value = s.value();
  if (!value.defined()) return value;
  if (s.source() == SavedTensor::kOutput) {
    Tensor t = value.detach();
    attach(t, Ref<Node>::share(this));
    return t;
  }
  if (s.source() >= 0) {
    const Edge& e = edges_[static_cast<std::size_t>(s.source())];
    if (e.leaf) return Tensor(e.leaf);
    if (e.node) {
      Tensor t = value.detach();
      attach(t, e.node);
      return t;
    }
  }
  return value;
}

void Node::apply_recording(const Tensor& grad, std::span<Tensor> grads) {
  std::vector<Tensor> unpacked;
  unpacked.reserve(saved_.size());
  for (const SavedTensor& s : saved_) unpacked.push_back(unpack(s));
  Vjp vjp(grad, unpacked, edges_, grads);
  run(vjp);
}

void Vjp::set(std::size_t i, Tensor grad) {
  if (!needs(i) || !grad.defined()) return;
  const Edge& e = edges_[i];
  if (grad.shape() != e.shape) grad = sum_to(grad, e.shape);
  if (grad.dtype() != e.dtype) grad = grad.to(e.dtype);
  grads_[i] = std::move(grad);
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  const int lead = grad.dim() - shape.rank();
  FORGE_ASSERT(lead >= 0, "gradient of shape ", grad.shape(), " for an input of shape ", shape);
  Dims dims;
  for (int d = 0; d < lead; ++d) dims.push_back(d);
  for (int d = 0; d < shape.rank(); ++d)
    if (shape[d] == 1 && grad.shape()[lead + d] != 1) dims.push_back(lead + d);
  if (dims.empty()) return grad.reshape(shape);
  return sum(grad, DimList(dims), /*keepdim=*/true).reshape(shape);
}

Edge edge_to(const Tensor& t) {
  Edge e;
  if (!wants_grad(t)) return e;
  e.shape = t.shape();
  e.dtype = t.dtype();
  if (Node* fn = detail::grad_fn_of(t))
    e.node = Ref<Node>::share(fn);
  else
    e.leaf = Ref<TensorImpl>::share(t.impl());
  return e;
}

void attach(const Tensor& out, Ref<Node> node) {
  TensorImpl& impl = *out.impl();
  detail::AutogradAccess::set_grad_fn(impl, std::move(node));
  detail::AutogradAccess::set_requires_grad(impl, true);
}

}  // namespace forge::autograd
