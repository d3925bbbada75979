#pragma once
// The elementwise family of the kernel table (backend/kernels.h): binary ops
// and comparisons, unary ops, where, and the fused activation VJPs; the
// device-neutral arguments they take. Callers (src/ops/elementwise.cpp,
// unary.cpp, src/autograd/rules/unary.cpp) have validated shapes, dtypes and
// aliasing.
//
// Note [Compute dtype]: every kernel takes the dtype the op computes in (the
// promoted dtype), and get() is asked for that dtype. Operands and the output
// may have any dtype: a run whose operands already hold the compute type is
// read and written in place; any other is converted. f16 and bf16 compute in
// f32 and are rounded once to the compute dtype before being stored, so an
// f16 result written into an f32 `out` holds the f16 value, as in libtorch.
// Likewise i8 computes in i32 and wraps to 8 bits before being stored (int8
// arithmetic mod 256, as libtorch's).

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/kernels/copy.h"

namespace forge::backend {

enum class Binary : std::uint8_t {
  add,
  sub,
  mul,
  div,
  pow,
  maximum,
  minimum,  // results in the compute dtype
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logical_and,
  logical_or,  // bool results
};
inline constexpr int kNumBinary = 15;
constexpr bool gives_bool(Binary op) noexcept { return op >= Binary::eq; }

enum class Unary : std::uint8_t {
  neg,
  abs,
  sign,
  square,
  relu,
  clamp,  // any non-bool compute dtype (abs, sign: bool too)
  exp,
  expm1,
  log,
  log1p,
  sqrt,
  rsqrt,
  reciprocal,
  sin,
  cos,  // f32 or f64 only
  tanh,
  sigmoid,
  leaky_relu,
  gelu,
  gelu_tanh,
  silu,
  softplus,
  elu,
  erf,
};
inline constexpr int kNumUnary = 24;

// The numbers some unary ops take, already rounded to the compute dtype.
struct UnaryParams {
  double p0 = 0;                        // leaky_relu: slope; softplus: beta; elu: alpha
  double p1 = 0;                        // softplus: threshold
  bool has_lo = false, has_hi = false;  // clamp bounds, as double and as integer
  double lo = 0, hi = 0;
  std::int64_t lo_int = 0, hi_int = 0;
};

// One operand of a flat (one-dimensional) run: stride 0 repeats one element.
struct FlatArg {
  std::byte* data;
  DType dtype;
  std::int64_t stride;
};

// The fused activation VJPs. The saved value each kind reads: the op's output
// (relu, sigmoid, tanh) or its input (the gelus, silu).
enum class UnaryBackward : std::uint8_t { relu, sigmoid, tanh, gelu, gelu_tanh, silu };

// out = a (op) b over `shape`, operands broadcast (strides 0) as given.
using BinaryOpFn = void(detail::DeviceRuntime& dev, Binary op, DType compute, const Shape& shape, const Operand& out,
                        const Operand& a, const Operand& b);
// The same over n elements addressed by (data, stride): no strided setup; for
// contiguous tensors and tensor-scalar forms.
using BinaryFlatFn = void(detail::DeviceRuntime& dev, Binary op, DType compute, std::int64_t n, const FlatArg& out,
                          const FlatArg& a, const FlatArg& b);
// out[r, c] = full[r, c] (op) row[c] (or row[c] (op) full[r, c] when
// row_first) over rows x cols, every operand packed: a bias added to every row.
using BinaryRowsFn = void(detail::DeviceRuntime& dev, Binary op, DType compute, std::int64_t rows, std::int64_t cols,
                          const FlatArg& out, const FlatArg& full, const FlatArg& row, bool row_first);
using UnaryOpFn = void(detail::DeviceRuntime& dev, Unary op, DType compute, const UnaryParams& params,
                       const Shape& shape, const Operand& out, const Operand& in);
using UnaryFlatFn = void(detail::DeviceRuntime& dev, Unary op, DType compute, const UnaryParams& params, std::int64_t n,
                         const FlatArg& out, const FlatArg& in);
// out = cond ? a : b; cond is bool.
using WhereOpFn = void(detail::DeviceRuntime& dev, DType compute, const Shape& shape, const Operand& out,
                       const Operand& cond, const Operand& a, const Operand& b);
// out[i] = g[i] * f'(...) from saved[i], over n packed elements of `dtype`;
// out may not alias the inputs.
using UnaryBackwardFlatFn = void(detail::DeviceRuntime& dev, UnaryBackward op, DType dtype, std::int64_t n,
                                 std::byte* out, const std::byte* g, const std::byte* saved);

struct ElementwiseKernels {
  Entry<BinaryOpFn> binary_op;
  Entry<BinaryFlatFn> binary_flat;
  Entry<BinaryRowsFn> binary_rows;
  Entry<UnaryOpFn> unary_op;
  Entry<UnaryFlatFn> unary_flat;
  Entry<WhereOpFn> where_op;
  Entry<UnaryBackwardFlatFn> unary_backward_flat;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("binary_op", k.binary_op);
    f("binary_flat", k.binary_flat);
    f("binary_rows", k.binary_rows);
    f("unary_op", k.unary_op);
    f("unary_flat", k.unary_flat);
    f("where_op", k.where_op);
    f("unary_backward_flat", k.unary_backward_flat);
  }
};

}  // namespace forge::backend
