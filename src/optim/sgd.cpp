#include "forge/optim/sgd.h"

#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/error.h"
#include "optim/optimizer_internal.h"

namespace forge::optim {

namespace {

void check_options(const SGDOptions& o, const char* op) {
  FORGE_CHECK(o.lr >= 0, invalid_argument, op, "lr ", o.lr, " is negative");
  FORGE_CHECK(o.momentum >= 0, invalid_argument, op, "momentum ", o.momentum, " is negative");
  FORGE_CHECK(o.dampening >= 0 && o.dampening <= 1, invalid_argument, op, "dampening ", o.dampening,
              " must lie in [0, 1]");
  FORGE_CHECK(o.weight_decay >= 0, invalid_argument, op, "weight_decay ", o.weight_decay, " is negative");
  FORGE_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), invalid_argument, op,
              "nesterov needs momentum > 0 and dampening 0 (momentum ", o.momentum, ", dampening ", o.dampening, ")");
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) try : Optimizer(std::move(params), "SGD"), options_(options) {
  check_options(options_, "SGD");
  if (options_.momentum != 0)
    init_state({"momentum_buffer"});
  else
    init_state({});
}
FORGE_CATCH_OOM("SGD")

void SGD::set_lr(double lr) {
  FORGE_CHECK(lr >= 0, invalid_argument, "SGD", "lr ", lr, " is negative");
  options_.lr = lr;
}

const Tensor& SGD::momentum_buffer(std::size_t i) const {
  FORGE_CHECK(options_.momentum != 0, invalid_argument, "SGD", "no momentum buffer: momentum is 0");
  return state(i, 0);
}

void SGD::step() try {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = packed_grads(params());
  count_step();
  const bool momentum = options_.momentum != 0;
  for (std::size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    // The momentum buffer starts as the parameter's first (decayed) gradient.
    const bool first = count_update(i) == 1;
    const backend::SgdStep s{options_.lr,           options_.momentum, options_.dampening,
                             options_.weight_decay, options_.nesterov, first};
    detail::DeviceRuntime& dev = detail::device_runtime(p);
    dev.kernels().optim.sgd_step.get(name().c_str(), p.dtype(), dev)(
        dev, s, p.dtype(), p.numel(), detail::first_element(p), detail::first_element(g),
        momentum ? detail::first_element(state(i, 0)) : nullptr);
    p.buffer()->bump_version();
  }
}
FORGE_CATCH_OOM(name().c_str())

std::vector<std::pair<std::string, double>> SGD::hyperparameters() const {
  return {{"lr", options_.lr},
          {"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov ? 1.0 : 0.0}};
}

void SGD::load_hyperparameters(const std::vector<double>& values, const char* op, bool apply) {
  FORGE_CHECK(values.at(4) == 0 || values[4] == 1, invalid_argument, op, "key 'nesterov' holds ", values[4],
              ", not 0 or 1");
  const SGDOptions o{values.at(0), values.at(1), values.at(2), values.at(3), values[4] != 0};
  check_options(o, op);
  // Whether a momentum buffer exists is fixed when the optimizer is made.
  FORGE_CHECK((o.momentum != 0) == (options_.momentum != 0), invalid_argument, op, "key 'momentum' holds ", o.momentum,
              ", this optimizer was made with momentum ", options_.momentum);
  if (apply) options_ = o;
}

}  // namespace forge::optim
