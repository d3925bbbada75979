// The cpu backend's optimizer family (backend/kernels/optim.h): the fused
// kernels of optim_kernels.cpp, for f32 and f64.

#include "backend/cpu/optim_kernels.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {
namespace {

void adam(detail::DeviceRuntime& dev, const AdamStep& s, DType dtype, std::int64_t n, void* param, const void* grad,
          void* exp_avg, void* exp_avg_sq) {
  if (dtype == DType::f32)
    adam_step(dev, s, n, static_cast<float*>(param), static_cast<const float*>(grad), static_cast<float*>(exp_avg),
              static_cast<float*>(exp_avg_sq));
  else
    adam_step(dev, s, n, static_cast<double*>(param), static_cast<const double*>(grad), static_cast<double*>(exp_avg),
              static_cast<double*>(exp_avg_sq));
}

void sgd(detail::DeviceRuntime& dev, const SgdStep& s, DType dtype, std::int64_t n, void* param, const void* grad,
         void* momentum_buffer) {
  if (dtype == DType::f32)
    sgd_step(dev, s, n, static_cast<float*>(param), static_cast<const float*>(grad),
             static_cast<float*>(momentum_buffer));
  else
    sgd_step(dev, s, n, static_cast<double*>(param), static_cast<const double*>(grad),
             static_cast<double*>(momentum_buffer));
}

double norm(detail::DeviceRuntime& dev, DType dtype, std::int64_t n, const void* x, double p) {
  return dtype == DType::f32 ? norm_power_sum(dev, n, static_cast<const float*>(x), p)
                             : norm_power_sum(dev, n, static_cast<const double*>(x), p);
}

constexpr backend::DTypeMask kF32F64 = backend::mask_of(DType::f32, DType::f64);

}  // namespace

void fill_optim_table(backend::OptimKernels& k) {
  k.adam_step = {adam, kF32F64};
  k.sgd_step = {sgd, kF32F64};
  k.norm_power_sum = {norm, kF32F64};
}

}  // namespace forge::cpu
