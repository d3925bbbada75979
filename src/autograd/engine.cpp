// The backward engine (DESIGN §7).
//
// - A pass starts from output tensors and their seed gradients. One walk over
//   the reachable nodes counts, for each node, the edges that feed it.
// - A node runs when every consumer has contributed its gradient (count back
//   to zero); among ready nodes the newest (highest sequence number) runs
//   first, so the order is the tape's, reversed. Contributions to one node
//   are summed as they arrive; contributions to a leaf accumulate into .grad.
// - VJPs run with grad mode off: backward records nothing, unless
//   create_graph, which runs them with grad mode on (Note [Backward that
//   records]).
// - Unless retain_graph, a node releases its saved values right after it ran;
//   reaching a released node again is an ErrorCode::backward.
// - autograd::grad() captures the gradients of its inputs instead of touching
//   .grad, and runs only the nodes that lead to one of them.
// - The engine's scratch lives in the nodes (their pending gradient and
//   count), reset on every exit path, so a failing VJP holds no buffer.
//
// Note [All-or-nothing .grad]
// A leaf whose .grad is undefined when its first gradient arrives does not
// get it yet: the engine keeps it (summing later contributions into it) and
// hands every such gradient over only when the whole pass has succeeded, in
// a commit that cannot fail (any copy is made before the first hand-over).
// So a backward that throws, an allocation failure included, leaves no new
// .grad behind and the pool where it was. This costs nothing: the kept
// gradient is the buffer that becomes the .grad. A leaf that already has a
// .grad is accumulated into in place as its gradients arrive (keeping them
// until the end would cost a gradient-sized buffer per parameter); a pass
// that fails part-way leaves the sums that reached them, as libtorch does.
//
// Note [Leaf hooks]
// A leaf with hooks (src/autograd/hooks.h) must see its gradient once per
// pass, summed, and its post-accumulate hooks must run as soon as its .grad
// is final, not at the end of the pass. So walk() also counts the edges into
// each hooked leaf (for grad(): each hooked leaf it captures); to_leaf sums
// their contributions (undefined ones count too) and, at the last, runs the
// leaf's pre-hooks on the sum, accumulates it, and calls the post-accumulate
// hooks. A leaf that had no .grad gets its gradient at that point, before
// its hooks run, instead of at the final commit; should the pass fail later,
// that .grad is taken back with the others, so a failing pass still leaves
// no new .grad (the hook may have seen it). Leaves without hooks pay one
// pointer check.

#include <algorithm>
#include <atomic>

#include "autograd/meta.h"
#include "autograd/node.h"
#include "autograd/record.h"
#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/ops.h"

namespace forge::autograd {

class Engine;

namespace {

std::atomic<std::uint64_t> next_epoch{1};

// The innermost pass running on this thread (queue_callback, current_pass).
thread_local Engine* current_engine = nullptr;

// Whether nobody but the engine sees g's bytes, so it can become a .grad or
// be accumulated into in place (an exec scope's hold does not count: it only
// keeps the buffer alive).
bool sole_owner(const Tensor& g) {
  const Buffer& b = *g.buffer();
  return g.impl()->ref_count() == 1 && b.ref_count() == 1 + static_cast<std::int32_t>(b.scope_refs()) && b.pooled() &&
         g.is_contiguous() && g.offset() == 0;
}

// Whether a sum must be recorded: under create_graph a gradient may have a history.
bool recorded(const Tensor& a, const Tensor& b) {
  return GradMode::is_enabled() && (a.requires_grad() || b.requires_grad());
}

// into + g, in place when into is the engine's own.
void accumulate_into(Tensor& into, Tensor g) {
  if (!into.defined()) {
    into = std::move(g);
  } else if (recorded(into, g)) {
    into = add(into, g);
  } else if (sole_owner(into) && into.dtype() == g.dtype()) {
    add_into(into, into, g);
  } else {
    into = add(into, g);
  }
}

// Adds g into a leaf's existing .grad, in place.
void accumulate(detail::AutogradMeta& meta, const Tensor& g) {
  FORGE_CHECK(meta.grad.shape() == g.shape(), shape, "backward", "the leaf's .grad has shape ", meta.grad.shape(),
              " but the new gradient has shape ", g.shape());
  if (recorded(meta.grad, g))
    meta.grad = add(meta.grad, g);  // a new .grad with a history, as libtorch under create_graph
  else
    add_into(meta.grad, meta.grad, g);
}

// The inputs autograd::grad() asks about: a leaf's impl or a non-leaf's node.
struct Capture {
  std::vector<const void*> keys;
  std::vector<Tensor> results;

  bool has(const void* key) const { return std::find(keys.begin(), keys.end(), key) != keys.end(); }
  void add(const void* key, const Tensor& g) {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) accumulate_into(results[i], g);
  }
};

}  // namespace

class Engine {
 public:
  Engine(bool retain_graph, bool create_graph, Capture* capture)
      : retain_graph_(retain_graph || create_graph), create_graph_(create_graph), capture_(capture) {}
  ~Engine() {
    for (Node* n : visited_) {
      n->grad_ = Tensor();
      n->pending_ = 0;
    }
    // Left only when the pass failed: the kept gradients are dropped.
    for (auto& [leaf, g] : fresh_) {
      detail::AutogradMeta& meta = *detail::AutogradAccess::meta(*leaf);
      meta.fresh_epoch = 0;
      if (!g.defined()) meta.grad = Tensor();  // handed over early (Note [Leaf hooks])
    }
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void run(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs);
  void queue(std::function<void()> callback) { callbacks_.push_back(std::move(callback)); }
  std::uint64_t epoch() const noexcept { return epoch_; }

 private:
  void walk(Node* root);
  void run_node(Node* n);
  void push(Node* n) {
    ready_.push_back(n);
    std::push_heap(ready_.begin(), ready_.end(), newer_last);
  }
  static bool newer_last(const Node* a, const Node* b) noexcept { return a->sequence_nr_ < b->sequence_nr_; }
  void to_leaf(TensorImpl* leaf, Tensor g);
  void commit_fresh_grads();
  // Note [Leaf hooks]
  void count_hooked_leaf(TensorImpl* leaf);
  bool gather_hooked(detail::AutogradMeta& meta, Tensor& g);
  void post_accumulate(detail::AutogradMeta& meta, TensorImpl* leaf);

  bool retain_graph_;
  bool create_graph_;
  Capture* capture_;
  std::uint64_t epoch_ = next_epoch.fetch_add(1, std::memory_order_relaxed);
  std::vector<Node*> visited_;
  std::vector<Node*> ready_;
  std::vector<Tensor> grads_;
  // First gradients of leaves without a .grad, handed over at the end.
  std::vector<std::pair<Ref<TensorImpl>, Tensor>> fresh_;
  // Hooked leaves: contributions still due and their sum so far.
  struct HookedLeaf {
    std::int64_t pending = 0;
    Tensor sum;
  };
  std::vector<HookedLeaf> hooked_;
  std::vector<std::function<void()>> callbacks_;  // queue_callback
};

void Engine::to_leaf(TensorImpl* leaf, Tensor g) {
  detail::AutogradMeta* hooked = detail::AutogradAccess::meta(*leaf);
  if (hooked && hooked->hook_epoch != epoch_) hooked = nullptr;
  if (hooked && !gather_hooked(*hooked, g)) return;
  if (!g.defined()) return;
  if (capture_) {
    capture_->add(leaf, g);
    return;
  }
  detail::AutogradMeta& meta = detail::AutogradAccess::ensure_meta(*leaf);
  if (meta.grad.defined()) {
    accumulate(meta, g);
  } else if (meta.fresh_epoch == epoch_) {
    accumulate_into(fresh_[meta.fresh_slot].second, std::move(g));
  } else {
    // Room first (may throw: before the leaf is marked), growing geometrically.
    if (fresh_.size() == fresh_.capacity()) fresh_.reserve(2 * fresh_.size() + 8);
    meta.fresh_epoch = epoch_;
    meta.fresh_slot = fresh_.size();
    fresh_.emplace_back(Ref<TensorImpl>::share(leaf), std::move(g));
  }
  if (hooked) post_accumulate(meta, leaf);
}

// Note [Leaf hooks]: one more contribution due to `leaf` this pass.
void Engine::count_hooked_leaf(TensorImpl* leaf) {
  detail::AutogradMeta* meta = detail::AutogradAccess::meta(*leaf);
  if (!meta || !meta->hooks || (capture_ && !capture_->has(leaf)) || detail::LeafHooksPause::paused()) return;
  if (meta->hook_epoch != epoch_) {
    hooked_.emplace_back();
    meta->hook_epoch = epoch_;
    meta->hook_slot = hooked_.size() - 1;
  }
  ++hooked_[meta->hook_slot].pending;
}

// Sums g into the leaf's slot; at the last contribution, g becomes the sum
// after the leaf's hooks and the answer is true.
bool Engine::gather_hooked(detail::AutogradMeta& meta, Tensor& g) {
  HookedLeaf& slot = hooked_[meta.hook_slot];
  if (g.defined()) accumulate_into(slot.sum, std::move(g));
  if (--slot.pending > 0) return false;
  g = std::move(slot.sum);
  if (g.defined()) g = detail::run_pre_hooks(*meta.hooks, std::move(g));
  return g.defined();
}

// The leaf's .grad is final for this pass: hand a first gradient over now
// and call the post-accumulate hooks.
void Engine::post_accumulate(detail::AutogradMeta& meta, TensorImpl* leaf) {
  if (meta.hooks->post.empty()) return;
  if (!meta.grad.defined()) {
    Tensor& g = fresh_[meta.fresh_slot].second;
    if (!sole_owner(g)) g = g.clone();
    meta.grad = std::move(g);  // left undefined: the commit skips it, a failing pass takes it back
  }
  detail::run_post_hooks(*meta.hooks, *leaf);
}

// Note [All-or-nothing .grad]: first every copy (the only step that can
// fail), then the hand-over, which cannot.
void Engine::commit_fresh_grads() {
  for (auto& [leaf, g] : fresh_)
    if (g.defined() && !sole_owner(g)) g = g.clone();
  for (auto& [leaf, g] : fresh_) {
    detail::AutogradMeta& meta = *detail::AutogradAccess::meta(*leaf);
    if (g.defined()) meta.grad = std::move(g);
    meta.fresh_epoch = 0;
  }
  fresh_.clear();
}

// Counts, for every node reachable from root, the edges that feed it, and
// (for grad()) whether it leads to a captured input. Iterative post-order.
void Engine::walk(Node* root) {
  std::vector<std::pair<Node*, std::size_t>> stack;
  auto enter = [&](Node* n) {
    n->visit_ = epoch_;
    n->pending_ = 0;
    n->grad_ = Tensor();
    n->needed_ = capture_ == nullptr || capture_->has(n);
    visited_.push_back(n);
    stack.emplace_back(n, 0);
  };
  if (root->visit_ == epoch_) return;
  enter(root);
  while (!stack.empty()) {
    Node* n = stack.back().first;
    const std::size_t i = stack.back().second;
    if (i < n->edges_.size()) {
      ++stack.back().second;
      Node* child = n->edges_[i].node.get();
      if (!child) {
        if (TensorImpl* leaf = n->edges_[i].leaf.get()) count_hooked_leaf(leaf);
        continue;
      }
      if (child->visit_ != epoch_) enter(child);
      ++child->pending_;
      continue;
    }
    stack.pop_back();
    if (capture_ && !n->needed_) {
      for (const Edge& e : n->edges_)
        if ((e.node && e.node->needed_) || (e.leaf && capture_->has(e.leaf.get()))) n->needed_ = true;
    }
  }
}

void Engine::run(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs) {
  const char* op = capture_ ? "grad" : "backward";
  FORGE_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), invalid_argument, op, outputs.size(),
              " outputs but ", grad_outputs.size(), " gradients");
  GradModeGuard mode(create_graph_);  // Note [Backward that records]
  struct Current {
    Engine* previous;
    explicit Current(Engine* e) : previous(current_engine) { current_engine = e; }
    ~Current() { current_engine = previous; }
  } current(this);
  std::vector<Tensor> seeds(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    detail::check_input(op, out, "output");
    FORGE_CHECK(out.requires_grad(), backward, op, "output ", i, " of shape ", out.shape(),
                " does not require grad: no op that recorded it had an input that requires grad");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      FORGE_CHECK(out.numel() == 1, backward, op, "output ", i, " has shape ", out.shape(),
                  "; a gradient can be implied only for an output of one element: pass one of that shape");
      g = detail::allocate(out.runtime(), out.shape(), out.dtype(), op);
      g.fill_(1.0);
    } else {
      detail::check_input(op, g, "gradient");
      detail::check_same_runtime(op, out, g);
      FORGE_CHECK(g.shape() == out.shape(), shape, op, "gradient of shape ", g.shape(), " for output ", i, " of shape ",
                  out.shape());
      FORGE_CHECK(is_floating(g.dtype()), dtype, op, "gradient of dtype ", dtype_name(g.dtype()), " for output ", i);
      if (g.dtype() != out.dtype()) g = g.to(out.dtype());
    }
    seeds[i] = std::move(g);
  }
  for (const Tensor& out : outputs) {
    if (Node* fn = detail::grad_fn_of(out))
      walk(fn);
    else
      count_hooked_leaf(out.impl());
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (Node* fn = detail::grad_fn_of(outputs[i]))
      accumulate_into(fn->grad_, std::move(seeds[i]));
    else
      to_leaf(outputs[i].impl(), std::move(seeds[i]));  // a leaf is its own output
  }
  for (const Tensor& out : outputs) {
    Node* fn = detail::grad_fn_of(out);
    if (fn && fn->pending_ == 0 && fn->needed_ && std::find(ready_.begin(), ready_.end(), fn) == ready_.end()) push(fn);
  }
  while (!ready_.empty()) {
    std::pop_heap(ready_.begin(), ready_.end(), newer_last);
    Node* n = ready_.back();
    ready_.pop_back();
    run_node(n);
  }
  commit_fresh_grads();
  for (std::size_t i = 0; i < callbacks_.size(); ++i) {
    auto callback = std::move(callbacks_[i]);
    callback();
  }
}

// Note [Backward that records]
// With create_graph the pass runs with grad mode on: every VJP composed of
// forge ops records its own backward, so the gradients it returns have a
// history and can be differentiated again (libtorch's double backward). The
// VJP reads its saved values with their history (Note [Saved values under
// create_graph] in node.cpp); sums of gradients are recorded out of place
// (in place would cut them from the tape); a rule whose backward is a fused
// kernel computes the same formula from ops instead, or refuses by name
// (Note [Fused backward kernels] in rules/common.h). The graph is kept
// (retain_graph), since the new graph reads this one's saved values.

// Note [Saved tensor versions]
// A saved value is a clone_view plus the buffer's version when it was saved.
// Every in-place write bumps the version of the buffer it writes (all views
// of those bytes share it), so a changed version means the VJP would read
// values the forward did not use: refuse, naming the op.
void Engine::run_node(Node* n) {
  Tensor g = std::move(n->grad_);
  if (n->hooks() && g.defined()) g = detail::run_node_hooks(*n->hooks(), std::move(g), !capture_);
  if (capture_ && capture_->has(n)) capture_->add(n, g);
  FORGE_CHECK(!n->released_, backward, "backward", "the graph through ", n->name(),
              " was freed by an earlier backward; pass retain_graph = true to run it again");
  for (const SavedTensor& s : n->saved_)
    FORGE_CHECK(!s.modified(), backward, n->name(),
                "a tensor saved for the backward pass was modified in place after it was saved (version ",
                s.value().version(), "); compute into a new tensor instead");
  grads_.assign(n->edges_.size(), Tensor());
  if (g.defined()) {
    if (create_graph_)
      n->apply_recording(g, grads_);
    else
      n->apply(g, grads_);
  }
  if (AnomalyMode::is_enabled()) detail::check_anomaly(*n, grads_);
  g = Tensor();
  for (std::size_t i = 0; i < n->edges_.size(); ++i) {
    const Edge& e = n->edges_[i];
    Tensor gi = std::move(grads_[i]);
    if (Node* child = e.node.get()) {
      if (gi.defined()) accumulate_into(child->grad_, std::move(gi));
      if (--child->pending_ == 0 && child->needed_) push(child);
    } else if (e.leaf && (gi.defined() || !hooked_.empty())) {
      to_leaf(e.leaf.get(), std::move(gi));
    }
  }
  grads_.clear();
  if (!retain_graph_) n->release();
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) try {
  FORGE_CHECK(!outputs.empty(), invalid_argument, "backward", "no outputs");
  Engine(retain_graph, create_graph, nullptr).run(outputs, grad_outputs);
}
FORGE_CATCH_OOM("backward")

void queue_callback(std::function<void()> callback) {
  FORGE_CHECK(current_engine, backward, "queue_callback", "no backward pass is running on this thread");
  FORGE_CHECK(callback, invalid_argument, "queue_callback", "an empty callback");
  current_engine->queue(std::move(callback));
}

std::uint64_t current_pass() noexcept { return current_engine ? current_engine->epoch() : 0; }

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const GradOptions& options) try {
  FORGE_CHECK(!outputs.empty(), invalid_argument, "grad", "no outputs");
  Capture capture;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    detail::check_input("grad", in, "input");
    FORGE_CHECK(in.requires_grad(), backward, "grad", "input ", i, " of shape ", in.shape(), " does not require grad");
    Node* fn = detail::grad_fn_of(in);
    capture.keys.push_back(fn ? static_cast<const void*>(fn) : static_cast<const void*>(in.impl()));
  }
  capture.results.resize(inputs.size());
  Engine(options.retain_graph, options.create_graph, &capture).run(outputs, options.grad_outputs);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    FORGE_CHECK(options.allow_unused || capture.results[i].defined(), backward, "grad", "input ", i, " of shape ",
                inputs[i].shape(),
                " is not used by the outputs; pass allow_unused to get an undefined "
                "gradient for it");
  return std::move(capture.results);
}
FORGE_CATCH_OOM("grad")

}  // namespace forge::autograd
