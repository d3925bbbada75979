#pragma once
// Where a tensor's hooks live (docs/AUTOGRAD.md "Hooks"), and what the engine
// calls to run them and to check for anomalies.
//
// Note [Where hooks live]
// The engine meets nodes and leaves, not tensors: a non-leaf's hooks (and its
// retain_grad) sit on the node that recorded it, a leaf's on its
// AutogradMeta. Both start as a null pointer, so a pass with no hook
// registered pays one pointer check per node run and per leaf reached.
// An entry is shared with its HookHandle: remove() marks it inactive (the
// list drops it at the next registration), and a list that dies (its tensor
// or node did) marks every entry inactive, so a handle never dangles.

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "forge/ref.h"
#include "forge/tensor.h"

namespace forge::autograd {
class Node;
}

namespace forge::detail {

struct AutogradMeta;

struct HookEntry : RefCounted<HookEntry> {
  void on_last_release() noexcept { delete this; }
  // Drops the callable now unless it is running (then after it returns).
  void remove() noexcept;

  std::function<Tensor(const Tensor&)> pre;  // register_hook
  std::function<void(const Tensor&)> post;   // register_post_accumulate_grad_hook
  bool active = true;
  bool running = false;
};

// The hooks of one tensor (Note [Where hooks live]).
struct TensorHooks {
  TensorHooks() = default;
  TensorHooks(const TensorHooks&) = delete;
  TensorHooks& operator=(const TensorHooks&) = delete;
  ~TensorHooks();

  std::vector<Ref<HookEntry>> pre;   // in registration order
  std::vector<Ref<HookEntry>> post;  // leaves only
  // A non-leaf that retains its gradient: the AutogradMeta that takes it.
  AutogradMeta* retain = nullptr;
};

// The gradient after every active pre-hook saw it (a defined return replaces it).
Tensor run_pre_hooks(TensorHooks& hooks, Tensor grad);
// Calls every active post-accumulate hook with the leaf.
void run_post_hooks(TensorHooks& hooks, TensorImpl& leaf);
// A non-leaf's hooks, then its retained .grad (a fresh tensor the first pass,
// out-of-place sums after, as libtorch).
Tensor run_node_hooks(TensorHooks& hooks, Tensor grad, bool to_grad);
// While one lives on this thread, a backward pass that starts skips the
// hooks of leaves: a checkpoint's recompute (src/autograd/checkpoint.cpp)
// captures its leaves' gradients with a nested grad() and hands them to the
// outer pass, whose leaf hooks then run once, not twice.
class LeafHooksPause {
 public:
  LeafHooksPause() noexcept : previous_(paused_) { paused_ = true; }
  ~LeafHooksPause() { paused_ = previous_; }
  LeafHooksPause(const LeafHooksPause&) = delete;
  LeafHooksPause& operator=(const LeafHooksPause&) = delete;
  static bool paused() noexcept { return paused_; }

 private:
  static inline thread_local bool paused_ = false;
  bool previous_;
};

// Anomaly mode: refuses a VJP's gradients that hold NaN or Inf, naming the node.
void check_anomaly(const autograd::Node& node, std::span<const Tensor> grads);

}  // namespace forge::detail
