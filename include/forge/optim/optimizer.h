#pragma once
// Optimizer: what every optimizer shares. It holds the parameters it updates,
// split into parameter groups, and, per parameter, its state tensors
// (moments, momentum buffers). The state belongs to the optimizer (DESIGN §1):
// it lives in 64-byte aligned host memory of its own, on the parameters'
// context, never in the transient pool.
//
// Parameter groups (as libtorch's): each ParamGroup lists parameters and the
// options it overrides (lr, weight decay, betas, ...); what a group leaves
// unset comes from the options the optimizer was made with. Parameters are
// numbered across groups in order (group 0's first). An override the
// optimizer has no use for (momentum on Adam) is invalid_argument.
//
// state_dict() keys, all tensors (scalars as 0-d tensors):
//   "state.<i>.<slot>"  parameter i's state tensor (e.g. "state.0.exp_avg"),
//                       aliasing the optimizer's own (save or clone it before
//                       the next step, as a module's state_dict aliases its weights)
//   "state.<i>.step"    i64: how many updates parameter i has had
//   "step"              i64: how many times step() ran
//   "<hyper-parameter>" f64: "lr", "weight_decay", ... (flags as 0 or 1), with
//                       one group; with several, "group.<g>.<hyper-parameter>"
//                       and "group.<g>.size" (i64: how many parameters group g has)
// load_state_dict() wants exactly these keys with these shapes and dtypes,
// copies the bytes (a round trip is bit-exact, a resumed optimizer takes the
// same steps) and changes nothing when it refuses a dict.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "forge/state_dict.h"
#include "forge/tensor.h"

namespace forge::optim {

// What one parameter group sets for itself; unset fields come from the
// optimizer's options. Each optimizer reads the fields it has.
struct GroupOptions {
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
  std::optional<double> momentum = std::nullopt;   // SGD
  std::optional<double> dampening = std::nullopt;  // SGD
  std::optional<bool> nesterov = std::nullopt;     // SGD
  std::optional<double> beta1 = std::nullopt;      // Adam, AdamW
  std::optional<double> beta2 = std::nullopt;      // Adam, AdamW
  std::optional<double> eps = std::nullopt;        // Adam, AdamW
};

struct ParamGroup {
  std::vector<Tensor> params = {};
  GroupOptions options = {};
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a .grad (the others are skipped), under no grad.
  virtual void step() = 0;
  // Drops every parameter's .grad (set_to_none) or zeroes it.
  void zero_grad(bool set_to_none = true);

  // Group 0's learning rate, and group g's (out_of_range past the last group).
  double lr() const { return lr(0); }
  virtual double lr(std::size_t group) const = 0;
  // Sets every group's learning rate, or group g's. Refuses a negative or NaN
  // learning rate (then nothing changes).
  void set_lr(double lr);
  virtual void set_lr(std::size_t group, double lr) = 0;

  StateDict state_dict() const;
  void load_state_dict(const StateDict& dict);

  // Every parameter, in order across the groups.
  const std::vector<Tensor>& params() const noexcept { return params_; }
  std::size_t num_groups() const noexcept { return group_begin_.size() - 1; }
  // Group g's parameters, and the group parameter i belongs to.
  std::vector<Tensor> group_params(std::size_t group) const;
  std::size_t group_of(std::size_t param) const;
  // How many times step() ran.
  std::int64_t steps() const noexcept { return steps_; }
  const std::string& name() const noexcept { return name_; }

 protected:
  // params: a non-empty list of contiguous f32/f64 CPU leaves that require
  // grad, all of one context, no two sharing a byte (a parameter listed twice,
  // or views of one buffer whose elements meet, is invalid_argument naming
  // both indices: a step would update the shared elements twice). `name`
  // prefixes every error.
  Optimizer(std::vector<Tensor> params, std::string name);
  // The groups' parameters, one list (the checks above apply across groups;
  // a group may be empty, not all of them).
  Optimizer(const std::vector<ParamGroup>& groups, std::string name);
  // group, or out_of_range naming this optimizer.
  std::size_t checked_group(std::size_t group) const;

  // Allocates zeroed state tensors named `slots` for every parameter (once,
  // after the subclass checked its options).
  void init_state(std::initializer_list<std::string_view> slots);
  Tensor& state(std::size_t param, std::size_t slot) { return state_[checked(param)][slot]; }
  const Tensor& state(std::size_t param, std::size_t slot) const { return state_[checked(param)][slot]; }
  // param, or out_of_range naming this optimizer.
  std::size_t checked(std::size_t param) const;
  // Counts one update of parameter i and returns its new count.
  std::int64_t count_update(std::size_t param) { return ++param_steps_[param]; }
  std::int64_t param_steps(std::size_t param) const { return param_steps_.at(param); }
  void count_step() noexcept { ++steps_; }

  // Group g's hyper-parameters, as state_dict() saves them (name, value).
  virtual std::vector<std::pair<std::string, double>> hyperparameters(std::size_t group) const = 0;
  // Checks values read from a state dict for group g (in hyperparameters()
  // order; errors name `op`) and, when `apply`, adopts them. load_state_dict
  // calls it first to check and last to apply, so a refusal comes before
  // anything changed.
  virtual void load_hyperparameters(std::size_t group, const std::vector<double>& values, const char* op,
                                    bool apply) = 0;

 private:
  std::vector<Tensor> params_;
  std::vector<std::size_t> group_begin_;  // group g holds params_[group_begin_[g], group_begin_[g + 1])
  std::vector<std::string> slots_;
  std::vector<std::vector<Tensor>> state_;  // [parameter][slot]
  std::vector<std::int64_t> param_steps_;
  std::int64_t steps_ = 0;
  std::string name_;
};

}  // namespace forge::optim
