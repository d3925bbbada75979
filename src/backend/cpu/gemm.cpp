// GEMM policy:
// - f32 on an AVX-512 build runs forge's own packed kernels (sgemm.h), which
//   take any strides; what follows about Eigen holds for f64, and for f32 on
//   builds without AVX-512 (FORGE_NATIVE=OFF).
// - A block with a unit column stride maps as a row-major Eigen::Map with an
//   outer stride, one with a unit row stride as a column-major Map; only
//   blocks with neither are packed (pooled scratch). A column-major C is
//   computed as C^T = B^T A^T, so Eigen sees a row-major C only.
// - Eigen's GEMM runs single-threaded here; a product of at least
//   kParallelGemmFlops multiply-adds is cut into one block of C's columns (or
//   rows, whichever is longer) per thread.
// - Batches run in parallel, one contiguous range of batch indices per
//   thread, when that divides the work evenly or the products are small;
//   otherwise one product at a time, each split over the threads.
// - int8 products (a u8 or i8, b i8, C i32) run sgemm.h's int8 kernel,
//   VPDPBUSD where the build has AVX512_VNNI and a portable loop nest
//   elsewhere; a C without unit column stride is computed into scratch.
// - bf16 products run sgemm.h's bf16 kernel (f32 accumulation) where the
//   build has AVX512_BF16; f16 products, and bf16 elsewhere, widen their
//   operands into f32 scratch. Either way C is accumulated in f32 and
//   rounded back once.

#include "backend/cpu/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/eigen.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/sgemm.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

template <typename T, int Order>
using MatMap =
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T, int Order>
using ConstMatMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, Eigen::Unaligned, Eigen::OuterStride<>>;

enum class Layout { row, col, general };

// How a block is read in place, and its outer stride. A dimension of size 1
// has no meaningful stride, so it never forces a copy.
Layout layout_of(std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs, std::int64_t& outer) {
  if (cs == 1 || cols <= 1) {
    if (rows <= 1) {
      outer = std::max<std::int64_t>(cols, 1);
      return Layout::row;
    }
    if (rs >= 0) {
      outer = rs;
      return Layout::row;
    }
  }
  if (rs == 1 || rows <= 1) {
    if (cols <= 1) {
      outer = std::max<std::int64_t>(rows, 1);
      return Layout::col;
    }
    if (cs >= 0) {
      outer = cs;
      return Layout::col;
    }
  }
  return Layout::general;
}

// C = beta * C, where beta == 0 writes zeros.
template <typename T>
void scale_block(std::int64_t m, std::int64_t n, T beta, T* c, std::int64_t rs, std::int64_t cs) {
  for (std::int64_t i = 0; i < m; ++i) {
    T* row = c + i * rs;
    if (cs == 1) {
      if (beta == T(0))
        std::fill(row, row + n, T(0));
      else
        for (std::int64_t j = 0; j < n; ++j) row[j] *= beta;
    } else {
      for (std::int64_t j = 0; j < n; ++j) row[j * cs] = beta == T(0) ? T(0) : row[j * cs] * beta;
    }
  }
}

template <typename T>
void pack_rows(std::int64_t rows, std::int64_t cols, const T* src, std::int64_t rs, std::int64_t cs, T* dst) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) dst[i * cols + j] = src[i * rs + j * cs];
}

// Packing scratch lent to this thread by a WorkerScratch (see gemm.h).
thread_local std::byte* tls_scratch = nullptr;
thread_local std::size_t tls_scratch_bytes = 0;

// Eigen's blocking for C [m, n] row-major, which Eigen computes as
// C^T = B^T A^T: its mc, nc and kc, and the elements A's and B's packing
// buffers take (A's rounded so that B's starts 64-byte aligned).
struct BlockSizes {
  Eigen::Index mc, nc, kc;
  std::size_t a_elements, total_elements;
};
template <typename T>
BlockSizes block_sizes(Eigen::Index m, Eigen::Index n, Eigen::Index k) {
  BlockSizes s{n, m, k, 0, 0};
  Eigen::internal::computeProductBlockingSizes<T, T, 1>(s.kc, s.mc, s.nc, Eigen::Index{1});
  s.a_elements = static_cast<std::size_t>(s.mc * s.kc + 16) / 16 * 16;
  s.total_elements = s.a_elements + static_cast<std::size_t>(s.kc * s.nc);
  return s;
}

// Eigen's packing buffers for one product: the thread's lent scratch when it
// is large enough, else leased from the pool. Eigen's own GEMM would malloc
// them per call, and at conv2d's many mid-sized products that costs more in
// page faults than the arithmetic.
template <typename T>
class PooledBlocking : public Eigen::internal::level3_blocking<T, T> {
 public:
  PooledBlocking(detail::DeviceRuntime& rt, Eigen::Index m, Eigen::Index n, Eigen::Index k) {
    const BlockSizes s = block_sizes<T>(m, n, k);
    this->m_mc = s.mc;
    this->m_nc = s.nc;
    this->m_kc = s.kc;
    T* base;
    if (s.total_elements * sizeof(T) <= tls_scratch_bytes) {
      base = reinterpret_cast<T*>(tls_scratch);
    } else {
      lease_ = rt.pool().scratch<T>(s.total_elements);
      base = lease_.data();
    }
    this->m_blockA = base;
    this->m_blockB = base + s.a_elements;
  }

 private:
  ScratchLease<T> lease_;
};

// C (row-major, outer stride c_outer) += alpha * A B.
template <typename T, int OA, int OB>
void product(detail::DeviceRuntime& rt, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
             std::int64_t a_outer, const T* b, std::int64_t b_outer, T* c, std::int64_t c_outer) {
  if (m == 1 || n == 1 || m + n + k < 20) {
    // Vector and tiny products: Eigen's GEMV and coefficient kernels.
    const ConstMatMap<T, OA> A(a, m, k, Eigen::OuterStride<>(a_outer));
    const ConstMatMap<T, OB> B(b, k, n, Eigen::OuterStride<>(b_outer));
    MatMap<T, Eigen::RowMajor> C(c, m, n, Eigen::OuterStride<>(c_outer));
    C.noalias() += alpha * A * B;
    return;
  }
  PooledBlocking<T> blocking(rt, m, n, k);
  Eigen::internal::general_matrix_matrix_product<Eigen::Index, T, OA, false, T, OB, false, Eigen::RowMajor, 1>::run(
      m, n, k, a, a_outer, b, b_outer, c, 1, c_outer, alpha, blocking);
}

// Floats of packing scratch for one of sgemm.h's kernels: the thread's lent
// scratch when it is large enough, else leased from the pool into `lease`.
float* packing_scratch(detail::DeviceRuntime& rt, std::size_t floats, ScratchLease<float>& lease) {
  if (floats * sizeof(float) <= tls_scratch_bytes) return reinterpret_cast<float*>(tls_scratch);
  lease = rt.pool().scratch<float>(floats);
  return lease.data();
}

// sgemm.h's f32 kernels on a row-major C.
void native_sgemm(detail::DeviceRuntime& rt, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                  const float* a, std::int64_t a_rs, std::int64_t a_cs, const float* b, std::int64_t b_rs,
                  std::int64_t b_cs, float beta, float* c, std::int64_t c_rs) {
  ScratchLease<float> lease;
  float* scratch = packing_scratch(rt, sgemm_scratch_floats(m, n, k, a_rs, a_cs, b_rs, b_cs), lease);
  sgemm(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, scratch);
}

template <typename T>
void gemm_serial(detail::DeviceRuntime& rt, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                 std::int64_t a_rs, std::int64_t a_cs, const T* b, std::int64_t b_rs, std::int64_t b_cs, T beta, T* c,
                 std::int64_t c_rs, std::int64_t c_cs) {
  if (m <= 0 || n <= 0) return;
  std::int64_t c_outer = 0;
  const Layout lc = layout_of(m, n, c_rs, c_cs, c_outer);
  if (lc == Layout::col) {
    gemm_serial<T>(rt, n, m, k, alpha, b, b_cs, b_rs, a, a_cs, a_rs, beta, c, c_cs, c_rs);
    return;
  }
  if (lc == Layout::general) {
    ScratchLease<T> tmp = rt.pool().scratch<T>(static_cast<std::size_t>(m * n));
    if (beta != T(0)) pack_rows(m, n, c, c_rs, c_cs, tmp.data());
    gemm_serial<T>(rt, m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, tmp.data(), n, 1);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * c_rs + j * c_cs] = tmp[static_cast<std::size_t>(i * n + j)];
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0 && n > 1 && m + n + k >= 20 && sgemm_available()) {
      native_sgemm(rt, m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs);
      return;
    }
  }
  if (beta != T(1)) scale_block(m, n, beta, c, c_rs, c_cs);
  if (k <= 0) return;

  std::int64_t a_outer = 0, b_outer = 0;
  Layout la = layout_of(m, k, a_rs, a_cs, a_outer);
  Layout lb = layout_of(k, n, b_rs, b_cs, b_outer);
  ScratchLease<T> packed_a, packed_b;
  if (la == Layout::general) {
    packed_a = rt.pool().scratch<T>(static_cast<std::size_t>(m * k));
    pack_rows(m, k, a, a_rs, a_cs, packed_a.data());
    a = packed_a.data();
    la = Layout::row;
    a_outer = k;
  }
  if (lb == Layout::general) {
    packed_b = rt.pool().scratch<T>(static_cast<std::size_t>(k * n));
    pack_rows(k, n, b, b_rs, b_cs, packed_b.data());
    b = packed_b.data();
    lb = Layout::row;
    b_outer = n;
  }
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (la == Layout::row) {
    if (lb == Layout::row)
      product<T, R, R>(rt, m, n, k, alpha, a, a_outer, b, b_outer, c, c_outer);
    else
      product<T, R, C>(rt, m, n, k, alpha, a, a_outer, b, b_outer, c, c_outer);
  } else {
    if (lb == Layout::row)
      product<T, C, R>(rt, m, n, k, alpha, a, a_outer, b, b_outer, c, c_outer);
    else
      product<T, C, C>(rt, m, n, k, alpha, a, a_outer, b, b_outer, c, c_outer);
  }
}

// Runs block(row0, rows, col0, cols) over C [m, n]: one block of C's columns
// (or rows, whichever is longer) per thread when `parallel` and the product
// has at least kParallelGemmFlops multiply-adds, each lent
// scratch_bytes(rows, cols) of WorkerScratch; otherwise the whole of C on
// the calling thread.
template <typename Bytes, typename Block>
void for_blocks(detail::DeviceRuntime& rt, bool parallel, std::int64_t m, std::int64_t n, std::int64_t k,
                Bytes&& scratch_bytes, Block&& block) {
  const int threads = rt.threads();
  const double flops = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const bool split_cols = n >= m;
  const std::int64_t extent = split_cols ? n : m;
  // Blocks narrower than this lose more to packing than they gain.
  constexpr std::int64_t kMinBlock = 32;
  const std::int64_t blocks = std::min<std::int64_t>(threads, extent / kMinBlock);
  if (!parallel || threads <= 1 || flops < static_cast<double>(kParallelGemmFlops) || blocks <= 1) {
    block(std::int64_t{0}, m, std::int64_t{0}, n);
    return;
  }
  // Block edges on multiples of 16 keep each block's columns vector-aligned.
  auto edge = [&](std::int64_t i) {
    if (i == blocks) return extent;
    return std::min(extent, (extent * i / blocks + 8) / 16 * 16);
  };
  std::int64_t widest = 0;
  for (std::int64_t blk = 0; blk < blocks; ++blk) widest = std::max(widest, edge(blk + 1) - edge(blk));
  const WorkerScratch scratch(rt, blocks, split_cols ? scratch_bytes(m, widest) : scratch_bytes(widest, n));
  rt.parallel_for(blocks, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t blk = first; blk < last; ++blk) {
      const std::int64_t lo = edge(blk), hi = edge(blk + 1);
      if (hi <= lo) continue;
      const WorkerScratch::Lend lend = scratch.lend(blk);
      if (split_cols)
        block(std::int64_t{0}, m, lo, hi - lo);
      else
        block(lo, hi - lo, std::int64_t{0}, n);
    }
  });
}

template <typename T>
void gemm_impl(detail::DeviceRuntime& rt, bool parallel, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
               const T* a, std::int64_t a_rs, std::int64_t a_cs, const T* b, std::int64_t b_rs, std::int64_t b_cs,
               T beta, T* c, std::int64_t c_rs, std::int64_t c_cs) {
  for_blocks(
      rt, parallel, m, n, k,
      [&](std::int64_t rows, std::int64_t cols) { return gemm_scratch_bytes(dtype_of<T>::value, rows, cols, k); },
      [&](std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols) {
        gemm_serial<T>(rt, rows, cols, k, alpha, a + i0 * a_rs, a_rs, a_cs, b + j0 * b_cs, b_rs, b_cs, beta,
                       c + i0 * c_rs + j0 * c_cs, c_rs, c_cs);
      });
}

// ---- batched products ----

std::int64_t batch_offset(const Shape& batch, const Strides& strides, std::int64_t index) noexcept {
  std::int64_t off = 0;
  for (int d = batch.rank() - 1; d >= 0; --d) {
    off += (index % batch[d]) * strides[d];
    index /= batch[d];
  }
  return off;
}

// Folds the batch dimensions into the rows of `x` when consecutive batch
// entries follow its last row: sets rs to the folded row stride.
bool fold_rows(const Shape& batch, const Strides& strides, std::int64_t m, std::int64_t& rs) {
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

bool broadcasts(const Shape& batch, const Strides& strides) {
  for (int d = 0; d < batch.rank(); ++d)
    if (batch[d] != 1 && strides[d] != 0) return false;
  return true;
}

// One GEMM over all batches when b (and the bias's batch) broadcast and a's
// and c's batches continue their rows: [batch * m, k] x [k, n].
void fold_batch(MatmulProblem& p) {
  if (p.batch.rank() == 0 || !broadcasts(p.batch, p.b.batch_strides)) return;
  std::int64_t a_rs = p.a.rs, c_rs = p.c.rs, bias_rs = p.bias.rs;
  if (!fold_rows(p.batch, p.a.batch_strides, p.m, a_rs) || !fold_rows(p.batch, p.c.batch_strides, p.m, c_rs)) return;
  if (p.bias.data && !fold_rows(p.batch, p.bias.batch_strides, p.m, bias_rs)) return;
  p.m *= p.batch.numel();
  p.a.rs = a_rs;
  p.c.rs = c_rs;
  p.bias.rs = bias_rs;
  p.batch = Shape{};
  p.a.batch_strides = p.b.batch_strides = p.c.batch_strides = p.bias.batch_strides = Strides{};
}

// Runs fn(first_row, last_row) over [0, rows), split over rt's threads when
// `parallel` and there are more than kGrainElements elements.
template <typename Fn>
void for_rows(detail::DeviceRuntime& rt, bool parallel, std::int64_t rows, std::int64_t cols, Fn&& fn) {
  if (!parallel || rows * cols <= kGrainElements) {
    fn(std::int64_t{0}, rows);
    return;
  }
  rt.parallel_for(rows, std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(cols, 1)), fn);
}

// dst (row-major [rows, cols] f32, or column-major when the source's rows
// are adjacent) = src widened; returns dst's row and column strides.
void widen_block(detail::DeviceRuntime& rt, bool parallel, DType dtype, std::int64_t rows, std::int64_t cols,
                 const std::uint16_t* src, std::int64_t rs, std::int64_t cs, float* dst, std::int64_t& dst_rs,
                 std::int64_t& dst_cs) {
  if (rs == 1 && cs != 1 && rows > 1) {
    dst_rs = 1;
    dst_cs = rows;
    for_rows(rt, parallel, cols, rows, [&](std::int64_t j0, std::int64_t j1) {
      for (std::int64_t j = j0; j < j1; ++j) widen_to_f32(dtype, src + j * cs, dst + j * rows, rows);
    });
    return;
  }
  dst_rs = cols;
  dst_cs = 1;
  for_rows(rt, parallel, rows, cols, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      if (cs == 1) {
        widen_to_f32(dtype, src + i * rs, dst + i * cols, cols);
      } else {
        for (std::int64_t j = 0; j < cols; ++j) widen_to_f32(dtype, src + i * rs + j * cs, dst + i * cols + j, 1);
      }
    }
  });
}

template <typename T>
void init_from_bias(detail::DeviceRuntime& rt, bool parallel, std::int64_t m, std::int64_t n, T beta, const T* bias,
                    std::int64_t b_rs, std::int64_t b_cs, T* c, std::int64_t c_rs, std::int64_t c_cs) {
  for_rows(rt, parallel, m, n, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t i = r0; i < r1; ++i) {
      T* row = c + i * c_rs;
      const T* src = bias + i * b_rs;
      if (c_cs == 1 && b_cs == 1) {
        for (std::int64_t j = 0; j < n; ++j) row[j] = beta * src[j];
      } else if (c_cs == 1 && b_cs == 0) {
        std::fill(row, row + n, beta * src[0]);
      } else {
        for (std::int64_t j = 0; j < n; ++j) row[j * c_cs] = beta * src[j * b_cs];
      }
    }
  });
}

template <typename T>
void one_product(detail::DeviceRuntime& rt, const MatmulProblem& p, std::int64_t index, bool parallel) {
  const auto at = [&](const MatrixOperand& x) {
    return reinterpret_cast<T*>(x.data) + batch_offset(p.batch, x.batch_strides, index);
  };
  T* c = at(p.c);
  T beta = 0;
  if (p.bias.data) {
    init_from_bias<T>(rt, parallel, p.m, p.n, static_cast<T>(p.beta), at(p.bias), p.bias.rs, p.bias.cs, c, p.c.rs,
                      p.c.cs);
    beta = 1;
  }
  gemm_impl<T>(rt, parallel, p.m, p.n, p.k, static_cast<T>(p.alpha), at(p.a), p.a.rs, p.a.cs, at(p.b), p.b.rs, p.b.cs,
               beta, c, p.c.rs, p.c.cs);
}

// Whether bf16 products run on the bf16 kernel (else they are widened).
bool native_bf16(DType dtype) { return dtype == DType::bf16 && bf16_gemm_available(); }

// f32 floats of `work` one 16-bit product needs: C, and A and B widened
// unless the bf16 kernel reads them as they are.
std::int64_t half_work_floats(const MatmulProblem& p) {
  return p.m * p.n + (native_bf16(p.dtype) ? 0 : p.m * p.k + p.k * p.n);
}

// A 16-bit product through f32 scratch `work` (half_work_floats): C is
// accumulated in f32 and rounded once.
void one_half_product(detail::DeviceRuntime& rt, const MatmulProblem& p, std::int64_t index, bool parallel,
                      float* work) {
  const auto at = [&](const MatrixOperand& x) {
    return reinterpret_cast<std::uint16_t*>(x.data) + batch_offset(p.batch, x.batch_strides, index);
  };
  const std::int64_t m = p.m, n = p.n, k = p.k;
  float* fc = work;
  float beta = 0;
  if (p.bias.data) {
    const std::uint16_t* bias = at(p.bias);
    const float scale = static_cast<float>(p.beta);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        float v;
        widen_to_f32(p.dtype, bias + i * p.bias.rs + j * p.bias.cs, &v, 1);
        fc[i * n + j] = scale * v;
      }
    beta = 1;
  }
  const float alpha = static_cast<float>(p.alpha);
  if (native_bf16(p.dtype) && k == 0) {
    if (beta == 0) std::fill(fc, fc + m * n, 0.0f);
  } else if (native_bf16(p.dtype)) {
    const std::uint16_t *a = at(p.a), *b = at(p.b);
    for_blocks(
        rt, parallel, m, n, k,
        [&](std::int64_t rows, std::int64_t cols) { return bf16_gemm_scratch_floats(rows, cols, k) * sizeof(float); },
        [&](std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols) {
          ScratchLease<float> lease;
          float* scratch = packing_scratch(rt, bf16_gemm_scratch_floats(rows, cols, k), lease);
          bf16_gemm(rows, cols, k, alpha, a + i0 * p.a.rs, p.a.rs, p.a.cs, b + j0 * p.b.cs, p.b.rs, p.b.cs, beta,
                    fc + i0 * n + j0, n, scratch);
        });
  } else {
    float* fa = fc + m * n;
    float* fb = fa + m * k;
    std::int64_t a_rs, a_cs, b_rs, b_cs;
    widen_block(rt, parallel, p.dtype, m, k, at(p.a), p.a.rs, p.a.cs, fa, a_rs, a_cs);
    widen_block(rt, parallel, p.dtype, k, n, at(p.b), p.b.rs, p.b.cs, fb, b_rs, b_cs);
    gemm_impl<float>(rt, parallel, m, n, k, alpha, fa, a_rs, a_cs, fb, b_rs, b_cs, beta, fc, n, 1);
  }
  std::uint16_t* c = at(p.c);
  for_rows(rt, parallel, m, n, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      if (p.c.cs == 1) {
        narrow_from_f32(p.dtype, fc + i * n, c + i * p.c.rs, n);
      } else {
        for (std::int64_t j = 0; j < n; ++j) narrow_from_f32(p.dtype, fc + i * n + j, c + i * p.c.rs + j * p.c.cs, 1);
      }
    }
  });
}

// ---- int8 products (Note [int8 products] in ops/linalg.cpp) ----

bool int8_dtype(DType dtype) { return dtype == DType::u8 || dtype == DType::i8; }

// C (i32, row-major) = A B for one batch index, split over rt's threads.
void int8_rows(detail::DeviceRuntime& rt, bool parallel, const MatmulProblem& p, const std::uint8_t* a,
               const std::int8_t* b, std::int32_t* c, std::int64_t c_rs) {
  const bool a_signed = p.dtype == DType::i8;
  for_blocks(
      rt, parallel, p.m, p.n, p.k,
      [&](std::int64_t rows, std::int64_t cols) { return int8_gemm_scratch_bytes(rows, cols, p.k); },
      [&](std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols) {
        ScratchLease<float> lease;
        float* scratch = packing_scratch(rt, (int8_gemm_scratch_bytes(rows, cols, p.k) + 3) / 4, lease);
        int8_gemm(rows, cols, p.k, a_signed, a + i0 * p.a.rs, p.a.rs, p.a.cs, b + j0 * p.b.cs, p.b.rs, p.b.cs, false,
                  c + i0 * c_rs + j0, c_rs, scratch);
      });
}

void one_int8_product(detail::DeviceRuntime& rt, const MatmulProblem& p, std::int64_t index, bool parallel) {
  const auto offset = [&](const MatrixOperand& x) { return batch_offset(p.batch, x.batch_strides, index); };
  const auto* a = reinterpret_cast<const std::uint8_t*>(p.a.data) + offset(p.a);
  const auto* b = reinterpret_cast<const std::int8_t*>(p.b.data) + offset(p.b);
  auto* c = reinterpret_cast<std::int32_t*>(p.c.data) + offset(p.c);
  const std::int64_t m = p.m, n = p.n;
  if (p.k == 0) {
    scale_block<std::int32_t>(m, n, 0, c, p.c.rs, p.c.cs);
    return;
  }
  if (p.c.cs == 1 || n == 1) {
    int8_rows(rt, parallel, p, a, b, c, p.c.rs);
    return;
  }
  ScratchLease<std::int32_t> tmp = rt.pool().scratch<std::int32_t>(static_cast<std::size_t>(m * n));
  int8_rows(rt, parallel, p, a, b, tmp.data(), n);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) c[i * p.c.rs + j * p.c.cs] = tmp[static_cast<std::size_t>(i * n + j)];
}

}  // namespace

std::size_t gemm_scratch_bytes(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  if (int8_dtype(dtype)) return int8_gemm_scratch_bytes(m, n, k);
  if (native_bf16(dtype)) return bf16_gemm_scratch_floats(m, n, k) * sizeof(float);
  if (m + n + k < 20) return 0;
  if (dtype != DType::f64 && sgemm_available()) {
    // The packed case bounds the others; either orientation may run.
    return std::max(sgemm_scratch_floats(m, n, k, 0, 0, 0, 0), sgemm_scratch_floats(n, m, k, 0, 0, 0, 0)) *
           sizeof(float);
  }
  if (m == 1 || n == 1) return 0;
  const auto bytes = [&]<typename T>(T) {
    return std::max(block_sizes<T>(m, n, k).total_elements, block_sizes<T>(n, m, k).total_elements) * sizeof(T);
  };
  return dtype == DType::f64 ? bytes(double{}) : bytes(float{});
}

WorkerScratch::WorkerScratch(detail::DeviceRuntime& rt, std::int64_t slots, std::size_t bytes) {
  if (slots <= 0 || bytes == 0) return;
  stride_ = (bytes + 63) / 64 * 64;
  lease_ = rt.pool().scratch<std::byte>(static_cast<std::size_t>(slots) * stride_);
}

WorkerScratch::Lend WorkerScratch::lend(std::int64_t slot) const noexcept {
  if (stride_ == 0) return Lend(nullptr, 0);
  return Lend(lease_.data() + static_cast<std::size_t>(slot) * stride_, stride_);
}

WorkerScratch::Lend::Lend(std::byte* data, std::size_t bytes) noexcept
    : saved_data_(tls_scratch), saved_bytes_(tls_scratch_bytes) {
  tls_scratch = data;
  tls_scratch_bytes = bytes;
}

WorkerScratch::Lend::~Lend() {
  tls_scratch = saved_data_;
  tls_scratch_bytes = saved_bytes_;
}

void gemm(detail::DeviceRuntime& rt, bool parallel, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t a_rs, std::int64_t a_cs, const float* b, std::int64_t b_rs, std::int64_t b_cs,
          float beta, float* c, std::int64_t c_rs, std::int64_t c_cs) {
  gemm_impl<float>(rt, parallel, m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, c_cs);
}

void gemm(detail::DeviceRuntime& rt, bool parallel, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t a_rs, std::int64_t a_cs, const double* b, std::int64_t b_rs, std::int64_t b_cs,
          double beta, double* c, std::int64_t c_rs, std::int64_t c_cs) {
  gemm_impl<double>(rt, parallel, m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, c_cs);
}

void matmul(detail::DeviceRuntime& rt, const MatmulProblem& problem) {
  MatmulProblem p = problem;
  if (p.beta == 0) p.bias.data = nullptr;  // libtorch: beta 0 ignores the bias, NaN included
  fold_batch(p);
  const std::int64_t total = p.batch.numel();
  if (total == 0 || p.m == 0 || p.n == 0) return;
  const bool half = p.dtype == DType::f16 || p.dtype == DType::bf16;
  const int threads = rt.threads();
  const double flops = static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  const double big = static_cast<double>(kParallelGemmFlops);

  // Whether batches go to threads, each product then running on one thread.
  const bool by_batch = threads > 1 && total > 1 && flops * static_cast<double>(total) >= big &&
                        (flops < big || total % threads == 0 || total >= 4 * threads);
  const std::int64_t slots = by_batch ? std::min<std::int64_t>(threads, total) : 1;
  const bool parallel_products = !by_batch;

  ScratchLease<float> work;
  const std::int64_t per_slot = half ? half_work_floats(p) : 0;
  if (half) work = rt.pool().scratch<float>(static_cast<std::size_t>(per_slot * slots));

  auto run_range = [&](std::int64_t first, std::int64_t last, std::int64_t slot) {
    for (std::int64_t i = first; i < last; ++i) {
      if (half)
        one_half_product(rt, p, i, parallel_products, work.data() + slot * per_slot);
      else if (int8_dtype(p.dtype))
        one_int8_product(rt, p, i, parallel_products);
      else if (p.dtype == DType::f64)
        one_product<double>(rt, p, i, parallel_products);
      else
        one_product<float>(rt, p, i, parallel_products);
    }
  };
  if (!by_batch) {
    run_range(0, total, 0);
    return;
  }
  const WorkerScratch scratch(rt, slots, gemm_scratch_bytes(p.dtype, p.m, p.n, p.k));
  rt.parallel_for(slots, 1, [&](std::int64_t s0, std::int64_t s1) {
    for (std::int64_t s = s0; s < s1; ++s) {
      const WorkerScratch::Lend lend = scratch.lend(s);
      run_range(total * s / slots, total * (s + 1) / slots, s);
    }
  });
}

void widen_to_f32(DType dtype, const std::uint16_t* src, float* dst, std::int64_t count) noexcept {
  if (dtype == DType::bf16) {
    for (std::int64_t i = 0; i < count; ++i) dst[i] = std::bit_cast<float>(static_cast<std::uint32_t>(src[i]) << 16);
    return;
  }
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= count; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < count; ++i) dst[i] = Half::to_float(src[i]);
}

void narrow_from_f32(DType dtype, const float* src, std::uint16_t* dst, std::int64_t count) noexcept {
  if (dtype == DType::bf16) {
    // Integer round-to-nearest-even; it vectorizes and, unlike VCVTNEPS2BF16,
    // keeps subnormals.
    for (std::int64_t i = 0; i < count; ++i) dst[i] = BFloat16::from_float(src[i]);
    return;
  }
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= count; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < count; ++i) dst[i] = Half::from_float(src[i]);
}

}  // namespace forge::cpu
