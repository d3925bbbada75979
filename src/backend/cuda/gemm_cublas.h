#pragma once
// Batched GEMM on the current stream through cuBLASLt (cuBLAS's
// gemmStridedBatchedEx when Lt finds no algorithm or an extent passes
// int32), after the mapping of gemm_plan.h. Unchecked: callers validate.

#include "backend/device_runtime.h"
#include "backend/kernels/linalg.h"

namespace forge::cuda {

// The linalg family's matmul entry (backend/kernels/linalg.h): f32 (TF32
// when allowed, gemm_options.h), f64, and f16/bf16 with f32 accumulation.
void matmul(detail::DeviceRuntime& dev, const backend::MatmulProblem& p);

// c = alpha * a b where c may have a wider dtype than a and b (f16/bf16
// inputs into an f32 output, for attention's scores): a and b of p.dtype,
// c of `out`; p's bias and beta are ignored.
void matmul_mixed(detail::DeviceRuntime& dev, const backend::MatmulProblem& p, DType out);

}  // namespace forge::cuda
