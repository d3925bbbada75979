#pragma once
// The GEMM switches of the CUDA backend; forge::set_cuda_allow_tf32
// (include/forge/cuda.h) is the public face of the TF32 one.

namespace forge::cuda {

// Whether f32 products may run on tensor cores in TF32 (a 10-bit mantissa
// per input, f32 accumulation): about 8x the throughput of f32 on an H100,
// about 1e-3 relative error. Off by default, as libtorch's
// torch.backends.cuda.matmul.allow_tf32 is; process-wide (like libtorch's
// flag), read at each product.
void set_allow_tf32(bool allow) noexcept;
bool allow_tf32() noexcept;

}  // namespace forge::cuda
