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

AdamOptions decoupled(const AdamWOptions& o) {
  return {.lr = o.lr,
          .beta1 = o.beta1,
          .beta2 = o.beta2,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .decoupled_weight_decay = true};
}

// The options group g runs with: `base` with the group's overrides.
AdamOptions group_options(const AdamOptions& base, const GroupOptions& g, std::size_t group, const char* op) {
  FORGE_CHECK(!g.momentum && !g.dampening && !g.nesterov, invalid_argument, op, "parameter group ", group,
              " sets momentum, dampening or nesterov, which ", op, " does not have");
  AdamOptions o = base;
  o.lr = g.lr.value_or(o.lr);
  o.beta1 = g.beta1.value_or(o.beta1);
  o.beta2 = g.beta2.value_or(o.beta2);
  o.eps = g.eps.value_or(o.eps);
  o.weight_decay = g.weight_decay.value_or(o.weight_decay);
  check_options(o, op);
  return o;
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

}  // namespace

// The delegating constructors catch what building their arguments throws.
Adam::Adam(std::vector<Tensor> params, AdamOptions options) try : Adam(one_group(std::move(params)), options, "Adam") {}
FORGE_CATCH_OOM("Adam")

Adam::Adam(const std::vector<ParamGroup>& groups, AdamOptions options) try : Adam(groups, options, "Adam") {}
FORGE_CATCH_OOM("Adam")

Adam::Adam(const std::vector<ParamGroup>& groups, AdamOptions options, std::string name)
    : Optimizer(groups, std::move(name)) {
  try {
    check_options(options, this->name().c_str());
    for (std::size_t g = 0; g < groups.size(); ++g)
      groups_.push_back(group_options(options, groups[g].options, g, this->name().c_str()));
    init_state({"exp_avg", "exp_avg_sq"});
  }
  FORGE_CATCH_OOM(this->name().c_str())
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) try
    : Adam(one_group(std::move(params)), decoupled(options), "AdamW") {}
FORGE_CATCH_OOM("AdamW")

AdamW::AdamW(const std::vector<ParamGroup>& groups, AdamWOptions options) try
    : Adam(groups, decoupled(options), "AdamW") {}
FORGE_CATCH_OOM("AdamW")

double Adam::lr(std::size_t group) const { return groups_[checked_group(group)].lr; }

void Adam::set_lr(std::size_t group, double lr) {
  FORGE_CHECK(lr >= 0, invalid_argument, name(), "lr ", lr, " is negative");
  groups_[checked_group(group)].lr = lr;
}

void Adam::step() try {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = packed_grads(params());
  count_step();
  for (std::size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    const AdamOptions& o = groups_[group_of(i)];
    // Bias corrections use this parameter's own update count (as libtorch).
    const double t = static_cast<double>(count_update(i));
    const backend::AdamStep s{o.lr,
                              o.beta1,
                              o.beta2,
                              o.eps,
                              o.weight_decay,
                              1 - std::pow(o.beta1, t),
                              1 - std::pow(o.beta2, t),
                              o.decoupled_weight_decay};
    detail::DeviceRuntime& dev = detail::device_runtime(p);
    dev.kernels().optim.adam_step.get(name().c_str(), p.dtype(), dev)(
        dev, s, p.dtype(), p.numel(), detail::first_element(p), detail::first_element(g),
        detail::first_element(state(i, 0)), detail::first_element(state(i, 1)));
    p.buffer()->bump_version();
  }
}
FORGE_CATCH_OOM(name().c_str())

std::vector<std::pair<std::string, double>> Adam::hyperparameters(std::size_t group) const {
  const AdamOptions& o = groups_.at(group);
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"decoupled_weight_decay", o.decoupled_weight_decay ? 1.0 : 0.0}};
}

void Adam::load_hyperparameters(std::size_t group, const std::vector<double>& values, const char* op, bool apply) {
  const AdamOptions o{values.at(0), values.at(1), values.at(2), values.at(3), values.at(4), values.at(5) != 0};
  check_options(o, op);
  // Decoupled or not is which algorithm this is (Adam or AdamW), not a setting to load.
  AdamOptions& own = groups_.at(group);
  FORGE_CHECK(o.decoupled_weight_decay == own.decoupled_weight_decay && (values[5] == 0 || values[5] == 1),
              invalid_argument, op, "key 'decoupled_weight_decay' holds ", values[5], ", this optimizer is ", name());
  if (apply) own = o;
}

}  // namespace forge::optim
