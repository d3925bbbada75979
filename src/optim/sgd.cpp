#include "forge/optim/sgd.h"

#include <algorithm>

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

// The options group g runs with: `base` with the group's overrides.
SGDOptions group_options(const SGDOptions& base, const GroupOptions& g, std::size_t group) {
  FORGE_CHECK(!g.beta1 && !g.beta2 && !g.eps, invalid_argument, "SGD", "parameter group ", group,
              " sets beta1, beta2 or eps, which SGD does not have");
  SGDOptions o = base;
  o.lr = g.lr.value_or(o.lr);
  o.momentum = g.momentum.value_or(o.momentum);
  o.dampening = g.dampening.value_or(o.dampening);
  o.weight_decay = g.weight_decay.value_or(o.weight_decay);
  o.nesterov = g.nesterov.value_or(o.nesterov);
  check_options(o, "SGD");
  return o;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) try : Optimizer(std::move(params), "SGD") {
  init({ParamGroup{}}, options);
}
FORGE_CATCH_OOM("SGD")

SGD::SGD(const std::vector<ParamGroup>& groups, SGDOptions options) try : Optimizer(groups, "SGD") {
  init(groups, options);
}
FORGE_CATCH_OOM("SGD")

void SGD::init(const std::vector<ParamGroup>& groups, const SGDOptions& options) {
  check_options(options, "SGD");
  for (std::size_t g = 0; g < groups.size(); ++g) groups_.push_back(group_options(options, groups[g].options, g));
  const bool momentum =
      std::any_of(groups_.begin(), groups_.end(), [](const SGDOptions& o) { return o.momentum != 0; });
  if (momentum)
    init_state({"momentum_buffer"});
  else
    init_state({});
}

double SGD::lr(std::size_t group) const { return groups_[checked_group(group)].lr; }

void SGD::set_lr(std::size_t group, double lr) {
  FORGE_CHECK(lr >= 0, invalid_argument, "SGD", "lr ", lr, " is negative");
  groups_[checked_group(group)].lr = lr;
}

const Tensor& SGD::momentum_buffer(std::size_t i) const {
  const double momentum = groups_[group_of(i)].momentum;
  FORGE_CHECK(momentum != 0, invalid_argument, "SGD", "no momentum buffer: parameter ", i, "'s momentum is 0");
  return state(i, 0);
}

void SGD::step() try {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = packed_grads(params());
  count_step();
  for (std::size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    const SGDOptions& o = groups_[group_of(i)];
    const bool momentum = o.momentum != 0;
    // The momentum buffer starts as the parameter's first (decayed) gradient.
    const bool first = count_update(i) == 1;
    const backend::SgdStep s{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first};
    detail::DeviceRuntime& dev = detail::device_runtime(p);
    dev.kernels().optim.sgd_step.get(name().c_str(), p.dtype(), dev)(
        dev, s, p.dtype(), p.numel(), detail::first_element(p), detail::first_element(g),
        momentum ? detail::first_element(state(i, 0)) : nullptr);
    p.buffer()->bump_version();
  }
}
FORGE_CATCH_OOM(name().c_str())

std::vector<std::pair<std::string, double>> SGD::hyperparameters(std::size_t group) const {
  const SGDOptions& o = groups_.at(group);
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

void SGD::load_hyperparameters(std::size_t group, const std::vector<double>& values, const char* op, bool apply) {
  FORGE_CHECK(values.at(4) == 0 || values[4] == 1, invalid_argument, op, "key 'nesterov' holds ", values[4],
              ", not 0 or 1");
  const SGDOptions o{values.at(0), values.at(1), values.at(2), values.at(3), values[4] != 0};
  check_options(o, op);
  // Whether a momentum buffer exists is fixed when the optimizer is made.
  SGDOptions& own = groups_.at(group);
  FORGE_CHECK((o.momentum != 0) == (own.momentum != 0), invalid_argument, op, "key 'momentum' holds ", o.momentum,
              ", this optimizer was made with momentum ", own.momentum);
  if (apply) own = o;
}

}  // namespace forge::optim
