#pragma once
// Adam and AdamW (Kingma & Ba; Loshchilov & Hutter), one fused pass per
// parameter: the moments and the parameter are read and written once per step.
//
//   m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// weight_decay adds wd * p to g (Adam) or subtracts lr * wd * p from p first
// (AdamW: decoupled). The moments belong to the optimizer and live in the
// parameters' context.

#include <cstdint>
#include <vector>

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

class Adam {
 public:
  // params: contiguous f32/f64 leaves that require grad.
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});

  // One update of every parameter that has a .grad (the others are skipped), under no grad.
  void step();
  // Drops every parameter's .grad (set_to_none) or zeroes it.
  void zero_grad(bool set_to_none = true);

  const AdamOptions& options() const noexcept { return options_; }
  void set_lr(double lr) noexcept { options_.lr = lr; }
  std::int64_t steps() const noexcept { return steps_; }
  const std::vector<Tensor>& params() const noexcept { return params_; }
  const Tensor& exp_avg(std::size_t i) const { return exp_avg_.at(i); }
  const Tensor& exp_avg_sq(std::size_t i) const { return exp_avg_sq_.at(i); }

 private:
  std::vector<Tensor> params_;
  std::vector<Tensor> exp_avg_;
  std::vector<Tensor> exp_avg_sq_;
  AdamOptions options_;
  std::int64_t steps_ = 0;
};

// AdamW: Adam with decoupled weight decay (default 0.01, as libtorch's AdamW).
inline Adam AdamW(std::vector<Tensor> params, AdamOptions options = {.weight_decay = 0.01}) {
  options.decoupled_weight_decay = true;
  return Adam(std::move(params), options);
}

}  // namespace forge::optim
