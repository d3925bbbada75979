#pragma once
// Fused optimizer updates (unchecked: contiguous, same length, same dtype).

#include <cstdint>

#include "forge/runtime.h"

namespace forge::cpu {

struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  double bias_correction1, bias_correction2;  // 1 - beta^t
  bool decoupled;
};

template <typename T>
void adam_step(Runtime& rt, const AdamStep& s, std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq);

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first;  // the parameter's first update: the momentum buffer takes d as it is
};

// momentum_buffer: null when s.momentum is 0.
template <typename T>
void sgd_step(Runtime& rt, const SgdStep& s, std::int64_t n, T* param, const T* grad, T* momentum_buffer);

// sum |x|^p (p > 0), or max |x| when p is infinite, accumulated in double over
// fixed blocks and added in block order: the same bits for any thread count.
template <typename T>
double norm_power_sum(Runtime& rt, std::int64_t n, const T* x, double p);

}  // namespace forge::cpu
