#pragma once
// Linear algebra on the backend's GEMM (on the CPU: forge's own AVX-512
// kernels for f32, bf16 and int8, Eigen's for f64 and on builds without
// AVX-512). Operands may be strided views: a transposed matrix is read
// through its strides, not copied. Batches run in parallel in the context's
// task arena.
// Accumulation: f32 for f32, f16 and bf16 inputs (bf16 on AVX512_BF16 cores
// multiplies pairs with VDPBF16PS, which reads subnormal inputs as zero),
// f64 for f64; 16-bit results are rounded once. Floating operands must share
// a dtype.
// int8: matmul, mm and bmm (and their _into forms) also multiply a u8 or i8
// `a` by an i8 `b` into an i32 result (libtorch's _int_mm for i8 x i8; on
// AVX512_VNNI cores, VPDPBUSD). The sums are exact while they fit in i32 and
// wrap modulo 2^32 beyond; there is no gradient. Every other integer or bool
// pairing, and int8 operands of linear, addmm, outer and dot, is a dtype
// error.

#include <optional>

#include "forge/scalar.h"
#include "forge/tensor.h"

namespace forge {

// NumPy/libtorch semantics: 1-D x 1-D is a dot product; a 1-D operand is
// promoted to a matrix (a row on the left, a column on the right) and the
// added dimension removed from the result; batch dimensions broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// [m, k] x [k, n].
Tensor mm(const Tensor& a, const Tensor& b);
// [B, m, k] x [B, k, n], no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);
// x [..., in] times weight [out, in] transposed, plus bias [out] when defined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// beta * bias + alpha * (a [m, k] x b [k, n]); bias broadcasts to [m, n].
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);
// a [n] x b [m] -> [n, m].
Tensor outer(const Tensor& a, const Tensor& b);
// a [n] . b [n] -> a 0-d tensor.
Tensor dot(const Tensor& a, const Tensor& b);

// `out` must have the result's shape and dtype (the operands', or i32 for an
// int8 product), and may not overlap an operand.
Tensor& matmul_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& mm_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& bmm_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& linear_into(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
Tensor& addmm_into(Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta = 1,
                   Scalar alpha = 1);
Tensor& outer_into(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& dot_into(Tensor& out, const Tensor& a, const Tensor& b);

}  // namespace forge
