#pragma once
// Adam and AdamW (Kingma & Ba; Loshchilov & Hutter), one fused pass per
// parameter: the moments and the parameter are read and written once per step.
//
//   m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// t counts the updates of that parameter (as libtorch). weight_decay adds
// wd * p to g (Adam) or subtracts lr * wd * p from p first (AdamW: decoupled).
// State: "exp_avg" (m) and "exp_avg_sq" (v) per parameter.

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

class Adam : public Optimizer {
 public:
  // params: contiguous f32/f64 leaves that require grad.
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});

  void step() override;
  double lr() const noexcept override { return options_.lr; }
  void set_lr(double lr) override;

  const AdamOptions& options() const noexcept { return options_; }
  const Tensor& exp_avg(std::size_t i) const { return state(i, 0); }
  const Tensor& exp_avg_sq(std::size_t i) const { return state(i, 1); }

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, std::string name);
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void load_hyperparameters(const std::vector<double>& values, const char* op, bool apply) override;

 private:
  AdamOptions options_;
};

// AdamW: Adam with decoupled weight decay (default 0.01, as libtorch's AdamW).
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamOptions options = {.weight_decay = 0.01});
};

}  // namespace forge::optim
