// The Tensor methods of autograd and the in-place ops that must respect it.
//
// Note [In-place writes under autograd]
// An in-place op bumps the version of the buffer it writes (so a node that
// saved those bytes refuses to run: Note [Saved tensor versions]). When grad
// mode is on and the target or a source requires grad, the write is recorded:
// the op runs out of place on a snapshot of the target (so nothing the new
// node saves is overwritten), the result is copied into the target, and the
// target takes over the new node as its history. libtorch's restrictions
// apply: a leaf that requires grad is not written in place while recording,
// and neither is a view (its base would not learn of the write).

#include "autograd/meta.h"
#include "autograd/record.h"
#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/ops.h"

namespace forge {

using detail::AutogradAccess;

Tensor& Tensor::requires_grad_(bool on) try {
  detail::check_input("requires_grad_", *this, "tensor");
  if (on) {
    FORGE_CHECK(is_floating(dtype()), dtype, "requires_grad_", "only floating tensors can require grad, not ",
                dtype_name(dtype()));
  } else {
    FORGE_CHECK(is_leaf(), backward, "requires_grad_", "the output of ", grad_fn_name(),
                " is not a leaf; use detach() to cut it from the tape");
  }
  AutogradAccess::set_requires_grad(*impl(), on);
  return *this;
}
FORGE_CATCH_OOM("requires_grad_")

bool Tensor::is_leaf() const { return AutogradAccess::grad_fn(body()) == nullptr; }

Tensor Tensor::grad() const {
  const detail::AutogradMeta* meta = AutogradAccess::meta(body());
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) try {
  detail::check_input("set_grad", *this, "tensor");
  if (grad.defined()) {
    detail::check_input("set_grad", grad, "grad");
    detail::check_same_runtime("set_grad", *this, grad);
    FORGE_CHECK(grad.shape() == shape(), shape, "set_grad", "gradient of shape ", grad.shape(),
                " for a tensor of shape ", shape());
    FORGE_CHECK(grad.dtype() == dtype(), dtype, "set_grad", "gradient of dtype ", dtype_name(grad.dtype()),
                " for a tensor of dtype ", dtype_name(dtype()));
  }
  AutogradAccess::ensure_meta(*impl()).grad = grad;
}
FORGE_CATCH_OOM("set_grad")

void Tensor::zero_grad(bool set_to_none) try {
  detail::AutogradMeta* meta = AutogradAccess::meta(body());
  if (!meta || !meta->grad.defined()) return;
  if (set_to_none) {
    meta->grad = Tensor();
  } else {
    autograd::NoGradGuard no_grad;
    meta->grad.zero_();
  }
}
FORGE_CATCH_OOM("zero_grad")

const char* Tensor::grad_fn_name() const {
  const autograd::Node* fn = AutogradAccess::grad_fn(body());
  return fn ? fn->name() : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const try {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}
FORGE_CATCH_OOM("backward")

Tensor Tensor::detach() const try {
  detail::check_input("detach", *this, "tensor");
  return detail::make_view(*this, shape(), strides(), offset());
}
FORGE_CATCH_OOM("detach")

namespace {

// Runs `write` on self, or, when autograd must record, `compute(snapshot)`
// and copies its result into self (Note [In-place writes under autograd]).
template <typename Compute, typename Write>
Tensor& in_place(Tensor& self, const char* op, bool source_requires_grad, Compute&& compute, Write&& write) {
  detail::check_writable(op, self, "self");
  if (!autograd::GradMode::is_enabled() || !(self.requires_grad() || source_requires_grad)) {
    write();
    return self;
  }
  FORGE_CHECK(!(self.requires_grad() && self.is_leaf()), backward, op,
              "a leaf tensor that requires grad cannot be written in place while grad mode is on; "
              "wrap the update in NoGradGuard");
  FORGE_CHECK(!self.impl()->is_view(), not_implemented, op,
              "writing in place into a view while autograd records is not supported; compute out of place");
  Tensor result = compute(self.requires_grad() ? self.clone() : self.detach());
  {
    autograd::NoGradGuard no_grad;
    self.copy_(result);
  }
  const autograd::Node* history = detail::grad_fn_of(result);
  FORGE_ASSERT(history != nullptr, op, " recorded no node");
  AutogradAccess::set_grad_fn(*self.impl(), Ref<autograd::Node>::share(const_cast<autograd::Node*>(history)));
  AutogradAccess::set_requires_grad(*self.impl(), true);
  return self;
}

}  // namespace

#define FORGE_IN_PLACE_BINARY(name)                                                                      \
  Tensor& Tensor::name##_(const Tensor& other) try {                                                     \
    detail::check_input(#name "_", other, "other");                                                      \
    return in_place(                                                                                     \
        *this, #name "_", other.requires_grad(), [&](const Tensor& s) { return forge::name(s, other); }, \
        [&] { name##_into(*this, *this, other); });                                                      \
  }                                                                                                      \
  FORGE_CATCH_OOM(#name "_")                                                                             \
  Tensor& Tensor::name##_(Scalar other) try {                                                            \
    return in_place(                                                                                     \
        *this, #name "_", false, [&](const Tensor& s) { return forge::name(s, other); },                 \
        [&] { name##_into(*this, *this, other); });                                                      \
  }                                                                                                      \
  FORGE_CATCH_OOM(#name "_")

FORGE_IN_PLACE_BINARY(add)
FORGE_IN_PLACE_BINARY(sub)
FORGE_IN_PLACE_BINARY(mul)
FORGE_IN_PLACE_BINARY(div)
#undef FORGE_IN_PLACE_BINARY

Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) try {
  return in_place(
      *this, "clamp_", false, [&](const Tensor& s) { return forge::clamp(s, min, max); },
      [&] { clamp_into(*this, *this, min, max); });
}
FORGE_CATCH_OOM("clamp_")

namespace autograd {

// Before fill_/zero_ write `self`: refuse what in_place refuses; a recorded
// tensor filled with a constant no longer depends on anything.
void before_fill(Tensor& self, const char* op) {
  if (!GradMode::is_enabled() || !self.requires_grad()) return;
  FORGE_CHECK(!self.is_leaf(), backward, op,
              "a leaf tensor that requires grad cannot be written in place while grad mode is on; "
              "wrap the update in NoGradGuard");
  FORGE_CHECK(!self.impl()->is_view(), not_implemented, op,
              "writing in place into a view while autograd records is not supported; compute out of place");
  AutogradAccess::set_grad_fn(*self.impl(), nullptr);
  AutogradAccess::set_requires_grad(*self.impl(), false);
}

// Before copy_ writes src into self: refuse what in_place refuses.
void before_copy(const Tensor& self, const Tensor& src) {
  if (!GradMode::is_enabled() || !(self.requires_grad() || src.requires_grad())) return;
  FORGE_CHECK(!(self.requires_grad() && self.is_leaf()), backward, "copy_",
              "a leaf tensor that requires grad cannot be written in place while grad mode is on; "
              "wrap the update in NoGradGuard");
  FORGE_CHECK(!self.impl()->is_view(), not_implemented, "copy_",
              "writing in place into a view while autograd records is not supported; compute out of place");
}

// After copy_: self's history is src's, broadcast and cast.
void after_copy(const Tensor& self, const Tensor& src) {
  if (!GradMode::is_enabled() || !(self.requires_grad() || src.requires_grad())) return;
  if (!src.requires_grad()) {
    AutogradAccess::set_grad_fn(*self.impl(), nullptr);
    AutogradAccess::set_requires_grad(*self.impl(), false);
    return;
  }
  record(self, "copy_", inputs(src), saves(), [](Vjp& v) { v.set(0, v.grad()); });
}

}  // namespace autograd
}  // namespace forge
