#pragma once
// SGD with momentum, dampening, Nesterov and L2 weight decay, libtorch's
// semantics, one fused pass per parameter:
//
//   d = g + wd p
//   b = d on a parameter's first update, else momentum b + (1 - dampening) d
//   d = d + momentum b (nesterov) or b
//   p -= lr d
// State: "momentum_buffer" (b) per parameter when some group's momentum is
// not 0 (every parameter then has one; those of groups without momentum stay
// unused). Groups may override lr, momentum, dampening, weight_decay and
// nesterov (optimizer.h).

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
  // Parameter groups; `options` fills what a group leaves unset.
  explicit SGD(const std::vector<ParamGroup>& groups, SGDOptions options = {});

  void step() override;
  using Optimizer::lr;
  using Optimizer::set_lr;
  double lr(std::size_t group) const override;
  void set_lr(std::size_t group, double lr) override;

  // Group 0's options, and group g's.
  const SGDOptions& options() const noexcept { return groups_[0]; }
  const SGDOptions& options(std::size_t group) const { return groups_[checked_group(group)]; }
  // Parameter i's momentum buffer (its group's momentum > 0 only).
  const Tensor& momentum_buffer(std::size_t i) const;

 protected:
  std::vector<std::pair<std::string, double>> hyperparameters(std::size_t group) const override;
  void load_hyperparameters(std::size_t group, const std::vector<double>& values, const char* op, bool apply) override;

 private:
  void init(const std::vector<ParamGroup>& groups, const SGDOptions& options);
  std::vector<SGDOptions> groups_;  // one per group, overrides applied
};

}  // namespace forge::optim
