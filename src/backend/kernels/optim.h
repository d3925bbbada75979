#pragma once
// The optimizer family of the kernel table (backend/kernels.h): fused
// parameter updates and the gradient norm, over contiguous buffers of one
// dtype and one length (the optimizer checked both).

#include <cstdint>

#include "backend/backend.h"

namespace forge::backend {

struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  double bias_correction1, bias_correction2;  // 1 - beta^t
  bool decoupled;                             // AdamW
};

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first;  // the parameter's first update: the momentum buffer takes d as it is
};

using AdamStepFn = void(detail::DeviceRuntime& dev, const AdamStep& s, DType dtype, std::int64_t n, void* param,
                        const void* grad, void* exp_avg, void* exp_avg_sq);
// momentum_buffer: null when s.momentum is 0.
using SgdStepFn = void(detail::DeviceRuntime& dev, const SgdStep& s, DType dtype, std::int64_t n, void* param,
                       const void* grad, void* momentum_buffer);
// sum |x|^p (p > 0), or max |x| when p is infinite, accumulated in double
// over fixed blocks and added in block order: the same bits for any thread
// count.
using NormPowerSumFn = double(detail::DeviceRuntime& dev, DType dtype, std::int64_t n, const void* x, double p);

struct OptimKernels {
  Entry<AdamStepFn> adam_step;
  Entry<SgdStepFn> sgd_step;
  Entry<NormPowerSumFn> norm_power_sum;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("adam_step", k.adam_step);
    f("sgd_step", k.sgd_step);
    f("norm_power_sum", k.norm_power_sum);
  }
};

}  // namespace forge::backend
