// The cuda backend's copy family: copy_cast between any dtypes and strides,
// fill, and generate, every dtype.
//
// generate's draws (uniform, normal, randint, randperm) are made on the host by the cpu kernel,
// in element order from the context's generator, and copied to the device:
// a seed gives the same values on both backends (backend/kernels/copy.h).
// The sequences (arange, linspace, eye) are computed on the device with the
// cpu kernel's formulas in f64, which both evaluate exactly as IEEE.

#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/tables.h"

namespace forge::cuda {
namespace {

using backend::Operand;
using backend::Sequence;
using backend::SequenceSpec;

template <typename To>
__global__ void copy_cast_kernel(std::int64_t n, StridedIndexer<2> ix, Operand dst, Operand src) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[2];
    ix.offsets(i, off);
    reinterpret_cast<To*>(dst.data)[off[0]] = load_as<To>(src.data, src.dtype, off[1]);
  }
}

void copy_cast(detail::DeviceRuntime& dev, const Shape& shape, const Operand& dst, const Operand& src) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  const Strides* const strides[2] = {&dst.strides, &src.strides};
  const StridedIndexer<2> ix(shape, strides);
  cudaStream_t s = stream_of(dev);
  dispatch_storage(
      dst.dtype, [&](auto tag) { copy_cast_kernel<decltype(tag)><<<grid_for(n), kThreads, 0, s>>>(n, ix, dst, src); });
  check_launch("copy");
}

// The element as an unsigned integer of its size: fill moves bytes.
template <typename U>
__global__ void fill_kernel(std::int64_t n, StridedIndexer<1> ix, U* dst, U value) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[1];
    ix.offsets(i, off);
    dst[off[0]] = value;
  }
}

template <typename U>
void launch_fill(cudaStream_t s, std::int64_t n, const StridedIndexer<1>& ix, std::byte* dst,
                 const std::byte* element) {
  U value;
  std::memcpy(&value, element, sizeof value);
  fill_kernel<U><<<grid_for(n), kThreads, 0, s>>>(n, ix, reinterpret_cast<U*>(dst), value);
}

void fill(detail::DeviceRuntime& dev, const Shape& shape, const Operand& dst, const std::byte* element) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  const Strides* const strides[1] = {&dst.strides};
  const StridedIndexer<1> ix(shape, strides);
  cudaStream_t s = stream_of(dev);
  switch (dtype_size(dst.dtype)) {
    case 8:
      launch_fill<std::uint64_t>(s, n, ix, dst.data, element);
      break;
    case 4:
      launch_fill<std::uint32_t>(s, n, ix, dst.data, element);
      break;
    case 2:
      launch_fill<std::uint16_t>(s, n, ix, dst.data, element);
      break;
    default:
      launch_fill<std::uint8_t>(s, n, ix, dst.data, element);
      break;
  }
  check_launch("fill");
}

// The value of element i of a sequence (copy_kernels.cpp's write_each
// bodies), rounded step by step: no fused multiply-add, as on the host.
__device__ double sequence_value(const SequenceSpec& spec, std::int64_t n, std::int64_t i) {
  switch (spec.kind) {
    case Sequence::arange:
      return __dadd_rn(spec.start, __dmul_rn(static_cast<double>(i), spec.step));
    case Sequence::linspace:
      return i < spec.half ? __dadd_rn(spec.start, __dmul_rn(spec.step, static_cast<double>(i)))
                           : __dsub_rn(spec.end, __dmul_rn(spec.step, static_cast<double>(n - 1 - i)));
    default: {  // eye
      const std::int64_t m = spec.columns == 0 ? 1 : spec.columns;
      return i / m == i % m ? 1.0 : 0.0;
    }
  }
}

template <typename T>
__global__ void sequence_kernel(SequenceSpec spec, std::int64_t n, T* dst) {
  FORGE_GRID_LOOP(i, n) { dst[i] = convert<T>(sequence_value(spec, n, i)); }
}

void generate(detail::DeviceRuntime& dev, DType dtype, std::int64_t n, std::byte* dst, const SequenceSpec& spec,
              std::mt19937_64* generator) {
  if (n <= 0) return;
  cudaStream_t s = stream_of(dev);
  if (spec.kind == Sequence::uniform || spec.kind == Sequence::normal || spec.kind == Sequence::randint ||
      spec.kind == Sequence::randperm) {
    // Drawn on the host in element order, then copied; the copy reads host
    // memory, so the stream is synchronized before the buffer goes.
    std::vector<std::byte> host(static_cast<std::size_t>(n) * dtype_size(dtype));
    cpu::generate(dev, dtype, n, host.data(), spec, generator);
    check(cudaMemcpyAsync(dst, host.data(), host.size(), cudaMemcpyHostToDevice, s), "generate", "copy to device");
    check(cudaStreamSynchronize(s), "generate", "stream synchronize");
    return;
  }
  dispatch_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    sequence_kernel<T><<<grid_for(n), kThreads, 0, s>>>(spec, n, reinterpret_cast<T*>(dst));
  });
  check_launch("generate");
}

}  // namespace

void fill_copy_table(backend::CopyKernels& k) {
  k.copy_cast = {copy_cast, backend::kAllDTypes};
  k.fill = {fill, backend::kAllDTypes};
  k.generate = {generate, backend::kAllDTypes};
}

}  // namespace forge::cuda
