#pragma once
// conv2d's f32 forward through sgemm's caller-packed path (conv_packed.cpp):
// im2col writes B's panels directly, the weights are packed once per call.
// Unchecked, as conv_kernels.h.

#include <cstdint>

#include "backend/cpu/conv_kernels.h"

namespace forge::cpu {

// Runs the forward with `weight` as an [O, K] matrix of row stride w_rs
// and unit column stride; false (having done nothing) where this path does
// not apply: builds without AVX-512, layers with no input channels, and
// outputs narrower than 4 columns other than pointwise ones.
bool conv2d_packed_f32(detail::DeviceRuntime& rt, const Conv2dProblem& p, const float* weight, std::int64_t w_rs);

}  // namespace forge::cpu
