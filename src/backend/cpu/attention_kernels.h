#pragma once
// Unchecked attention and dropout kernels (the linalg family,
// backend/kernels/linalg.h): every floating dtype, 16-bit ones computed in
// f32. Callers validate shapes, dtypes and aliasing.

#include <cstdint>

#include "backend/device_runtime.h"
#include "backend/kernels/linalg.h"

namespace forge::cpu {

using backend::AttentionProblem;

void attention(detail::DeviceRuntime& rt, const AttentionProblem& p);
void dropout(detail::DeviceRuntime& rt, const Shape& shape, const backend::Operand& out, const backend::Operand& x,
             double p, std::uint64_t seed);

}  // namespace forge::cpu
