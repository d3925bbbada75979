// Tensor methods that are ops: a copy (clone, contiguous, to) or an in-place
// write (fill_, zero_, copy_). Each validates, calls the copy family of its
// device's kernel table and records itself for autograd.

#include <cstring>

#include "autograd/record.h"
#include "autograd/rules/views.h"
#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/error.h"
#include "forge/tensor.h"
#include "ops/elementwise_internal.h"

namespace forge {

Tensor Tensor::clone() const try {
  detail::check_input("clone", *this, "tensor");
  Tensor out = detail::allocate(runtime(), shape(), dtype(), "clone");
  detail::copy_cast("clone", out, shape(), detail::operand(out), detail::operand(*this));
  detail::adopt_output(out);
  FORGE_RECORD(clone, out, *this);
  return out;
}
FORGE_CATCH_OOM("clone")

Tensor Tensor::contiguous() const try {
  detail::check_input("contiguous", *this, "tensor");
  return is_contiguous() ? *this : clone();
}
FORGE_CATCH_OOM("contiguous")

Tensor Tensor::to(DType target) const try {
  detail::check_input("to", *this, "tensor");
  if (target == dtype()) return *this;
  Tensor out = detail::cast_temporary(*this, target, "to");
  detail::adopt_output(out);
  // Only a floating result carries a gradient (as requires_grad_ allows only
  // floating tensors): a cast to an integer or bool dtype ends the graph.
  if (is_floating(target)) FORGE_RECORD(to, out, *this);
  return out;
}
FORGE_CATCH_OOM("to")

Tensor& Tensor::fill_(Scalar value) { return fill_as(value, "fill_"); }

Tensor& Tensor::fill_as(Scalar value, const char* op) try {
  detail::check_writable(op, *this, "tensor");
  detail::ScalarSlot element = detail::checked_slot(op, dtype(), value, "value");
  autograd::before_fill(*this, op);
  detail::fill(op, *this, shape(), detail::operand(*this), element.data());
  buffer()->bump_version();
  return *this;
}
FORGE_CATCH_OOM(op)

Tensor& Tensor::zero_() { return fill_as(0.0, "zero_"); }

Tensor& Tensor::copy_(const Tensor& src) try {
  detail::check_writable("copy_", *this, "self");
  if (src.defined() && src.device() != device()) {
    detail::check_same_runtime("copy_", *this, src);
    return copy_(src.to(device()));
  }
  detail::check_input("copy_", src, "src");
  detail::check_same_runtime("copy_", *this, src);
  FORGE_CHECK(broadcast_shapes(src.shape(), shape(), "copy_") == shape(), shape, "copy_", "source of shape ",
              src.shape(), " does not broadcast to ", shape());
  autograd::before_copy(*this, src);
  if (src.buffer() == buffer()) {
    // Overlapping memory: go through a temporary so no element is read after it was written.
    const Tensor tmp = detail::cast_temporary(src, src.dtype(), "copy_");  // internal: no scope adopts it
    detail::copy_cast("copy_", *this, shape(), detail::operand(*this), detail::operand_broadcast(tmp, shape()));
  } else {
    detail::copy_cast("copy_", *this, shape(), detail::operand(*this), detail::operand_broadcast(src, shape()));
  }
  buffer()->bump_version();
  autograd::after_copy(*this, src);
  return *this;
}
FORGE_CATCH_OOM("copy_")

}  // namespace forge
