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

}  // namespace forge::cpu
