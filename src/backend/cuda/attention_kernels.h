#pragma once
// The cuda backend's attention forward and dropout (the linalg family's
// attention and dropout entries, backend/kernels/linalg.h):
// attention_kernels.cu over linalg_math.h.

#include <cstdint>

#include "backend/device_runtime.h"
#include "backend/kernels/linalg.h"

namespace forge::cuda {

void attention(detail::DeviceRuntime& dev, const backend::AttentionProblem& p);
void dropout(detail::DeviceRuntime& dev, const Shape& shape, const backend::Operand& out, const backend::Operand& x,
             double p, std::uint64_t seed);

}  // namespace forge::cuda
