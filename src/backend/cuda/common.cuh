#pragma once
// What the cuda backend's kernel files share: the grid-stride loop, dispatch
// from a compute dtype to the C++ type kernels compute in, and block-wide
// reductions (warp shuffles, then one value per warp through shared memory).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/device_math.h"
#include "backend/cuda/launch.h"

namespace forge::cuda {

// for (i in [0, n) assigned to this thread of a grid-stride loop)
#define FORGE_GRID_LOOP(i, n)                                                                      \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// Calls fn(C{}) with the type `compute` computes in (f16, bf16: float; i8:
// std::int32_t).
template <typename Fn>
decltype(auto) dispatch_compute(DType compute, Fn&& fn) {
  switch (compute) {
    case DType::f64:
      return fn(double{});
    case DType::i32:
    case DType::i8:
      return fn(std::int32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::u8:
      return fn(std::uint8_t{});
    case DType::boolean:
      return fn(bool{});
    default:
      return fn(float{});
  }
}

// Calls fn(C{}) for a floating dtype: double for f64, else float.
template <typename Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn) {
  if (dtype == DType::f64) return fn(double{});
  return fn(float{});
}

// Calls fn(U{}) with an unsigned integer of the element size: kernels that
// only move elements are compiled once per width.
template <typename Fn>
void dispatch_width(std::size_t size, Fn&& fn) {
  switch (size) {
    case 1:
      return fn(std::uint8_t{});
    case 2:
      return fn(std::uint16_t{});
    case 4:
      return fn(std::uint32_t{});
    default:
      return fn(std::uint64_t{});
  }
}

// Calls fn(T{}) with the storage type of a floating dtype (f16_t, bf16_t
// for the 16-bit ones).
template <typename Fn>
void dispatch_floating(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(f16_t{});
    case DType::bf16:
      return fn(bf16_t{});
    default:
      return fn(float{});
  }
}

template <typename T>
struct SumOp {
  __device__ T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct MaxNanOp {  // max that keeps NaN
  __device__ T operator()(T a, T b) const { return (b > a || b != b) ? b : a; }
};
template <typename T>
struct MinNanOp {
  __device__ T operator()(T a, T b) const { return (b < a || b != b) ? b : a; }
};

// Reduces v over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. Call from every thread of the block.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T warp_values[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  __syncthreads();  // warp_values may still be read by a previous call
  if (lane == 0) warp_values[warp] = v;
  __syncthreads();
  v = warp_values[0];
  for (unsigned w = 1; w < warps; ++w) v = op(v, warp_values[w]);
  return v;
}

}  // namespace forge::cuda
