#pragma once
// The linalg family of the kernel table (backend/kernels.h): its entries
// and the device-neutral arguments they take. Batched matrix products, the
// fused attention forward, and dropout's counter-based mask (which attention
// layers apply to their probabilities and outputs). The ops validate shapes,
// dtypes and aliasing before any entry runs.

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/kernels/copy.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::backend {

// One operand of a batched product: its first element, its strides over the
// batch shape (0 where it broadcasts) and its row and column strides, all in
// elements.
struct MatrixOperand {
  std::byte* data = nullptr;
  Strides batch_strides;
  std::int64_t rs = 0, cs = 0;
};

// c[i] = beta * bias[i] + alpha * a[i] b[i] for every index i of `batch`;
// without a bias (bias.data null) c[i] = alpha * a[i] b[i]. Every operand has
// `dtype` (f32, f64, f16 or bf16; the 16-bit ones accumulate in f32), except
// in an int8 product: `dtype` u8 or i8 is a's, b is i8 and c i32, with no
// bias, alpha = beta = 1, and sums in i32 that wrap modulo 2^32. c must not
// overlap the others.
struct MatmulProblem {
  DType dtype = DType::f32;
  Shape batch;
  std::int64_t m = 0, n = 0, k = 0;
  MatrixOperand a, b, c, bias;
  double alpha = 1, beta = 1;
};

// out [batch..., L, Ev] = softmax(q k^T * scale + mask) v for q [batch..., L, E],
// k [batch..., S, E], v [batch..., S, Ev], every operand (and the mask, as
// [batch..., L, S]) addressed through its batch, row and column strides
// (batch stride 0 where it broadcasts). q, k, v and out have `dtype`; the
// mask (mask.data null: none) is boolean (false masks the key out) or of
// `dtype` (added to the scores). With is_causal, key j > i + causal_offset
// is masked out of row i (0: top-left aligned; S - L: bottom-right). A row whose keys are all masked comes out NaN; S =
// 0 gives zeros.
struct AttentionProblem {
  DType dtype = DType::f32;
  Shape batch;
  std::int64_t L = 0, S = 0, E = 0, Ev = 0;
  double scale = 1;
  bool is_causal = false;
  std::int64_t causal_offset = 0;
  MatrixOperand q, k, v, out, mask;
  DType mask_dtype = DType::boolean;
};

// out = x with dropout's mask for `seed` over `shape` (out and x of one
// floating dtype, any strides; out may be x): element i (its logical,
// row-major position) is kept when a counter-based hash of (seed, i) draws
// a uniform u >= p, and written as x[i] / (1 - p); dropped ones are 0. The
// mask depends on seed and i only, never on the layout or the thread count.
// 0 <= p < 1.
using DropoutFn = void(detail::DeviceRuntime& dev, const Shape& shape, const Operand& out, const Operand& x, double p,
                       std::uint64_t seed);
using MatmulFn = void(detail::DeviceRuntime& dev, const MatmulProblem& p);
using AttentionFn = void(detail::DeviceRuntime& dev, const AttentionProblem& p);

// get() with the dtype of the operands (q's for attention, x's for dropout).
struct LinalgKernels {
  Entry<MatmulFn> matmul;
  Entry<AttentionFn> attention;
  Entry<DropoutFn> dropout;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("matmul", k.matmul);
    f("attention", k.attention);
    f("dropout", k.dropout);
  }
};

}  // namespace forge::backend
