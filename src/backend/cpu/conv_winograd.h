#pragma once
// conv2d's f32 forward and weight gradient for 3x3 windows at stride 1 as
// Winograd F(2x2, 3x3) (conv_winograd.cpp). Unchecked, as conv_kernels.h.

#include <cstdint>

#include "backend/cpu/conv_kernels.h"

namespace forge::cpu {

// Runs the forward with `weight` as an [O, C * 9] matrix of row stride w_rs
// and unit column stride; false (having done nothing) where this path does
// not apply: builds without AVX-512, windows other than 3x3 at stride 1
// undilated and ungrouped, padding over 2, fewer than 16 input or output
// channels, outputs under 4 wide or high, and x or out with rows that are
// not contiguous.
bool conv2d_winograd_f32(detail::DeviceRuntime& rt, const Conv2dProblem& p, const float* weight, std::int64_t w_rs);

// Computes grad_weight alone (p.grad_x is not read) for the same layers,
// x's and grad_out's rows contiguous; false (having done nothing) where
// this path does not apply or grad_weight is not wanted.
bool conv2d_winograd_weight_grad_f32(detail::DeviceRuntime& rt, const Conv2dBackwardProblem& p);

}  // namespace forge::cpu
