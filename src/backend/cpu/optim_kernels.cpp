#include "backend/cpu/optim_kernels.h"

#include <cmath>

#include "backend/cpu/kernels.h"

namespace forge::cpu {

namespace {

// One block of the update; Decoupled is a template argument so the loop has no
// branch and vectorizes (restrict: the four arrays are distinct parameters).
template <typename T, bool Decoupled>
void adam_block(const AdamStep& s, std::int64_t n, T* __restrict param, const T* __restrict grad,
                T* __restrict exp_avg, T* __restrict exp_avg_sq) {
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2);
  const T one_b1 = static_cast<T>(1 - s.beta1), one_b2 = static_cast<T>(1 - s.beta2);
  const T step = static_cast<T>(s.lr / s.bias_correction1);
  const T inv_sqrt_bc2 = static_cast<T>(1 / std::sqrt(s.bias_correction2));
  const T eps = static_cast<T>(s.eps);
  const T wd = static_cast<T>(s.weight_decay);
  const T decay = static_cast<T>(1 - s.lr * s.weight_decay);
#pragma GCC ivdep
  for (std::int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    T p = param[i];
    if constexpr (Decoupled) p *= decay;
    else g += wd * p;
    const T m = b1 * exp_avg[i] + one_b1 * g;
    const T v = b2 * exp_avg_sq[i] + one_b2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p - step * m / (std::sqrt(v) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

template <typename T>
void adam_step(Runtime& rt, const AdamStep& s, std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq) {
  rt.parallel_for(n, kGrainElements, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t len = end - begin;
    if (s.decoupled)
      adam_block<T, true>(s, len, param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin);
    else
      adam_block<T, false>(s, len, param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin);
  });
}

template void adam_step<float>(Runtime&, const AdamStep&, std::int64_t, float*, const float*, float*, float*);
template void adam_step<double>(Runtime&, const AdamStep&, std::int64_t, double*, const double*, double*, double*);

}  // namespace forge::cpu
