#pragma once
// GEMM on strided blocks (Eigen's single-threaded kernels underneath, split
// over the context's threads here) and the batched matmul driver that the
// linear-algebra ops and conv2d share. Unchecked: callers validate shapes,
// dtypes and aliasing.

#include <cstddef>
#include <cstdint>

#include "backend/device_runtime.h"
#include "backend/kernels/linalg.h"
#include "forge/buffer_pool.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::cpu {

// C = alpha * A B + beta * C with A [m, k], B [k, n], C [m, n]; element (i, j)
// of X lives at x[i * x_rs + j * x_cs]. beta == 0 ignores C's old contents (a
// NaN there does not propagate). A block with a unit stride on either side is
// read in place (a transposed view costs no copy); other layouts are packed
// into pooled scratch. When `parallel`, a large product is split over rt's
// threads; otherwise it runs on the calling thread.
void gemm(detail::DeviceRuntime& rt, bool parallel, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const float* a, std::int64_t a_rs, std::int64_t a_cs, const float* b, std::int64_t b_rs, std::int64_t b_cs,
          float beta, float* c, std::int64_t c_rs, std::int64_t c_cs);
void gemm(detail::DeviceRuntime& rt, bool parallel, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
          const double* a, std::int64_t a_rs, std::int64_t a_cs, const double* b, std::int64_t b_rs, std::int64_t b_cs,
          double beta, double* c, std::int64_t c_rs, std::int64_t c_cs);

// Note [Worker scratch]
// The pool's best fit is deterministic only when the order of its acquires
// is. A GEMM run on a worker thread used to lease its packing buffers there,
// so how many were out at once, and which cached block each took, followed
// the scheduler: a warm training step could still take memory from the
// system when two workers happened to overlap for the first time. Kernels
// that run single-threaded GEMMs on the workers now lease every slot's
// packing scratch up front, on the calling thread, and each task lends its
// slot to the GEMMs it runs: the step's acquires are the same every time.

// Bytes of packing scratch one single-threaded gemm of A [m, k] by B [k, n]
// takes (whichever way round the layouts make it run); 0 for the products
// that pack nothing. f16 products pack in f32, bf16 ones in bf16 pairs where
// the bf16 kernel runs them (sgemm.h).
std::size_t gemm_scratch_bytes(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k);

// `slots` regions of `bytes` each, 64-byte aligned, leased from rt's pool on
// the calling thread. A Lend makes the single-threaded gemms of the thread
// that holds it pack into one region (when it is large enough) instead of
// leasing their own.
class WorkerScratch {
 public:
  WorkerScratch() = default;
  WorkerScratch(detail::DeviceRuntime& rt, std::int64_t slots, std::size_t bytes);

  class Lend {
   public:
    Lend(const Lend&) = delete;
    Lend& operator=(const Lend&) = delete;
    ~Lend();

   private:
    friend class WorkerScratch;
    Lend(std::byte* data, std::size_t bytes) noexcept;
    std::byte* saved_data_;
    std::size_t saved_bytes_;
  };
  // Lends region `slot` to this thread's gemms until the Lend is destroyed;
  // an empty WorkerScratch lends nothing.
  Lend lend(std::int64_t slot) const noexcept;

 private:
  ScratchLease<std::byte> lease_;
  std::size_t stride_ = 0;
};

// Below this many multiply-adds a product runs on one thread.
inline constexpr std::int64_t kParallelGemmFlops = std::int64_t{1} << 21;

using backend::MatmulProblem;
using backend::MatrixOperand;

// The linalg family's matmul entry (backend/kernels/linalg.h).
void matmul(detail::DeviceRuntime& rt, const MatmulProblem& p);

// Contiguous 16-bit <-> f32 conversion (F16C for f16; round to nearest even).
void widen_to_f32(DType dtype, const std::uint16_t* src, float* dst, std::int64_t count) noexcept;
void narrow_from_f32(DType dtype, const float* src, std::uint16_t* dst, std::int64_t count) noexcept;

}  // namespace forge::cpu
