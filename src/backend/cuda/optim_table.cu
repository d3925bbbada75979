// The cuda backend's optimizer family: fused SGD, Adam and AdamW steps and
// the gradient norm's power sum, f32 and f64 (the cpu backend's dtypes).
//
// The updates are device_math.h's per-element formulas (optim_kernels.cpp's
// loops). norm_power_sum sums fixed chunks of kChunk elements, one block
// each, in f64, and adds the chunks' partial sums on the host in chunk order:
// the same value for every launch (within rounding of the cpu's, which sums
// a chunk left to right).

#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/tables.h"
#include "forge/buffer_pool.h"

namespace forge::cuda {
namespace {

using backend::AdamStep;
using backend::SgdStep;

template <typename T>
__global__ void adam_kernel(AdamConsts<T> c, std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq) {
  FORGE_GRID_LOOP(i, n) {
    T p = param[i], m1 = exp_avg[i], m2 = exp_avg_sq[i];
    adam_update<T>(c, p, grad[i], m1, m2);
    param[i] = p;
    exp_avg[i] = m1;
    exp_avg_sq[i] = m2;
  }
}

void adam(detail::DeviceRuntime& dev, const AdamStep& s, DType dtype, std::int64_t n, void* param, const void* grad,
          void* exp_avg, void* exp_avg_sq) {
  if (n <= 0) return;
  cudaStream_t stream = stream_of(dev);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    adam_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(adam_consts<T>(s), n, static_cast<T*>(param),
                                                         static_cast<const T*>(grad), static_cast<T*>(exp_avg),
                                                         static_cast<T*>(exp_avg_sq));
  });
  check_launch("adam_step");
}

template <typename T>
__global__ void sgd_kernel(SgdConsts<T> c, std::int64_t n, T* param, const T* grad, T* buf) {
  FORGE_GRID_LOOP(i, n) {
    T p = param[i];
    sgd_update<T>(c, p, grad[i], buf == nullptr ? nullptr : buf + i);
    param[i] = p;
  }
}

void sgd(detail::DeviceRuntime& dev, const SgdStep& s, DType dtype, std::int64_t n, void* param, const void* grad,
         void* momentum_buffer) {
  if (n <= 0) return;
  cudaStream_t stream = stream_of(dev);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(sgd_consts<T>(s), n, static_cast<T*>(param),
                                                        static_cast<const T*>(grad), static_cast<T*>(momentum_buffer));
  });
  check_launch("sgd_step");
}

constexpr std::int64_t kChunk = 32768;  // the cpu kernel's block (kGrainElements)

template <typename T>
__global__ void norm_chunks_kernel(std::int64_t n, const T* x, double p, bool inf, double* partial) {
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kChunk;
  const std::int64_t end = begin + kChunk < n ? begin + kChunk : n;
  double acc = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double t = norm_term(static_cast<double>(x[i]), p, inf);
    acc = inf ? nan_max(acc, t) : acc + t;
  }
  acc = inf ? block_reduce(acc, MaxNanOp<double>{}) : block_reduce(acc, SumOp<double>{});
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

double norm(detail::DeviceRuntime& dev, DType dtype, std::int64_t n, const void* x, double p) {
  const BlockChunks chunks = block_chunks(n, kChunk);
  if (chunks.count == 0) return 0;
  const bool inf = p - p != p - p;  // infinite (p is never NaN)
  cudaStream_t stream = stream_of(dev);
  const std::size_t bytes = static_cast<std::size_t>(chunks.count) * sizeof(double);
  Ref<Buffer> scratch = dev.pool().acquire(bytes, "norm_power_sum");
  auto* partial = reinterpret_cast<double*>(scratch->data());
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    norm_chunks_kernel<T>
        <<<static_cast<unsigned>(chunks.count), kThreads, 0, stream>>>(n, static_cast<const T*>(x), p, inf, partial);
  });
  check_launch("norm_power_sum");
  std::vector<double> host(static_cast<std::size_t>(chunks.count));
  check(cudaMemcpyAsync(host.data(), partial, bytes, cudaMemcpyDeviceToHost, stream), "norm_power_sum", "copy to host");
  check(cudaStreamSynchronize(stream), "norm_power_sum", "stream synchronize");
  double total = 0;
  for (double v : host) total = inf ? nan_max(total, v) : total + v;
  return total;
}

constexpr backend::DTypeMask kF32F64 = backend::mask_of(DType::f32, DType::f64);

}  // namespace

void fill_optim_table(backend::OptimKernels& k) {
  k.adam_step = {adam, kF32F64};
  k.sgd_step = {sgd, kF32F64};
  k.norm_power_sum = {norm, kF32F64};
}

}  // namespace forge::cuda
