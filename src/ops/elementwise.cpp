// Binary elementwise ops, comparisons, logic, where and masked_fill: validate,
// allocate from the inputs' context (or take the caller's `out`), then call a
// kernel of the output's device (the elementwise family of its table). Two
// tensor operands of different dtypes are converted to the promoted dtype
// first; scalars, 16-bit floats, true division of integers and outputs of
// another dtype convert inside the kernels (Note [Compute dtype] in
// backend/kernels/elementwise.h).

#include "autograd/rules/elementwise.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

#include "autograd/record.h"
#include "forge/ops.h"
#include "ops/elementwise_internal.h"

namespace forge {
namespace detail {

// Note [Scalar conversion]: a number that becomes a tensor's elements (full,
// fill_, masked_fill, where, pad, clamp's bounds, the scalar operand of ops
// that compute in an integer dtype) must be representable in the dtype:
// - an integer dtype takes an integer within its range, or a float within it,
//   truncated toward zero (libtorch's checked conversion, except that
//   libtorch lets a negative integer wrap into u8: forge refuses it);
// - bool takes false/true, 0 or 1 (libtorch maps any nonzero to true);
// - a floating dtype takes inf, NaN and any value that does not round to inf.
// Anything else is out_of_range naming the op, the value and the dtype.
bool scalar_fits(DType t, Scalar s) {
  return dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return s.is_floating() ? s.to_double() == 0 || s.to_double() == 1 : s.to_int() == 0 || s.to_int() == 1;
    } else if constexpr (std::is_integral_v<T>) {
      constexpr auto lo = static_cast<double>(std::numeric_limits<T>::min());
      constexpr auto hi = static_cast<double>(std::numeric_limits<T>::max());  // 2^63 for i64
      if (s.is_floating()) {
        const double d = s.to_double();  // NaN fails every comparison
        return d >= lo && d <= hi && d < 0x1p63;
      }
      const std::int64_t v = s.to_int();
      return v >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
             (std::is_same_v<T, std::int64_t> || v <= static_cast<std::int64_t>(std::numeric_limits<T>::max()));
    } else {
      const double d = s.to_double();
      return !std::isfinite(d) || std::isfinite(ScalarSlot(t, s).as_double());
    }
  });
}

ScalarSlot checked_slot(const char* op, DType t, Scalar s, const char* what) {
  if (!scalar_fits(t, s)) [[unlikely]] {
    const char* hint = t == DType::boolean ? " (only 0 and 1 do)" : "";
    if (s.is_floating()) {
      char text[32];  // the shortest text that reads back as the same double
      const auto end = std::to_chars(text, text + sizeof text, s.to_double()).ptr;
      FORGE_FAIL(out_of_range, op, what, " ", std::string_view(text, static_cast<std::size_t>(end - text)),
                 " does not fit in ", dtype_name(t), hint);
    }
    FORGE_FAIL(out_of_range, op, what, " ", s.to_int(), " does not fit in ", dtype_name(t), hint);
  }
  return ScalarSlot(t, s);
}

ScalarSlot operand_slot(const char* op, DType compute, Scalar s) {
  return is_floating(compute) ? ScalarSlot(compute, s) : checked_slot(op, compute, s, "scalar");
}

void check_out(const char* op, const Tensor& out, const Tensor& in, const Shape& shape, DType result) {
  check_same_runtime(op, out, in);
  FORGE_CHECK(out.shape() == shape, shape, op, "out has shape ", out.shape(), " but the result has shape ", shape);
  FORGE_CHECK(can_cast(result, out.dtype()), dtype, op, "result type ", dtype_name(result),
              " cannot be written into out of dtype ", dtype_name(out.dtype()));
}

}  // namespace detail

namespace {

using backend::Binary;
using detail::ScalarSlot;

// The dtype `kind` computes in, given its operands' promoted dtype; any_bool:
// an operand (tensor or scalar) is bool.
DType compute_dtype(const char* op, Binary kind, DType promoted, bool any_bool) {
  // libtorch refuses subtraction with any bool operand, and pow of two bools.
  FORGE_CHECK(!(kind == Binary::sub && any_bool), dtype, op,
              "does not take bool operands (to invert a mask use logical_not, for two masks logical_xor)");
  FORGE_CHECK(!(kind == Binary::pow && promoted == DType::boolean), dtype, op, "does not take two bool operands");
  if (kind == Binary::div && !is_floating(promoted)) return DType::f32;  // true division
  return promoted;
}

DType result_dtype(Binary kind, DType compute) noexcept { return backend::gives_bool(kind) ? DType::boolean : compute; }

// An operand: a tensor, or a scalar stored in the compute dtype.
struct Arg {
  const Tensor* tensor = nullptr;
  ScalarSlot* slot = nullptr;

  bool flat(const Shape& shape) const { return !tensor || (tensor->shape() == shape && tensor->is_contiguous()); }
  backend::FlatArg flat_arg() const { return tensor ? detail::flat_arg(*tensor) : slot->flat(); }
  backend::Operand operand(const Shape& shape) const {
    return tensor ? detail::operand_broadcast(*tensor, shape) : slot->operand(shape);
  }
};

// Whether t is one packed row that broadcasts along the leading dims of
// `shape` (a bias of shape [C] or [1, C] against [N, C]).
bool is_row(const Arg& t, const Shape& shape) {
  if (!t.tensor || !t.tensor->is_contiguous() || t.tensor->numel() <= 1) return false;
  const Shape& s = t.tensor->shape();
  int d = 0;
  while (d < s.rank() && s[d] == 1) ++d;
  const int lead = shape.rank() - (s.rank() - d);
  if (lead <= 0) return false;
  for (int k = d; k < s.rank(); ++k)
    if (s[k] != shape[lead + k - d]) return false;
  return true;
}

// out = a (kind) b over packed out, a and b of out's shape (or repeated
// scalars): the common case, no strided setup.
void launch_flat(const char* op, Binary kind, DType compute, const Tensor& out, const backend::FlatArg& a,
                 const backend::FlatArg& b) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::BinaryFlatFn* const kernel = dev.kernels().elementwise.binary_flat.get(op, compute, dev);
  kernel(dev, kind, compute, out.numel(), detail::flat_arg(out), a, b);
}

void launch(const char* op, Binary kind, DType compute, const Tensor& out, const Arg& a, const Arg& b) {
  const Shape& shape = out.shape();
  const bool packed = out.is_contiguous();
  const bool flat_a = a.flat(shape), flat_b = b.flat(shape);
  if (packed && flat_a && flat_b) {
    launch_flat(op, kind, compute, out, a.flat_arg(), b.flat_arg());
    return;
  }
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const backend::ElementwiseKernels& kernels = dev.kernels().elementwise;
  if (packed && a.tensor && b.tensor && ((flat_a && is_row(b, shape)) || (flat_b && is_row(a, shape)))) {
    const Arg& row = flat_a ? b : a;
    const std::int64_t cols = row.tensor->numel();
    kernels.binary_rows.get(op, compute, dev)(dev, kind, compute, out.numel() / cols, cols, detail::flat_arg(out),
                                              flat_a ? a.flat_arg() : b.flat_arg(), row.flat_arg(), !flat_a);
  } else {
    kernels.binary_op.get(op, compute, dev)(dev, kind, compute, shape, detail::operand(out), a.operand(shape),
                                            b.operand(shape));
  }
}

// `t` in `dtype`: itself when it already is, else a converted pool temporary
// (no scope adopts it) kept alive by `holder`. Operands of two dtypes are
// converted up front, so the kernel reads one dtype; the temporary counts in
// the pool's and the scope's peaks.
const Tensor& promoted(const char* op, const Tensor& t, DType dtype, Tensor& holder) {
  if (t.dtype() == dtype) return t;
  holder = detail::cast_temporary(t, dtype, op);
  return holder;
}

// The shared calls of the family (binary, binary_scalar and their _into
// forms) report an allocation failure themselves, naming `op`, so the ops
// that only return one of them need no handler of their own.
Tensor binary(const char* op, Binary kind, const Tensor& a, const Tensor& b) try {
  detail::check_input(op, a, "a");
  detail::check_input(op, b, "b");
  detail::check_same_runtime(op, a, b);
  const DType dtype = a.dtype() == b.dtype() ? a.dtype() : promote_types(a.dtype(), b.dtype());
  const bool any_bool = a.dtype() == DType::boolean || b.dtype() == DType::boolean;
  const DType compute = compute_dtype(op, kind, dtype, any_bool);
  if (a.dtype() == b.dtype() && a.shape() == b.shape()) {  // the common case, no setup
    Tensor out = detail::allocate(a.runtime(), a.shape(), result_dtype(kind, compute), op);
    if (a.is_contiguous() && b.is_contiguous()) {
      launch_flat(op, kind, compute, out, detail::flat_arg(a), detail::flat_arg(b));
    } else {
      launch(op, kind, compute, out, Arg{&a}, Arg{&b});
    }
    detail::adopt_output(out);
    return out;
  }
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor cast_a, cast_b;
  const Tensor& ca = promoted(op, a, dtype, cast_a);
  const Tensor& cb = promoted(op, b, dtype, cast_b);
  Tensor out = detail::allocate(a.runtime(), shape, result_dtype(kind, compute), op);
  launch(op, kind, compute, out, Arg{&ca}, Arg{&cb});
  detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM(op)

// t (op) s, or s (op) t when scalar_first.
Tensor binary_scalar(const char* op, Binary kind, const Tensor& t, Scalar s, bool scalar_first) try {
  detail::check_input(op, t, scalar_first ? "b" : "a");
  const DType compute = compute_dtype(op, kind, result_type(t.dtype(), s), t.dtype() == DType::boolean || s.is_bool());
  ScalarSlot slot = detail::operand_slot(op, compute, s);
  Tensor out = detail::allocate(t.runtime(), t.shape(), result_dtype(kind, compute), op);
  const Arg ta{&t}, sa{nullptr, &slot};
  launch(op, kind, compute, out, scalar_first ? sa : ta, scalar_first ? ta : sa);
  detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM(op)

Tensor& binary_into(const char* op, Binary kind, Tensor& out, const Tensor& a, const Tensor& b) try {
  detail::check_writable(op, out, "out");
  detail::check_input(op, a, "a");
  detail::check_input(op, b, "b");
  detail::check_same_runtime(op, a, b);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  const DType compute = compute_dtype(op, kind, promote_types(a.dtype(), b.dtype()),
                                      a.dtype() == DType::boolean || b.dtype() == DType::boolean);
  detail::check_out(op, out, a, shape, result_dtype(kind, compute));
  detail::check_no_partial_overlap(op, out, a, "a");
  detail::check_no_partial_overlap(op, out, b, "b");
  if (a.dtype() == out.dtype() && b.dtype() == out.dtype() && a.shape() == shape && b.shape() == shape &&
      out.is_contiguous() && a.is_contiguous() && b.is_contiguous()) {  // the common case, no setup
    launch_flat(op, kind, compute, out, detail::flat_arg(a), detail::flat_arg(b));
    out.buffer()->bump_version();
    return out;
  }
  Tensor cast_a, cast_b;
  const Tensor& ca = promoted(op, a, promote_types(a.dtype(), b.dtype()), cast_a);
  const Tensor& cb = promoted(op, b, promote_types(a.dtype(), b.dtype()), cast_b);
  launch(op, kind, compute, out, Arg{&ca}, Arg{&cb});
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM(op)

Tensor& binary_scalar_into(const char* op, Binary kind, Tensor& out, const Tensor& a, Scalar s) try {
  detail::check_writable(op, out, "out");
  detail::check_input(op, a, "a");
  const DType compute = compute_dtype(op, kind, result_type(a.dtype(), s), a.dtype() == DType::boolean || s.is_bool());
  detail::check_out(op, out, a, a.shape(), result_dtype(kind, compute));
  detail::check_no_partial_overlap(op, out, a, "a");
  ScalarSlot slot = detail::operand_slot(op, compute, s);
  launch(op, kind, compute, out, Arg{&a}, Arg{nullptr, &slot});
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM(op)

// libtorch refuses an integer tensor to a negative integer scalar power.
void check_int_pow(const char* op, DType base, Scalar exponent) {
  FORGE_CHECK(!((is_integral(base) || base == DType::boolean) && !exponent.is_floating() && exponent.to_int() < 0),
              invalid_argument, op, "integers to negative integer powers are not allowed (exponent ", exponent.to_int(),
              " for a ", dtype_name(base), " tensor)");
}

void check_bool(const char* op, const Tensor& t, const char* name) {
  FORGE_CHECK(t.dtype() == DType::boolean, dtype, op, name, " must be bool, not ", dtype_name(t.dtype()));
}

Shape broadcast3(const char* op, const Shape& a, const Shape& b, const Shape& c) {
  return broadcast_shapes(broadcast_shapes(a, b, op), c, op);
}

// out = cond ? a : b, every operand already validated.
void launch_where(const char* op, DType compute, const Tensor& out, const Tensor& cond, const Arg& a, const Arg& b) {
  const Shape& shape = out.shape();
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::WhereOpFn* const kernel = dev.kernels().elementwise.where_op.get(op, compute, dev);
  kernel(dev, compute, shape, detail::operand(out), detail::operand_broadcast(cond, shape), a.operand(shape),
         b.operand(shape));
}

}  // namespace

// ---- arithmetic ----

// Each differentiable op records itself when autograd needs it (FORGE_RECORD;
// the rules are in src/autograd/rules/elementwise.cpp).
Tensor add(const Tensor& a, const Tensor& b) try {
  Tensor out = binary("add", Binary::add, a, b);
  FORGE_RECORD(add, out, a, b);
  return out;
}
FORGE_CATCH_OOM("add")
Tensor add(const Tensor& a, Scalar b) try {
  Tensor out = binary_scalar("add", Binary::add, a, b, false);
  FORGE_RECORD(add, out, a, b);
  return out;
}
FORGE_CATCH_OOM("add")
Tensor sub(const Tensor& a, const Tensor& b) try {
  Tensor out = binary("sub", Binary::sub, a, b);
  FORGE_RECORD(sub, out, a, b);
  return out;
}
FORGE_CATCH_OOM("sub")
Tensor sub(const Tensor& a, Scalar b) try {
  Tensor out = binary_scalar("sub", Binary::sub, a, b, false);
  FORGE_RECORD(sub, out, a, b);
  return out;
}
FORGE_CATCH_OOM("sub")
Tensor sub(Scalar a, const Tensor& b) try {
  Tensor out = binary_scalar("sub", Binary::sub, b, a, true);
  FORGE_RECORD(sub, out, a, b);
  return out;
}
FORGE_CATCH_OOM("sub")
Tensor mul(const Tensor& a, const Tensor& b) try {
  Tensor out = binary("mul", Binary::mul, a, b);
  FORGE_RECORD(mul, out, a, b);
  return out;
}
FORGE_CATCH_OOM("mul")
Tensor mul(const Tensor& a, Scalar b) try {
  Tensor out = binary_scalar("mul", Binary::mul, a, b, false);
  FORGE_RECORD(mul, out, a, b);
  return out;
}
FORGE_CATCH_OOM("mul")
Tensor div(const Tensor& a, const Tensor& b) try {
  Tensor out = binary("div", Binary::div, a, b);
  FORGE_RECORD(div, out, a, b);
  return out;
}
FORGE_CATCH_OOM("div")
Tensor div(const Tensor& a, Scalar b) try {
  Tensor out = binary_scalar("div", Binary::div, a, b, false);
  FORGE_RECORD(div, out, a, b);
  return out;
}
FORGE_CATCH_OOM("div")
Tensor div(Scalar a, const Tensor& b) try {
  Tensor out = binary_scalar("div", Binary::div, b, a, true);
  FORGE_RECORD(div, out, a, b);
  return out;
}
FORGE_CATCH_OOM("div")
Tensor pow(const Tensor& a, const Tensor& b) try {
  Tensor out = binary("pow", Binary::pow, a, b);
  FORGE_RECORD(pow, out, a, b);
  return out;
}
FORGE_CATCH_OOM("pow")
Tensor pow(const Tensor& a, Scalar b) try {
  if (a.defined()) check_int_pow("pow", a.dtype(), b);
  Tensor out = binary_scalar("pow", Binary::pow, a, b, false);
  FORGE_RECORD(pow, out, a, b);
  return out;
}
FORGE_CATCH_OOM("pow")
Tensor pow(Scalar a, const Tensor& b) try {
  Tensor out = binary_scalar("pow", Binary::pow, b, a, true);
  FORGE_RECORD(pow, out, a, b);
  return out;
}
FORGE_CATCH_OOM("pow")
Tensor maximum(const Tensor& a, const Tensor& b) try {
  Tensor out = binary("maximum", Binary::maximum, a, b);
  FORGE_RECORD(maximum, out, a, b);
  return out;
}
FORGE_CATCH_OOM("maximum")
Tensor minimum(const Tensor& a, const Tensor& b) try {
  Tensor out = binary("minimum", Binary::minimum, a, b);
  FORGE_RECORD(minimum, out, a, b);
  return out;
}
FORGE_CATCH_OOM("minimum")

Tensor& add_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("add_into", Binary::add, out, a, b);
}
Tensor& add_into(Tensor& out, const Tensor& a, Scalar b) {
  return binary_scalar_into("add_into", Binary::add, out, a, b);
}
Tensor& sub_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("sub_into", Binary::sub, out, a, b);
}
Tensor& sub_into(Tensor& out, const Tensor& a, Scalar b) {
  return binary_scalar_into("sub_into", Binary::sub, out, a, b);
}
Tensor& mul_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("mul_into", Binary::mul, out, a, b);
}
Tensor& mul_into(Tensor& out, const Tensor& a, Scalar b) {
  return binary_scalar_into("mul_into", Binary::mul, out, a, b);
}
Tensor& div_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("div_into", Binary::div, out, a, b);
}
Tensor& div_into(Tensor& out, const Tensor& a, Scalar b) {
  return binary_scalar_into("div_into", Binary::div, out, a, b);
}
Tensor& pow_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("pow_into", Binary::pow, out, a, b);
}
Tensor& pow_into(Tensor& out, const Tensor& a, Scalar b) try {
  if (a.defined()) check_int_pow("pow_into", a.dtype(), b);
  return binary_scalar_into("pow_into", Binary::pow, out, a, b);
}
FORGE_CATCH_OOM("pow_into")
Tensor& maximum_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("maximum_into", Binary::maximum, out, a, b);
}
Tensor& minimum_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("minimum_into", Binary::minimum, out, a, b);
}

// ---- comparisons and logic ----

Tensor eq(const Tensor& a, const Tensor& b) { return binary("eq", Binary::eq, a, b); }
Tensor eq(const Tensor& a, Scalar b) { return binary_scalar("eq", Binary::eq, a, b, false); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary("ne", Binary::ne, a, b); }
Tensor ne(const Tensor& a, Scalar b) { return binary_scalar("ne", Binary::ne, a, b, false); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary("lt", Binary::lt, a, b); }
Tensor lt(const Tensor& a, Scalar b) { return binary_scalar("lt", Binary::lt, a, b, false); }
Tensor le(const Tensor& a, const Tensor& b) { return binary("le", Binary::le, a, b); }
Tensor le(const Tensor& a, Scalar b) { return binary_scalar("le", Binary::le, a, b, false); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary("gt", Binary::gt, a, b); }
Tensor gt(const Tensor& a, Scalar b) { return binary_scalar("gt", Binary::gt, a, b, false); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary("ge", Binary::ge, a, b); }
Tensor ge(const Tensor& a, Scalar b) { return binary_scalar("ge", Binary::ge, a, b, false); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return binary("logical_and", Binary::logical_and, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary("logical_or", Binary::logical_or, a, b); }

Tensor& eq_into(Tensor& out, const Tensor& a, const Tensor& b) { return binary_into("eq_into", Binary::eq, out, a, b); }
Tensor& ne_into(Tensor& out, const Tensor& a, const Tensor& b) { return binary_into("ne_into", Binary::ne, out, a, b); }
Tensor& lt_into(Tensor& out, const Tensor& a, const Tensor& b) { return binary_into("lt_into", Binary::lt, out, a, b); }
Tensor& le_into(Tensor& out, const Tensor& a, const Tensor& b) { return binary_into("le_into", Binary::le, out, a, b); }
Tensor& gt_into(Tensor& out, const Tensor& a, const Tensor& b) { return binary_into("gt_into", Binary::gt, out, a, b); }
Tensor& ge_into(Tensor& out, const Tensor& a, const Tensor& b) { return binary_into("ge_into", Binary::ge, out, a, b); }
Tensor& logical_and_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("logical_and_into", Binary::logical_and, out, a, b);
}
Tensor& logical_or_into(Tensor& out, const Tensor& a, const Tensor& b) {
  return binary_into("logical_or_into", Binary::logical_or, out, a, b);
}

// logical_not(x) is x == 0 compared in x's own dtype (NaN is not 0).
Tensor logical_not(const Tensor& x) { return binary_scalar("logical_not", Binary::eq, x, 0, false); }
Tensor& logical_not_into(Tensor& out, const Tensor& x) try {
  detail::check_writable("logical_not_into", out, "out");
  detail::check_input("logical_not_into", x, "x");
  detail::check_out("logical_not_into", out, x, x.shape(), DType::boolean);
  detail::check_no_partial_overlap("logical_not_into", out, x, "x");
  ScalarSlot zero(x.dtype(), 0);
  launch("logical_not_into", Binary::eq, x.dtype(), out, Arg{&x}, Arg{nullptr, &zero});
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("logical_not_into")

// ---- selection ----

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) try {
  detail::check_input("where", cond, "cond");
  detail::check_input("where", a, "a");
  detail::check_input("where", b, "b");
  detail::check_same_runtime("where", cond, a);
  detail::check_same_runtime("where", cond, b);
  check_bool("where", cond, "cond");
  const Shape shape = broadcast3("where", cond.shape(), a.shape(), b.shape());
  const DType dtype = promote_types(a.dtype(), b.dtype());
  Tensor out = detail::allocate(cond.runtime(), shape, dtype, "where");
  launch_where("where", dtype, out, cond, Arg{&a}, Arg{&b});
  detail::adopt_output(out);
  FORGE_RECORD(where, out, cond, a, b);
  return out;
}
FORGE_CATCH_OOM("where")

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) try {
  detail::check_input("where", cond, "cond");
  detail::check_input("where", a, "a");
  detail::check_same_runtime("where", cond, a);
  check_bool("where", cond, "cond");
  const Shape shape = broadcast_shapes(cond.shape(), a.shape(), "where");
  const DType dtype = result_type(a.dtype(), b);
  ScalarSlot slot = detail::checked_slot("where", dtype, b, "b");
  Tensor out = detail::allocate(cond.runtime(), shape, dtype, "where");
  launch_where("where", dtype, out, cond, Arg{&a}, Arg{nullptr, &slot});
  detail::adopt_output(out);
  FORGE_RECORD(where, out, cond, a, b);
  return out;
}
FORGE_CATCH_OOM("where")

Tensor& where_into(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) try {
  detail::check_writable("where_into", out, "out");
  detail::check_input("where_into", cond, "cond");
  detail::check_input("where_into", a, "a");
  detail::check_input("where_into", b, "b");
  detail::check_same_runtime("where_into", cond, a);
  detail::check_same_runtime("where_into", cond, b);
  check_bool("where_into", cond, "cond");
  const Shape shape = broadcast3("where_into", cond.shape(), a.shape(), b.shape());
  const DType dtype = promote_types(a.dtype(), b.dtype());
  detail::check_out("where_into", out, cond, shape, dtype);
  detail::check_no_partial_overlap("where_into", out, cond, "cond");
  detail::check_no_partial_overlap("where_into", out, a, "a");
  detail::check_no_partial_overlap("where_into", out, b, "b");
  launch_where("where_into", dtype, out, cond, Arg{&a}, Arg{&b});
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("where_into")

namespace {
void check_mask(const char* op, const Tensor& x, const Tensor& mask) {
  detail::check_input(op, x, "x");
  detail::check_input(op, mask, "mask");
  detail::check_same_runtime(op, x, mask);
  check_bool(op, mask, "mask");
  FORGE_CHECK(broadcast_shapes(mask.shape(), x.shape(), op) == x.shape(), shape, op, "mask of shape ", mask.shape(),
              " does not broadcast to x's shape ", x.shape());
}
}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) try {
  check_mask("masked_fill", x, mask);
  ScalarSlot slot = detail::checked_slot("masked_fill", x.dtype(), value, "value");
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), "masked_fill");
  launch_where("masked_fill", x.dtype(), out, mask, Arg{nullptr, &slot}, Arg{&x});
  detail::adopt_output(out);
  FORGE_RECORD(masked_fill, out, x, mask, value);
  return out;
}
FORGE_CATCH_OOM("masked_fill")

Tensor& masked_fill_into(Tensor& out, const Tensor& x, const Tensor& mask, Scalar value) try {
  detail::check_writable("masked_fill_into", out, "out");
  check_mask("masked_fill_into", x, mask);
  detail::check_out("masked_fill_into", out, x, x.shape(), x.dtype());
  detail::check_no_partial_overlap("masked_fill_into", out, x, "x");
  detail::check_no_partial_overlap("masked_fill_into", out, mask, "mask");
  ScalarSlot slot = detail::checked_slot("masked_fill_into", x.dtype(), value, "value");
  launch_where("masked_fill_into", x.dtype(), out, mask, Arg{nullptr, &slot}, Arg{&x});
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("masked_fill_into")

// ---- Tensor methods ----

Tensor Tensor::add(const Tensor& other) const { return forge::add(*this, other); }
Tensor Tensor::add(Scalar other) const { return forge::add(*this, other); }
Tensor Tensor::sub(const Tensor& other) const { return forge::sub(*this, other); }
Tensor Tensor::sub(Scalar other) const { return forge::sub(*this, other); }
Tensor Tensor::mul(const Tensor& other) const { return forge::mul(*this, other); }
Tensor Tensor::mul(Scalar other) const { return forge::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return forge::div(*this, other); }
Tensor Tensor::div(Scalar other) const { return forge::div(*this, other); }
Tensor Tensor::pow(const Tensor& exponent) const { return forge::pow(*this, exponent); }
Tensor Tensor::pow(Scalar exponent) const { return forge::pow(*this, exponent); }
Tensor Tensor::maximum(const Tensor& other) const { return forge::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return forge::minimum(*this, other); }
Tensor Tensor::eq(const Tensor& other) const { return forge::eq(*this, other); }
Tensor Tensor::eq(Scalar other) const { return forge::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return forge::ne(*this, other); }
Tensor Tensor::ne(Scalar other) const { return forge::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return forge::lt(*this, other); }
Tensor Tensor::lt(Scalar other) const { return forge::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return forge::le(*this, other); }
Tensor Tensor::le(Scalar other) const { return forge::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return forge::gt(*this, other); }
Tensor Tensor::gt(Scalar other) const { return forge::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return forge::ge(*this, other); }
Tensor Tensor::ge(Scalar other) const { return forge::ge(*this, other); }
Tensor Tensor::logical_not() const { return forge::logical_not(*this); }
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const { return forge::masked_fill(*this, mask, value); }

}  // namespace forge
