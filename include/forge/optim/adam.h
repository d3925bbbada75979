#pragma once
// Adam and AdamW (Kingma & Ba; Loshchilov & Hutter), one fused pass per
// parameter: the moments and the parameter are read and written once per step.
//
//   m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// t counts the updates of that parameter (as libtorch). weight_decay adds
// wd * p to g (Adam) or subtracts lr * wd * p from p first (AdamW: decoupled).
// State: "exp_avg" (m) and "exp_avg_sq" (v) per parameter. Groups may
// override lr, beta1, beta2, eps and weight_decay (optimizer.h).

#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "forge/optim/optimizer.h"
#include "forge/tensor.h"

namespace forge::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // true: AdamW
};

// AdamW's own options: the same fields with libtorch's AdamW defaults, so
// that AdamW(params, {.lr = 3e-4}) keeps weight_decay 0.01.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class Adam : public Optimizer {
 public:
  // params: contiguous f32/f64 leaves that require grad.
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  // Parameter groups; `options` fills what a group leaves unset.
  explicit Adam(const std::vector<ParamGroup>& groups, AdamOptions options = {});

  void step() override;
  using Optimizer::lr;
  using Optimizer::set_lr;
  double lr(std::size_t group) const override;
  void set_lr(std::size_t group, double lr) override;

  // Group 0's options, and group g's.
  const AdamOptions& options() const noexcept { return groups_[0]; }
  const AdamOptions& options(std::size_t group) const { return groups_[checked_group(group)]; }
  const Tensor& exp_avg(std::size_t i) const { return state(i, 0); }
  const Tensor& exp_avg_sq(std::size_t i) const { return state(i, 1); }

 protected:
  Adam(const std::vector<ParamGroup>& groups, AdamOptions options, std::string name);
  std::vector<std::pair<std::string, double>> hyperparameters(std::size_t group) const override;
  void load_hyperparameters(std::size_t group, const std::vector<double>& values, const char* op, bool apply) override;

 private:
  std::vector<AdamOptions> groups_;  // one per group, overrides applied
};

// AdamW: Adam with decoupled weight decay (default 0.01, as libtorch's AdamW).
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(const std::vector<ParamGroup>& groups, AdamWOptions options = {});
  // The older spelling with an explicit AdamOptions (its weight_decay as
  // given, decoupled_weight_decay forced on). A template, so that a braced
  // list such as {.lr = 1e-3} always means AdamWOptions.
  template <std::same_as<AdamOptions> O>
  AdamW(std::vector<Tensor> params, const O& options) : AdamW(std::move(params), adamw_options(options)) {}

 private:
  static AdamWOptions adamw_options(const AdamOptions& o) noexcept {
    return {.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
  }
};

}  // namespace forge::optim
