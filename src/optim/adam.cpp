#include "forge/optim/adam.h"

#include <cmath>

#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/error.h"
#include "optim/optimizer_internal.h"

namespace forge::optim {

namespace {

void check_options(const AdamOptions& o, const char* op) {
  FORGE_CHECK(o.lr >= 0, invalid_argument, op, "lr ", o.lr, " is negative");
  FORGE_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, invalid_argument, op, "beta1 ", o.beta1,
              " and beta2 ", o.beta2, " must lie in [0, 1)");
  FORGE_CHECK(o.eps >= 0, invalid_argument, op, "eps ", o.eps, " is negative");
  FORGE_CHECK(o.weight_decay >= 0, invalid_argument, op, "weight_decay ", o.weight_decay, " is negative");
}

AdamOptions decoupled(AdamOptions o) {
  o.decoupled_weight_decay = true;
  return o;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, "Adam") {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, std::string name)
    : Optimizer(std::move(params), std::move(name)), options_(options) {
  check_options(options_, this->name().c_str());
  init_state({"exp_avg", "exp_avg_sq"});
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), decoupled(options), "AdamW") {}

void Adam::set_lr(double lr) {
  FORGE_CHECK(lr >= 0, invalid_argument, name(), "lr ", lr, " is negative");
  options_.lr = lr;
}

void Adam::step() try {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = packed_grads(params());
  count_step();
  for (std::size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    // Bias corrections use this parameter's own update count (as libtorch).
    const double t = static_cast<double>(count_update(i));
    const backend::AdamStep s{options_.lr,
                              options_.beta1,
                              options_.beta2,
                              options_.eps,
                              options_.weight_decay,
                              1 - std::pow(options_.beta1, t),
                              1 - std::pow(options_.beta2, t),
                              options_.decoupled_weight_decay};
    detail::DeviceRuntime& dev = detail::device_runtime(p);
    dev.kernels().optim.adam_step.get(name().c_str(), p.dtype(), dev)(
        dev, s, p.dtype(), p.numel(), detail::first_element(p), detail::first_element(g),
        detail::first_element(state(i, 0)), detail::first_element(state(i, 1)));
    p.buffer()->bump_version();
  }
}
FORGE_CATCH_OOM(name().c_str())

std::vector<std::pair<std::string, double>> Adam::hyperparameters() const {
  return {{"lr", options_.lr},
          {"beta1", options_.beta1},
          {"beta2", options_.beta2},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay},
          {"decoupled_weight_decay", options_.decoupled_weight_decay ? 1.0 : 0.0}};
}

void Adam::load_hyperparameters(const std::vector<double>& values, const char* op, bool apply) {
  const AdamOptions o{values.at(0), values.at(1), values.at(2), values.at(3), values.at(4), values.at(5) != 0};
  check_options(o, op);
  // Decoupled or not is which algorithm this is (Adam or AdamW), not a setting to load.
  FORGE_CHECK(o.decoupled_weight_decay == options_.decoupled_weight_decay && (values[5] == 0 || values[5] == 1),
              invalid_argument, op, "key 'decoupled_weight_decay' holds ", values[5], ", this optimizer is ", name());
  if (apply) options_ = o;
}

}  // namespace forge::optim
