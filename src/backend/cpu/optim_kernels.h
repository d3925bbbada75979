#pragma once
// Fused optimizer updates (unchecked: contiguous, same length, same dtype).

#include <cstdint>

#include "backend/device_runtime.h"
#include "backend/kernels/optim.h"

namespace forge::cpu {

using backend::AdamStep;
using backend::SgdStep;

template <typename T>
void adam_step(detail::DeviceRuntime& rt, const AdamStep& s, std::int64_t n, T* param, const T* grad, T* exp_avg,
               T* exp_avg_sq);

// momentum_buffer: null when s.momentum is 0.
template <typename T>
void sgd_step(detail::DeviceRuntime& rt, const SgdStep& s, std::int64_t n, T* param, const T* grad, T* momentum_buffer);

// sum |x|^p (p > 0), or max |x| when p is infinite, accumulated in double over
// fixed blocks and added in block order: the same bits for any thread count.
template <typename T>
double norm_power_sum(detail::DeviceRuntime& rt, std::int64_t n, const T* x, double p);

}  // namespace forge::cpu
