#include "forge/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/optim_kernels.h"
#include "forge/autograd.h"
#include "forge/error.h"

namespace forge::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  const char* op = "clip_grad_norm_";
  FORGE_CHECK(max_norm >= 0, invalid_argument, op, "max_norm ", max_norm, " is negative");
  FORGE_CHECK(norm_type > 0, invalid_argument, op, "norm_type ", norm_type, " must be positive (or infinite)");
  const bool inf = std::isinf(norm_type);
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    FORGE_CHECK(p.defined(), invalid_argument, op, "undefined parameter");
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(std::move(g));
  }
  // Each gradient's share, in double; f16/bf16 (or strided) gradients go through an f64 copy.
  double total = 0;
  for (const Tensor& g : grads) {
    const bool direct = (g.dtype() == DType::f32 || g.dtype() == DType::f64) && g.is_contiguous();
    const Tensor c = direct ? g : g.to(DType::f64).contiguous();
    const double part = c.dtype() == DType::f32
                            ? cpu::norm_power_sum<float>(c.runtime(), c.numel(), c.data_ptr<float>(), norm_type)
                            : cpu::norm_power_sum<double>(c.runtime(), c.numel(), c.data_ptr<double>(), norm_type);
    total = inf ? (part > total || std::isnan(part) ? part : total) : total + part;
  }
  const double norm = inf ? total : std::pow(total, 1 / norm_type);
  if (std::isfinite(norm) && norm > max_norm) {
    const double coef = max_norm / (norm + 1e-6);
    for (Tensor& g : grads) g.mul_(coef);
  }
  return norm;
}

}  // namespace forge::optim
