#pragma once
// The tape's records (DESIGN §7). A Node is one recorded op: its VJP, an Edge
// per input (where that input's gradient goes), a sequence number in recording
// order, and the values the VJP reads, kept as SavedTensors (a clone_view: a
// refcount on the buffer, never a copy). Every node has exactly one output;
// ops with a second, non-differentiable output (max's indices) record only
// the first.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "autograd/hooks.h"
#include "forge/ref.h"
#include "forge/tensor.h"

namespace forge::autograd {

class Node;

// Where one input's gradient goes: the node that produced the input, or the
// input itself when it is a leaf that requires grad (accumulated into its
// .grad). Neither: the input wants no gradient. The input's shape and dtype
// are kept so a gradient can be reduced over broadcast dims and cast back.
struct Edge {
  Ref<Node> node;
  Ref<TensorImpl> leaf;
  Shape shape;
  DType dtype = DType::f32;

  bool wants_grad() const noexcept { return node || leaf; }
};

// A value a VJP reads: a view of its bytes (detach(): a clone_view that never
// records). The buffer's version is taken when it is saved; an
// in-place write to the buffer after that makes backward refuse to run
// (Note [Saved tensor versions] in engine.cpp). `source` says which tensor
// of the op it was, so that a backward that records (create_graph) can give
// the VJP the value with its history back (Note [Saved values under
// create_graph] in node.cpp): the node's output, one of its inputs (the
// edge's index), or neither. Holding an index, not a reference, keeps a node
// free of a cycle through its own output.
class SavedTensor {
 public:
  static constexpr std::int16_t kOther = -1;
  static constexpr std::int16_t kOutput = -2;

  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t, std::int16_t source = kOther)
      : value_(t.defined() ? t.detach() : Tensor()), version_(t.defined() ? t.version() : 0), source_(source) {}
  const Tensor& value() const noexcept { return value_; }
  std::int16_t source() const noexcept { return source_; }
  bool modified() const noexcept { return value_.defined() && value_.version() != version_; }
  void reset() noexcept { value_ = Tensor(); }

 private:
  Tensor value_;
  std::uint32_t version_ = 0;
  std::int16_t source_ = kOther;
};

// What a VJP sees: the gradient of the node's output, the saved values, and
// a slot per input to fill. set() reduces a gradient over the dimensions the
// op broadcast and casts it to the input's dtype. Under create_graph the VJP
// runs with grad mode on and saved() returns the values with their history,
// so a VJP composed of differentiable ops records its own backward.
class Vjp {
 public:
  Vjp(const Tensor& grad, std::span<const SavedTensor> saved, std::span<const Edge> edges,
      std::span<Tensor> grads) noexcept
      : grad_(grad), saved_(saved), edges_(edges), grads_(grads) {}
  Vjp(const Tensor& grad, std::span<const Tensor> unpacked, std::span<const Edge> edges,
      std::span<Tensor> grads) noexcept
      : grad_(grad), unpacked_(unpacked), edges_(edges), grads_(grads), create_graph_(true) {}

  const Tensor& grad() const noexcept { return grad_; }
  const Tensor& saved(std::size_t i) const noexcept { return create_graph_ ? unpacked_[i] : saved_[i].value(); }
  bool needs(std::size_t i) const noexcept { return edges_[i].wants_grad(); }
  const Shape& input_shape(std::size_t i) const noexcept { return edges_[i].shape; }
  DType input_dtype(std::size_t i) const noexcept { return edges_[i].dtype; }
  // Whether this backward records (create_graph): the gradients it sets must
  // come from differentiable ops (Note [Fused backward kernels] in rules/common.h).
  bool create_graph() const noexcept { return create_graph_; }
  // Under create_graph: whether the gradient or a saved value has a history.
  bool any_history() const noexcept {
    if (grad_.defined() && grad_.requires_grad()) return true;
    for (const Tensor& t : unpacked_)
      if (t.defined() && t.requires_grad()) return true;
    return false;
  }
  void set(std::size_t i, Tensor grad);

 private:
  const Tensor& grad_;
  std::span<const SavedTensor> saved_;
  std::span<const Tensor> unpacked_;
  std::span<const Edge> edges_;
  std::span<Tensor> grads_;
  bool create_graph_ = false;
};

class Node : public RefCounted<Node> {
 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  virtual ~Node() = default;
  // Tears down chains of nodes iteratively (Note [Iterative teardown] in node.cpp).
  void on_last_release() noexcept;

  const char* name() const noexcept { return name_; }
  std::uint64_t sequence_nr() const noexcept { return sequence_nr_; }
  std::span<Edge> edges() noexcept { return edges_; }
  std::span<const Edge> edges() const noexcept { return edges_; }
  std::span<SavedTensor> saved() noexcept { return saved_; }
  bool released() const noexcept { return released_; }
  // The hooks of this node's output (Note [Where hooks live] in hooks.h): null unless one was registered.
  detail::TensorHooks* hooks() const noexcept { return hooks_.get(); }
  detail::TensorHooks& ensure_hooks() {
    if (!hooks_) hooks_ = std::make_unique<detail::TensorHooks>();
    return *hooks_;
  }

  // Runs the VJP: fills grads[i] (one per edge) for the inputs that want one.
  void apply(const Tensor& grad, std::span<Tensor> grads) {
    Vjp vjp(grad, saved_, edges_, grads);
    run(vjp);
  }
  // The same, recording (create_graph): the VJP sees the saved values with their history.
  void apply_recording(const Tensor& grad, std::span<Tensor> grads);
  // Drops the saved values and the VJP's captured state; the node cannot run again.
  void release() noexcept {
    for (auto& s : saved_) s.reset();
    drop_state();
    released_ = true;
  }

 protected:
  Node(const char* name, std::span<Edge> edges, std::span<SavedTensor> saved) noexcept;
  virtual void run(Vjp& vjp) = 0;
  virtual void drop_state() noexcept = 0;
  // A saved value with its history (Note [Saved values under create_graph] in node.cpp).
  Tensor unpack(const SavedTensor& s);
  void bind(std::span<Edge> edges, std::span<SavedTensor> saved) noexcept {
    edges_ = edges;
    saved_ = saved;
  }

 private:
  friend class Engine;
  const char* name_;
  std::uint64_t sequence_nr_;
  std::span<Edge> edges_;
  std::span<SavedTensor> saved_;
  bool released_ = false;
  std::unique_ptr<detail::TensorHooks> hooks_;
  // The engine's scratch while a backward pass runs.
  Tensor grad_;
  std::int64_t pending_ = 0;
  std::uint64_t visit_ = 0;
  bool needed_ = true;
  Node* next_dead_ = nullptr;  // Note [Iterative teardown]
};

// The sequence number the next node recorded on this thread will get: a
// node numbered at or above it was recorded after this call.
std::uint64_t peek_sequence_nr() noexcept;

// A node whose VJP is the callable F (a lambda holding the op's parameters),
// with its edges and saved values stored inline: one allocation per node.
template <typename F, std::size_t NIn, std::size_t NSaved>
class RuleNode final : public Node {
 public:
  RuleNode(const char* name, F fn) : Node(name, edges_store_, saved_store_), fn_(std::move(fn)) {}
  std::array<Edge, NIn> edges_store_;
  std::array<SavedTensor, NSaved> saved_store_;

 private:
  void run(Vjp& vjp) override { (*fn_)(vjp); }
  void drop_state() noexcept override { fn_.reset(); }
  std::optional<F> fn_;
};

// The same with a number of inputs known only at run time (cat, stack).
template <typename F>
class ListNode final : public Node {
 public:
  ListNode(const char* name, std::vector<Edge> edges, std::vector<SavedTensor> saved, F fn)
      : Node(name, {}, {}), edges_store_(std::move(edges)), saved_store_(std::move(saved)), fn_(std::move(fn)) {
    bind(edges_store_, saved_store_);
  }

 private:
  void run(Vjp& vjp) override { (*fn_)(vjp); }
  void drop_state() noexcept override { fn_.reset(); }
  std::vector<Edge> edges_store_;
  std::vector<SavedTensor> saved_store_;
  std::optional<F> fn_;
};

}  // namespace forge::autograd
