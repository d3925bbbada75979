#include "forge/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/error.h"

namespace forge::optim {

// libtorch 1.13's rule: the gradients are multiplied by min(max_norm / (norm
// + 1e-6), 1) whatever the norm, so an infinite norm multiplies them by 0
// (finite entries become 0, infinite ones NaN) and a NaN norm makes them all
// NaN; error_if_nonfinite refuses such a norm before touching anything.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) try {
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
    detail::DeviceRuntime& dev = detail::device_runtime(c);
    const double part = dev.kernels().optim.norm_power_sum.get(op, c.dtype(), dev)(dev, c.dtype(), c.numel(),
                                                                                   detail::first_element(c), norm_type);
    total = inf ? (part > total || std::isnan(part) ? part : total) : total + part;
  }
  const double norm = inf ? total : std::pow(total, 1 / norm_type);
  FORGE_CHECK(std::isfinite(norm) || !error_if_nonfinite, invalid_argument, op, "the total norm of order ", norm_type,
              " of the gradients is ", norm,
              ", so it cannot be clipped; pass error_if_nonfinite = false to scale them by it anyway");
  const double coef = max_norm / (norm + 1e-6);
  if (!(coef >= 1.0))  // below 1, or NaN
    for (Tensor& g : grads) g.mul_(coef);
  return norm;
}
FORGE_CATCH_OOM("clip_grad_norm_")

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) try {
  const char* op = "clip_grad_value_";
  FORGE_CHECK(clip_value >= 0, invalid_argument, op, "clip_value ", clip_value, " must not be negative or NaN");
  for (const Tensor& p : params) FORGE_CHECK(p.defined(), invalid_argument, op, "undefined parameter");
  autograd::NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.clamp_(-clip_value, clip_value);
  }
}
FORGE_CATCH_OOM("clip_grad_value_")

}  // namespace forge::optim
