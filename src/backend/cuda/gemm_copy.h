#pragma once
// The strided block copies the GEMM and conv kernels need around cuBLAS and
// cuDNN: packing an operand cuBLAS cannot read, copying a staged output
// back, and writing beta * bias (or zeros) into an output. Queued on the
// current stream.

#include <cstdint>

#include "backend/device_runtime.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::cuda {

// A [batch..., rows, cols] block: its first element and its strides (in
// elements) over the batch, the rows and the columns.
struct StridedBlock {
  std::byte* data = nullptr;
  Strides batch_strides;
  std::int64_t rs = 0, cs = 0;
};

// dst = src over [batch..., rows, cols], elements of `dtype` as they are.
void copy_block(detail::DeviceRuntime& dev, DType dtype, const Shape& batch, std::int64_t rows, std::int64_t cols,
                const StridedBlock& dst, const StridedBlock& src, const char* op);
// dst = scale * src (src.data null: dst = 0), computed in f32 (f64 for f64).
void scale_block(detail::DeviceRuntime& dev, DType dtype, const Shape& batch, std::int64_t rows, std::int64_t cols,
                 const StridedBlock& dst, const StridedBlock& src, double scale, const char* op);

}  // namespace forge::cuda
