#include "backend/cpu/optim_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"

// No aliasing between the streams of one update: lets GCC vectorize without
// runtime overlap checks (clang has no such pragma and needs none here).
#if defined(__GNUC__) && !defined(__clang__)
#define FORGE_IVDEP _Pragma("GCC ivdep")
#else
#define FORGE_IVDEP
#endif

namespace forge::cpu {

namespace {

// One block of the update; Decoupled is a template argument so the loop has no
// branch and vectorizes (restrict: the four arrays are distinct parameters).
template <typename T, bool Decoupled>
void adam_block(const AdamStep& s, std::int64_t n, T* __restrict param, const T* __restrict grad, T* __restrict exp_avg,
                T* __restrict exp_avg_sq) {
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2);
  const T one_b1 = static_cast<T>(1 - s.beta1), one_b2 = static_cast<T>(1 - s.beta2);
  const T step = static_cast<T>(s.lr / s.bias_correction1);
  const T inv_sqrt_bc2 = static_cast<T>(1 / std::sqrt(s.bias_correction2));
  const T eps = static_cast<T>(s.eps);
  const T wd = static_cast<T>(s.weight_decay);
  const T decay = static_cast<T>(1 - s.lr * s.weight_decay);
  FORGE_IVDEP
  for (std::int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    T p = param[i];
    if constexpr (Decoupled)
      p *= decay;
    else
      g += wd * p;
    const T m = b1 * exp_avg[i] + one_b1 * g;
    const T v = b2 * exp_avg_sq[i] + one_b2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p - step * m / (std::sqrt(v) * inv_sqrt_bc2 + eps);
  }
}

// max that keeps a NaN (std::max drops one in its second argument).
inline double nan_max(double acc, double v) noexcept { return v > acc || v != v ? v : acc; }

enum class Momentum { none, first, later };

// One block of SGD; the momentum case and Nesterov are template arguments so
// each loop is branch-free.
template <typename T, Momentum M, bool Nesterov>
void sgd_block(const SgdStep& s, std::int64_t n, T* __restrict param, const T* __restrict grad, T* __restrict buf) {
  const T lr = static_cast<T>(s.lr), wd = static_cast<T>(s.weight_decay);
  const T mom = static_cast<T>(s.momentum), one_damp = static_cast<T>(1 - s.dampening);
  FORGE_IVDEP
  for (std::int64_t i = 0; i < n; ++i) {
    const T p = param[i];
    T d = grad[i] + wd * p;
    if constexpr (M != Momentum::none) {
      T b;
      if constexpr (M == Momentum::first)
        b = d;
      else
        b = mom * buf[i] + one_damp * d;
      buf[i] = b;
      if constexpr (Nesterov)
        d = d + mom * b;
      else
        d = b;
    }
    param[i] = p - lr * d;
  }
}

template <typename T, Momentum M>
void sgd_dispatch(const SgdStep& s, std::int64_t n, T* param, const T* grad, T* buf) {
  if (s.nesterov)
    sgd_block<T, M, true>(s, n, param, grad, buf);
  else
    sgd_block<T, M, false>(s, n, param, grad, buf);
}

}  // namespace

template <typename T>
void adam_step(detail::DeviceRuntime& rt, const AdamStep& s, std::int64_t n, T* param, const T* grad, T* exp_avg,
               T* exp_avg_sq) {
  rt.parallel_for(n, kGrainElements, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t len = end - begin;
    if (s.decoupled)
      adam_block<T, true>(s, len, param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin);
    else
      adam_block<T, false>(s, len, param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin);
  });
}

template <typename T>
void sgd_step(detail::DeviceRuntime& rt, const SgdStep& s, std::int64_t n, T* param, const T* grad,
              T* momentum_buffer) {
  rt.parallel_for(n, kGrainElements, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t len = end - begin;
    T* p = param + begin;
    const T* g = grad + begin;
    if (momentum_buffer == nullptr) return sgd_dispatch<T, Momentum::none>(s, len, p, g, nullptr);
    T* b = momentum_buffer + begin;
    if (s.first)
      sgd_dispatch<T, Momentum::first>(s, len, p, g, b);
    else
      sgd_dispatch<T, Momentum::later>(s, len, p, g, b);
  });
}

template <typename T>
double norm_power_sum(detail::DeviceRuntime& rt, std::int64_t n, const T* x, double p) {
  const std::int64_t blocks = (n + kGrainElements - 1) / kGrainElements;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
  const bool inf = std::isinf(p);
  rt.parallel_for(blocks, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t b = first; b < last; ++b) {
      const std::int64_t begin = b * kGrainElements, end = std::min(n, begin + kGrainElements);
      double acc = 0;
      if (inf) {
        for (std::int64_t i = begin; i < end; ++i) acc = nan_max(acc, std::abs(static_cast<double>(x[i])));
      } else if (p == 2) {
        for (std::int64_t i = begin; i < end; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
      } else if (p == 1) {
        for (std::int64_t i = begin; i < end; ++i) acc += std::abs(static_cast<double>(x[i]));
      } else {
        for (std::int64_t i = begin; i < end; ++i) acc += std::pow(std::abs(static_cast<double>(x[i])), p);
      }
      partial[static_cast<std::size_t>(b)] = acc;
    }
  });
  double total = 0;
  for (double v : partial) total = inf ? nan_max(total, v) : total + v;
  return total;
}

template void adam_step<float>(detail::DeviceRuntime&, const AdamStep&, std::int64_t, float*, const float*, float*,
                               float*);
template void adam_step<double>(detail::DeviceRuntime&, const AdamStep&, std::int64_t, double*, const double*, double*,
                                double*);
template void sgd_step<float>(detail::DeviceRuntime&, const SgdStep&, std::int64_t, float*, const float*, float*);
template void sgd_step<double>(detail::DeviceRuntime&, const SgdStep&, std::int64_t, double*, const double*, double*);
template double norm_power_sum<float>(detail::DeviceRuntime&, std::int64_t, const float*, double);
template double norm_power_sum<double>(detail::DeviceRuntime&, std::int64_t, const double*, double);

}  // namespace forge::cpu
