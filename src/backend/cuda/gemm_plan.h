#pragma once
// How a row-major batched product (backend::MatmulProblem) maps onto cuBLAS's
// column-major GEMM. Plain C++ (no CUDA header), so the mapping is tested on
// the host (tests/cuda_gemm_plan_test.cpp); gemm_cublas.cpp runs the plan.
//
//   - A row-major block X [rows, cols] with strides (rs, cs) is, to cuBLAS,
//     either X^T stored column-major with ld = rs (cs == 1) or X stored
//     column-major with ld = cs (rs == 1). A stride of a dimension of extent 1
//     is never used, so it does not matter. Anything else (a broadcast row,
//     a non-unit inner stride, overlapping rows) cuBLAS cannot read: such an
//     operand is packed into contiguous row-major scratch first, and such an
//     output is computed into scratch and copied out (the family's contract
//     allows any strides, as the CPU kernel takes them).
//   - C row-major: cuBLAS computes C^T = B^T A^T (the operands swap, its m
//     is forge's n). C column-major: cuBLAS computes C = A B as written.
//   - The batch: when b broadcasts over it and a's and c's batches continue
//     their rows, it folds into m (one GEMM, as the CPU kernel does). Else
//     its dimensions coalesce (extent-1 ones dropped, neighbours merged where
//     every operand's strides allow); the innermost becomes cuBLAS's strided
//     batch (stride 0 where an operand broadcasts), the others a host loop.
//   - The bias is copied into c first and scaled by beta in the GEMM.

#include <algorithm>
#include <cstdint>
#include <optional>

#include "backend/kernels/linalg.h"

namespace forge::cuda::gemm {

using backend::MatmulProblem;

enum class Op : std::uint8_t { n, t };

// A row-major block as column-major memory. row_major: the memory is the
// block's transpose, column-major with leading dimension ld (= the row
// stride); otherwise the block itself, column-major, ld = the column stride.
struct BlockLayout {
  bool row_major = true;
  std::int64_t ld = 1;
};

// The layout cuBLAS can read a [rows, cols] block with strides (rs, cs) in,
// preferring row-major; nullopt when it has none (the block must be packed).
// rows and cols are positive.
inline std::optional<BlockLayout> column_major_layout(std::int64_t rows, std::int64_t cols, std::int64_t rs,
                                                      std::int64_t cs) noexcept {
  if (cs == 1 || cols == 1) {
    const std::int64_t ld = rows == 1 ? cols : rs;  // one row: its stride is never followed
    if (ld >= cols && ld >= 1) return BlockLayout{true, ld};
  }
  if (rs == 1 || rows == 1) {
    const std::int64_t ld = cols == 1 ? rows : cs;
    if (ld >= rows && ld >= 1) return BlockLayout{false, ld};
  }
  return std::nullopt;
}

// One operand as cuBLAS takes it: op, the stored (column-major) matrix's
// rows and columns, and its leading dimension.
struct Side {
  Op op = Op::n;
  std::int64_t rows = 0, cols = 0, ld = 1;
};

// A problem's batch as cuBLAS runs it: `count` products strided by
// first/second/out (cuBLAS's operands), inside a host loop over `outer`
// with its own strides per operand. All strides in elements.
struct BatchPlan {
  std::int64_t count = 1;
  std::int64_t first_stride = 0, second_stride = 0, out_stride = 0;
  Shape outer;
  Strides outer_first, outer_second, outer_out;
};

struct GemmPlan {
  // After folding: forge's row-major problem, and whether each of its
  // operands goes through contiguous row-major scratch ([batch..., rows,
  // cols]) first (a, b) or last (c, then copied out).
  MatmulProblem problem;
  bool pack_a = false, pack_b = false, stage_c = false;
  // cuBLAS's problem: out [m, n] = op(first) op(second), k the inner extent.
  bool swap = false;  // first is forge's b (cuBLAS computes C^T = B^T A^T)
  std::int64_t m = 0, n = 0, k = 0;
  Side first, second, out;
  BatchPlan batch;
  // Whether every extent, leading dimension and the batch count fit the
  // 32-bit fields of cuBLASLt's layouts (else cuBLAS's _64 entry points run).
  bool fits_int32 = true;
};

namespace detail {

inline bool broadcasts(const Shape& batch, const Strides& strides) noexcept {
  for (int d = 0; d < batch.rank(); ++d)
    if (batch[d] != 1 && strides[d] != 0) return false;
  return true;
}

// The row stride of x with the batch folded into its rows, when consecutive
// batch entries follow its last row (gemm.cpp's fold_rows).
inline bool fold_rows(const Shape& batch, const Strides& strides, std::int64_t m, std::int64_t& rs) noexcept {
  std::int64_t row_stride = rs, expected = 0;
  bool known = m > 1;
  if (known) expected = m * rs;
  for (int d = batch.rank() - 1; d >= 0; --d) {
    if (batch[d] == 1) continue;
    if (!known) {
      row_stride = strides[d];
      expected = strides[d] * batch[d];
      known = true;
      continue;
    }
    if (strides[d] != expected) return false;
    expected *= batch[d];
  }
  rs = row_stride;
  return true;
}

inline Strides contiguous_batch(const Shape& batch, std::int64_t matrix_elements) {
  Strides s;
  s.resize(batch.rank());
  std::int64_t step = matrix_elements;
  for (int d = batch.rank() - 1; d >= 0; --d) {
    s[d] = step;
    step *= batch[d];
  }
  return s;
}

inline Side side(bool row_major, std::int64_t ld, bool want_transpose, std::int64_t rows, std::int64_t cols) {
  // The stored matrix is X (column-major) or X^T; cuBLAS needs Y = X or X^T.
  const bool stored_transposed = row_major;
  const Op op = stored_transposed == want_transpose ? Op::n : Op::t;
  // rows/cols: the extents of what cuBLAS reads as op(stored) = [rows, cols].
  return op == Op::n ? Side{op, rows, cols, ld} : Side{op, cols, rows, ld};
}

}  // namespace detail

// Folds the batch into the rows when b (and the bias) allow: one GEMM of
// [batch * m, k] x [k, n] instead of a batch. Leaves p alone otherwise.
inline void fold_batch(MatmulProblem& p) {
  if (p.batch.rank() == 0 || !detail::broadcasts(p.batch, p.b.batch_strides)) return;
  std::int64_t a_rs = p.a.rs, c_rs = p.c.rs, bias_rs = p.bias.rs;
  if (!detail::fold_rows(p.batch, p.a.batch_strides, p.m, a_rs) ||
      !detail::fold_rows(p.batch, p.c.batch_strides, p.m, c_rs))
    return;
  if (p.bias.data && !detail::fold_rows(p.batch, p.bias.batch_strides, p.m, bias_rs)) return;
  p.m *= p.batch.numel();
  p.a.rs = a_rs;
  p.c.rs = c_rs;
  p.bias.rs = bias_rs;
  p.batch = Shape{};
  p.a.batch_strides = p.b.batch_strides = p.c.batch_strides = p.bias.batch_strides = Strides{};
}

// The batch dimensions of `batch` coalesced for three operands' strides:
// extent-1 dimensions dropped and a dimension merged into the next when
// every operand steps over both as over one.
inline void coalesce_batch(const Shape& batch, const Strides (&strides)[3], Shape& out_shape,
                           Strides (&out_strides)[3]) {
  out_shape = Shape{};
  for (auto& s : out_strides) s = Strides{};
  for (int d = 0; d < batch.rank(); ++d) {
    if (batch[d] == 1) continue;
    const int last = out_shape.rank() - 1;
    bool merge = last >= 0;
    for (int o = 0; o < 3 && merge; ++o) merge = out_strides[o][last] == strides[o][d] * batch[d];
    if (merge) {
      out_shape[last] *= batch[d];
      for (int o = 0; o < 3; ++o) out_strides[o][last] = strides[o][d];
      continue;
    }
    out_shape.push_back(batch[d]);
    for (int o = 0; o < 3; ++o) out_strides[o].push_back(strides[o][d]);
  }
}

// The plan of a non-empty problem (m, n, k > 0).
inline GemmPlan plan(const MatmulProblem& problem) {
  GemmPlan g;
  g.problem = problem;
  MatmulProblem& p = g.problem;
  if (p.beta == 0) p.bias.data = nullptr;  // libtorch: beta 0 ignores the bias, NaN included
  fold_batch(p);

  auto a = column_major_layout(p.m, p.k, p.a.rs, p.a.cs);
  auto b = column_major_layout(p.k, p.n, p.b.rs, p.b.cs);
  auto c = column_major_layout(p.m, p.n, p.c.rs, p.c.cs);
  Strides a_batch = p.a.batch_strides, b_batch = p.b.batch_strides, c_batch = p.c.batch_strides;
  if (!a) {
    g.pack_a = true;
    a = BlockLayout{true, p.k};
    a_batch = detail::contiguous_batch(p.batch, p.m * p.k);
  }
  if (!b) {
    g.pack_b = true;
    b = BlockLayout{true, p.n};
    b_batch = detail::contiguous_batch(p.batch, p.k * p.n);
  }
  if (!c) {
    g.stage_c = true;
    c = BlockLayout{true, p.n};
    c_batch = detail::contiguous_batch(p.batch, p.m * p.n);
  }

  g.swap = c->row_major;
  g.k = p.k;
  if (g.swap) {  // C^T [n, m] = B^T [n, k] A^T [k, m]
    g.m = p.n;
    g.n = p.m;
    g.first = detail::side(b->row_major, b->ld, true, g.m, g.k);
    g.second = detail::side(a->row_major, a->ld, true, g.k, g.n);
  } else {  // C [m, n] = A [m, k] B [k, n]
    g.m = p.m;
    g.n = p.n;
    g.first = detail::side(a->row_major, a->ld, false, g.m, g.k);
    g.second = detail::side(b->row_major, b->ld, false, g.k, g.n);
  }
  g.out = Side{Op::n, g.m, g.n, c->ld};

  const Strides in[3] = {g.swap ? b_batch : a_batch, g.swap ? a_batch : b_batch, c_batch};
  Shape dims;
  Strides dim_strides[3];
  coalesce_batch(p.batch, in, dims, dim_strides);
  BatchPlan& bp = g.batch;
  if (dims.rank() > 0) {
    const int last = dims.rank() - 1;
    bp.count = dims[last];
    bp.first_stride = dim_strides[0][last];
    bp.second_stride = dim_strides[1][last];
    bp.out_stride = dim_strides[2][last];
    for (int d = 0; d < last; ++d) {
      bp.outer.push_back(dims[d]);
      bp.outer_first.push_back(dim_strides[0][d]);
      bp.outer_second.push_back(dim_strides[1][d]);
      bp.outer_out.push_back(dim_strides[2][d]);
    }
  }

  constexpr std::int64_t kInt32Max = 2147483647;
  for (const std::int64_t v : {g.m, g.n, g.k, g.first.ld, g.second.ld, g.out.ld, bp.count})
    if (v > kInt32Max) g.fits_int32 = false;
  return g;
}

// The alignment (a power of two, at most 256 bytes) that cuBLASLt may assume
// of an operand: its address, leading dimension and batch stride in bytes
// all divide by it (cuBLASLt's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES).
inline std::uint32_t alignment_bytes(std::uintptr_t address, std::size_t element_bytes, std::int64_t ld,
                                     std::int64_t batch_stride) noexcept {
  std::uint64_t bits = static_cast<std::uint64_t>(address) | 256u;
  bits |= static_cast<std::uint64_t>(ld) * element_bytes;
  if (batch_stride != 0) bits |= static_cast<std::uint64_t>(batch_stride) * element_bytes;
  return static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

// The element offset of batch entry `index` (row-major over `shape`).
inline std::int64_t batch_offset(const Shape& shape, const Strides& strides, std::int64_t index) noexcept {
  std::int64_t off = 0;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    off += (index % shape[d]) * strides[d];
    index /= shape[d];
  }
  return off;
}

}  // namespace forge::cuda::gemm
