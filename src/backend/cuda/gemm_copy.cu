// Strided block copies (gemm_copy.h): one thread per element of the block,
// a grid-stride loop, the batch offset formed from at most kMaxRank
// dimensions passed by value.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/gemm_copy.h"

namespace forge::cuda {
namespace {

struct BlockGeometry {
  int rank = 0;
  std::int64_t batch[kMaxRank] = {};
  std::int64_t dst_bs[kMaxRank] = {}, src_bs[kMaxRank] = {};
  std::int64_t rows = 0, cols = 0;
  std::int64_t dst_rs = 0, dst_cs = 0, src_rs = 0, src_cs = 0;
};

struct Offsets {
  std::int64_t dst, src;
};

__device__ Offsets offsets_of(const BlockGeometry& g, std::int64_t index) {
  const std::int64_t j = index % g.cols;
  std::int64_t rest = index / g.cols;
  const std::int64_t i = rest % g.rows;
  rest /= g.rows;
  Offsets o{i * g.dst_rs + j * g.dst_cs, i * g.src_rs + j * g.src_cs};
  for (int d = g.rank - 1; d >= 0; --d) {
    const std::int64_t e = rest % g.batch[d];
    rest /= g.batch[d];
    o.dst += e * g.dst_bs[d];
    o.src += e * g.src_bs[d];
  }
  return o;
}

template <typename T>
__global__ void copy_kernel(BlockGeometry g, T* dst, const T* src, std::int64_t total) {
  for (std::int64_t index = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; index < total;
       index += std::int64_t{gridDim.x} * blockDim.x) {
    const Offsets o = offsets_of(g, index);
    dst[o.dst] = src[o.src];
  }
}

template <typename T, typename Acc>
__global__ void scale_kernel(BlockGeometry g, T* dst, const T* src, Acc scale, std::int64_t total) {
  for (std::int64_t index = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; index < total;
       index += std::int64_t{gridDim.x} * blockDim.x) {
    const Offsets o = offsets_of(g, index);
    dst[o.dst] = src ? static_cast<T>(scale * static_cast<Acc>(src[o.src])) : static_cast<T>(Acc{0});
  }
}

constexpr int kThreads = 256;

BlockGeometry geometry(const Shape& batch, std::int64_t rows, std::int64_t cols, const StridedBlock& dst,
                       const StridedBlock& src) {
  BlockGeometry g;
  g.rank = batch.rank();
  for (int d = 0; d < g.rank; ++d) {
    g.batch[d] = batch[d];
    g.dst_bs[d] = dst.batch_strides[d];
    g.src_bs[d] = src.data ? src.batch_strides[d] : 0;
  }
  g.rows = rows;
  g.cols = cols;
  g.dst_rs = dst.rs;
  g.dst_cs = dst.cs;
  g.src_rs = src.rs;
  g.src_cs = src.cs;
  return g;
}

unsigned blocks_for(std::int64_t total) {
  return static_cast<unsigned>(std::min<std::int64_t>((total + kThreads - 1) / kThreads, std::int64_t{1} << 16));
}

}  // namespace

void copy_block(detail::DeviceRuntime& dev, DType dtype, const Shape& batch, std::int64_t rows, std::int64_t cols,
                const StridedBlock& dst, const StridedBlock& src, const char* op) {
  const std::int64_t total = batch.numel() * rows * cols;
  if (total == 0) return;
  const cudaStream_t s = stream_of(dev);
  const BlockGeometry g = geometry(batch, rows, cols, dst, src);
  const unsigned blocks = blocks_for(total);
  switch (dtype_size(dtype)) {
    case 1:
      copy_kernel<<<blocks, kThreads, 0, s>>>(g, reinterpret_cast<std::uint8_t*>(dst.data),
                                              reinterpret_cast<const std::uint8_t*>(src.data), total);
      break;
    case 2:
      copy_kernel<<<blocks, kThreads, 0, s>>>(g, reinterpret_cast<std::uint16_t*>(dst.data),
                                              reinterpret_cast<const std::uint16_t*>(src.data), total);
      break;
    case 4:
      copy_kernel<<<blocks, kThreads, 0, s>>>(g, reinterpret_cast<std::uint32_t*>(dst.data),
                                              reinterpret_cast<const std::uint32_t*>(src.data), total);
      break;
    default:
      copy_kernel<<<blocks, kThreads, 0, s>>>(g, reinterpret_cast<std::uint64_t*>(dst.data),
                                              reinterpret_cast<const std::uint64_t*>(src.data), total);
      break;
  }
  check_launch(op);
}

void scale_block(detail::DeviceRuntime& dev, DType dtype, const Shape& batch, std::int64_t rows, std::int64_t cols,
                 const StridedBlock& dst, const StridedBlock& src, double scale, const char* op) {
  const std::int64_t total = batch.numel() * rows * cols;
  if (total == 0) return;
  const cudaStream_t s = stream_of(dev);
  const BlockGeometry g = geometry(batch, rows, cols, dst, src);
  const unsigned blocks = blocks_for(total);
  const float f = static_cast<float>(scale);
  switch (dtype) {
    case DType::f64:
      scale_kernel<<<blocks, kThreads, 0, s>>>(g, reinterpret_cast<double*>(dst.data),
                                               reinterpret_cast<const double*>(src.data), scale, total);
      break;
    case DType::f16:
      scale_kernel<<<blocks, kThreads, 0, s>>>(g, reinterpret_cast<__half*>(dst.data),
                                               reinterpret_cast<const __half*>(src.data), f, total);
      break;
    case DType::bf16:
      scale_kernel<<<blocks, kThreads, 0, s>>>(g, reinterpret_cast<__nv_bfloat16*>(dst.data),
                                               reinterpret_cast<const __nv_bfloat16*>(src.data), f, total);
      break;
    default:
      scale_kernel<<<blocks, kThreads, 0, s>>>(g, reinterpret_cast<float*>(dst.data),
                                               reinterpret_cast<const float*>(src.data), f, total);
      break;
  }
  check_launch(op);
}

}  // namespace forge::cuda
