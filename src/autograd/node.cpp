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
