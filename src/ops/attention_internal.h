#pragma once
// What dropout's backward shares with its forward (ops/attention.cpp).

#include <cstdint>

#include "forge/tensor.h"

namespace forge::detail {

// x with dropout's mask for `seed` applied (kept elements scaled by
// 1 / (1 - p)): the forward and, given the gradient, the backward of dropout
// share it, so the backward replays the exact mask.
Tensor dropout_with_seed(const Tensor& x, double p, std::uint64_t seed);

}  // namespace forge::detail
