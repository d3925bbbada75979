#pragma once
// What a TensorImpl keeps for autograd beyond its requires_grad flag: the node
// that recorded it (non-leaves) and the gradient backward accumulated (leaves).
// Made on first use, so tensors that never meet autograd pay one null pointer.

#include "autograd/node.h"
#include "forge/tensor.h"

namespace forge::detail {

struct AutogradMeta {
  Ref<autograd::Node> grad_fn;
  Tensor grad;
};

struct AutogradAccess {
  static AutogradMeta* meta(const TensorImpl& t) noexcept { return t.autograd_; }
  static AutogradMeta& ensure_meta(TensorImpl& t) {
    if (!t.autograd_) t.autograd_ = new AutogradMeta();
    return *t.autograd_;
  }
  static void set_requires_grad(TensorImpl& t, bool on) noexcept { t.requires_grad_ = on; }
  static void mark_view(TensorImpl& t) noexcept { t.is_view_ = true; }
  static void destroy(TensorImpl& t) noexcept {
    delete t.autograd_;
    t.autograd_ = nullptr;
  }
};

inline autograd::Node* grad_fn_of(const Tensor& t) noexcept {
  AutogradMeta* m = AutogradAccess::meta(*t.impl());
  return m ? m->grad_fn.get() : nullptr;
}

}  // namespace forge::detail
