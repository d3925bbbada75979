#pragma once
// Unchecked CPU kernels for the VJPs of the activations training loops run
// on large tensors: one fused pass, gradient and saved value in, input
// gradient out, no temporaries (the rules in src/autograd/rules/unary.cpp
// fall back to composing public ops for what these do not take).

#include <cstddef>
#include <cstdint>

#include "backend/device_runtime.h"
#include "backend/kernels/elementwise.h"
#include "forge/dtype.h"

namespace forge::cpu {

using backend::UnaryBackward;

// out[i] = g[i] * f'(...) from saved[i], over n packed elements of `dtype`
// (f32 or f64); out may not alias the inputs.
void unary_backward_flat(detail::DeviceRuntime& rt, UnaryBackward op, DType dtype, std::int64_t n, std::byte* out,
                         const std::byte* g, const std::byte* saved);

}  // namespace forge::cpu
