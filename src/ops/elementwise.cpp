// add, mul, relu: validate, allocate from the inputs' context (or take the
// caller's `out`), then call an unchecked CPU kernel.

#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge {
namespace {

// Whether a value of dtype `from` may be written into `to` (libtorch's
// can_cast: no float into an integer, nothing non-bool into bool).
bool can_cast(DType from, DType to) noexcept {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::boolean && to == DType::boolean) return false;
  return true;
}

// `t` in `dtype`: itself when it already is, else a converted pool temporary
// (no scope adopts it) kept alive by `holder`. No refcount traffic when equal.
const Tensor& promoted(const char* op, const Tensor& t, DType dtype, Tensor& holder) {
  if (t.dtype() == dtype) return t;
  holder = detail::cast_temporary(t, dtype, op);
  return holder;
}

// dst = a (op) b over `shape`, broadcasting a and b (which share dst's dtype).
void run_broadcast(Runtime& rt, cpu::BinaryOp kind, const Shape& shape, const cpu::Operand& dst, const Tensor& a,
                   const Tensor& b) {
  cpu::binary(rt, kind, shape, dst, detail::operand_broadcast(a, shape), detail::operand_broadcast(b, shape));
}

Tensor binary(const char* op, cpu::BinaryOp kind, const Tensor& a, const Tensor& b) {
  detail::check_input(op, a, "a");
  detail::check_input(op, b, "b");
  detail::check_same_runtime(op, a, b);
  Runtime& rt = a.runtime();
  // The hot case: same shape, same dtype, both contiguous. No strided setup.
  if (a.dtype() == b.dtype() && a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous()) {
    Tensor out = detail::allocate(rt, a.shape(), a.dtype(), op);
    const std::int64_t n = a.numel();
    if (n <= cpu::kGrainElements) {
      cpu::binary_contiguous(kind, a.dtype(), n, detail::first_element(out), detail::first_element(a),
                             detail::first_element(b));
    } else {
      cpu::binary(rt, kind, a.shape(), detail::operand(out), detail::operand(a), detail::operand(b));
    }
    detail::adopt_output(out);
    return out;
  }
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  const DType dtype = promote_types(a.dtype(), b.dtype());
  Tensor cast_a, cast_b;
  const Tensor& ca = promoted(op, a, dtype, cast_a);
  const Tensor& cb = promoted(op, b, dtype, cast_b);
  Tensor out = detail::allocate(rt, shape, dtype, op);
  run_broadcast(rt, kind, shape, detail::operand(out), ca, cb);
  detail::adopt_output(out);
  return out;
}

Tensor& binary_into(const char* op, cpu::BinaryOp kind, Tensor& out, const Tensor& a, const Tensor& b) {
  detail::check_writable(op, out, "out");
  detail::check_input(op, a, "a");
  detail::check_input(op, b, "b");
  detail::check_same_runtime(op, out, a);
  detail::check_same_runtime(op, out, b);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  FORGE_CHECK(out.shape() == shape, shape, op, "out has shape ", out.shape(), " but the result has shape ", shape);
  const DType dtype = promote_types(a.dtype(), b.dtype());
  FORGE_CHECK(can_cast(dtype, out.dtype()), dtype, op, "result type ", dtype_name(dtype),
              " cannot be written into out of dtype ", dtype_name(out.dtype()));
  detail::check_no_partial_overlap(op, out, a, "a");
  detail::check_no_partial_overlap(op, out, b, "b");
  Runtime& rt = out.runtime();
  if (a.dtype() == out.dtype() && b.dtype() == out.dtype() && a.shape() == shape && b.shape() == shape &&
      out.numel() <= cpu::kGrainElements && out.is_contiguous() && a.is_contiguous() && b.is_contiguous()) {
    cpu::binary_contiguous(kind, out.dtype(), out.numel(), detail::first_element(out), detail::first_element(a),
                           detail::first_element(b));
    out.buffer()->bump_version();
    return out;
  }
  Tensor cast_a, cast_b;
  const Tensor& ca = promoted(op, a, dtype, cast_a);
  const Tensor& cb = promoted(op, b, dtype, cast_b);
  if (out.dtype() == dtype) {
    run_broadcast(rt, kind, shape, detail::operand(out), ca, cb);
  } else {  // compute in the promoted dtype, then convert into out
    Tensor tmp = detail::allocate(rt, shape, dtype, op);
    run_broadcast(rt, kind, shape, detail::operand(tmp), ca, cb);
    cpu::copy_cast(rt, shape, detail::operand(out), detail::operand(tmp));
  }
  out.buffer()->bump_version();
  return out;
}

void check_relu_dtype(const char* op, DType dtype) {
  FORGE_CHECK(dtype != DType::boolean, dtype, op, "does not take bool tensors");
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", cpu::BinaryOp::add, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", cpu::BinaryOp::mul, a, b); }

Tensor& add_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("add_into", cpu::BinaryOp::add, out, a, b);
}
Tensor& mul_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("mul_into", cpu::BinaryOp::mul, out, a, b);
}

Tensor relu(const Tensor& x) {
  detail::check_input("relu", x, "x");
  check_relu_dtype("relu", x.dtype());
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), "relu");
  cpu::relu(x.runtime(), x.shape(), detail::operand(out), detail::operand(x));
  detail::adopt_output(out);
  return out;
}

Tensor& relu_into(Tensor& out, const Tensor& x) {
  detail::check_writable("relu_into", out, "out");
  detail::check_input("relu_into", x, "x");
  detail::check_same_runtime("relu_into", out, x);
  check_relu_dtype("relu_into", x.dtype());
  FORGE_CHECK(out.shape() == x.shape(), shape, "relu_into", "out has shape ", out.shape(), " but x has shape ",
              x.shape());
  FORGE_CHECK(out.dtype() == x.dtype(), dtype, "relu_into", "out is ", dtype_name(out.dtype()), " but x is ",
              dtype_name(x.dtype()));
  detail::check_no_partial_overlap("relu_into", out, x, "x");
  cpu::relu(out.runtime(), x.shape(), detail::operand(out), detail::operand(x));
  out.buffer()->bump_version();
  return out;
}

}  // namespace forge
