#include "forge/optim/adam.h"

#include <cmath>

#include "backend/cpu/optim_kernels.h"
#include "core/tensor_internal.h"
#include "forge/autograd.h"

namespace forge::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : params_(std::move(params)), options_(options) {
  const char* op = "Adam";
  FORGE_CHECK(options.lr >= 0, invalid_argument, op, "learning rate ", options.lr, " is negative");
  FORGE_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1, invalid_argument,
              op, "betas (", options.beta1, ", ", options.beta2, ") must lie in [0, 1)");
  FORGE_CHECK(options.eps >= 0, invalid_argument, op, "eps ", options.eps, " is negative");
  FORGE_CHECK(options.weight_decay >= 0, invalid_argument, op, "weight_decay ", options.weight_decay, " is negative");
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    detail::check_input(op, p, "parameter");
    FORGE_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, dtype, op, "parameter ", i, " holds ",
                dtype_name(p.dtype()), "; Adam updates f32 and f64 parameters");
    FORGE_CHECK(p.is_contiguous(), invalid_argument, op, "parameter ", i, " of shape ", p.shape(),
                " is not contiguous");
    FORGE_CHECK(p.requires_grad() && p.is_leaf(), invalid_argument, op, "parameter ", i,
                " must be a leaf that requires grad");
  }
  for (const Tensor& p : params_) {
    for (auto* moments : {&exp_avg_, &exp_avg_sq_}) {
      Tensor m = detail::allocate(p.runtime(), p.shape(), p.dtype(), op);
      m.zero_();
      moments->push_back(std::move(m));
    }
  }
}

void Adam::step() {
  autograd::NoGradGuard no_grad;
  ++steps_;
  const double t = static_cast<double>(steps_);
  const cpu::AdamStep s{options_.lr,
                        options_.beta1,
                        options_.beta2,
                        options_.eps,
                        options_.weight_decay,
                        1 - std::pow(options_.beta1, t),
                        1 - std::pow(options_.beta2, t),
                        options_.decoupled_weight_decay};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous() || g.dtype() != p.dtype()) g = g.contiguous().to(p.dtype());
    const std::int64_t n = p.numel();
    if (p.dtype() == DType::f32) {
      cpu::adam_step<float>(p.runtime(), s, n, p.data_ptr<float>(), g.data_ptr<float>(),
                            exp_avg_[i].data_ptr<float>(), exp_avg_sq_[i].data_ptr<float>());
    } else {
      cpu::adam_step<double>(p.runtime(), s, n, p.data_ptr<double>(), g.data_ptr<double>(),
                             exp_avg_[i].data_ptr<double>(), exp_avg_sq_[i].data_ptr<double>());
    }
    p.buffer()->bump_version();
  }
}

void Adam::zero_grad(bool set_to_none) {
  for (Tensor& p : params_) p.zero_grad(set_to_none);
}

}  // namespace forge::optim
