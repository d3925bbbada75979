#pragma once

#include <cstddef>
#include <cstdint>
// What a TensorImpl keeps for autograd: its requires_grad flag and the node
// that recorded it (a reference held in the impl itself: recording an op
// allocates no metadata), and, made on first use, the gradient backward
// accumulates (leaves), a leaf's hooks and whether a non-leaf retains its
// gradient (Note [Where hooks live] in src/autograd/hooks.h).

#include <memory>
#include <utility>

#include "autograd/hooks.h"
#include "autograd/node.h"
#include "forge/tensor.h"

namespace forge::detail {

struct AutogradMeta {
  Tensor grad;
  // The backward pass (engine epoch) holding a not yet committed first
  // gradient for this leaf, and its slot there (Note [All-or-nothing .grad]).
  std::uint64_t fresh_epoch = 0;
  std::size_t fresh_slot = 0;
  // A leaf's hooks; null until one is registered.
  std::unique_ptr<TensorHooks> hooks;
  // The pass counting this hooked leaf's gradient contributions, and its
  // slot there (Note [Leaf hooks] in engine.cpp).
  std::uint64_t hook_epoch = 0;
  std::size_t hook_slot = 0;
  // retain_grad() on a non-leaf: its node's hooks point here.
  bool retains_grad = false;
};

// Moves a retained gradient's target from t's node to `node` (an in-place
// op gave t a new history) or drops it (node null: t dies or leaves the tape).
void move_retain(TensorImpl& t, autograd::Node* node) noexcept;

struct AutogradAccess {
  static AutogradMeta* meta(const TensorImpl& t) noexcept { return t.autograd_; }
  static AutogradMeta& ensure_meta(TensorImpl& t) {
    if (!t.autograd_) t.autograd_ = new AutogradMeta();
    return *t.autograd_;
  }
  static void set_requires_grad(TensorImpl& t, bool on) noexcept { t.requires_grad_ = on; }
  static autograd::Node* grad_fn(const TensorImpl& t) noexcept { return t.grad_fn_; }
  // Takes over the reference `node` holds; drops the previous one.
  static void set_grad_fn(TensorImpl& t, Ref<autograd::Node> node) noexcept {
    if (t.autograd_ && t.autograd_->retains_grad) move_retain(t, node.get());
    autograd::Node* old = std::exchange(t.grad_fn_, node.release());
    if (old) old->release_ref();
  }
  static void destroy(TensorImpl& t) noexcept {
    set_grad_fn(t, nullptr);
    delete t.autograd_;
    t.autograd_ = nullptr;
  }
};

inline autograd::Node* grad_fn_of(const Tensor& t) noexcept { return AutogradAccess::grad_fn(*t.impl()); }

}  // namespace forge::detail
