#pragma once
// Process-wide switches of the CUDA backend. In a build without it they are
// kept and read back, and change nothing.

namespace forge {

// Whether f32 matmuls and convolutions on CUDA devices may run on tensor
// cores in TF32 (a 10-bit mantissa per input, f32 accumulation: several
// times the f32 throughput, about 1e-3 relative error). Off by default, as
// libtorch's allow_tf32 is; read at each product.
void set_cuda_allow_tf32(bool allow) noexcept;
bool cuda_allow_tf32() noexcept;

}  // namespace forge
