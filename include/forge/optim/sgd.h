#pragma once
// SGD with momentum, dampening, Nesterov and L2 weight decay, libtorch's
// semantics, one fused pass per parameter:
//
//   d = g + wd p
//   b = d on a parameter's first update, else momentum b + (1 - dampening) d
//   d = d + momentum b (nesterov) or b
//   p -= lr d
// State: "momentum_buffer" (b) per parameter when momentum is not 0.

#include <string>
#include <utility>
#include <vector>

#include "forge/optim/optimizer.h"
#include "forge/tensor.h"

namespace forge::optim {

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0
};

class SGD : public Optimizer {
 public:
  // params: contiguous f32/f64 leaves that require grad.
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});

  void step() override;
  double lr() const noexcept override { return options_.lr; }
  void set_lr(double lr) override;

  const SGDOptions& options() const noexcept { return options_; }
  // Parameter i's momentum buffer (momentum > 0 only).
  const Tensor& momentum_buffer(std::size_t i) const;

 protected:
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  void load_hyperparameters(const std::vector<double>& values, const char* op, bool apply) override;

 private:
  SGDOptions options_;
};

}  // namespace forge::optim
