#pragma once
// Learning-rate schedules. Each reads every parameter group's lr at
// construction as that group's base rate, sets the lr for step 0 at once, and
// sets the next one on every step() (call it after optimizer.step()). Each
// group follows the same curve scaled to its own base rate (an absolute
// setting such as CosineWithWarmup's min_lr is the same for all groups). The
// optimizer must outlive the schedule.
//
// Every schedule here is a closed form of the step count t, so its state is
// t, the base rates and its settings. state_dict() keys (0-d tensors):
//   "step"       i64: how many times step() ran
//   "base_lr"    f64: the base rate, with one group; with several,
//                "group.<g>.base_lr"
//   "<setting>"  f64: the constructor's arguments ("step_size", "gamma", ...)
// load_state_dict() wants exactly these keys (as many groups as the
// optimizer has), adopts them and sets the optimizer's lr for the loaded step
// at once, so a resumed run continues exactly; a refused dict changes nothing.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "forge/optim/optimizer.h"
#include "forge/state_dict.h"

namespace forge::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // One more step: sets every group's lr for the new step count.
  void step();
  // Group 0's current lr, and group g's (out_of_range past the last group).
  double lr() const { return lr(0); }
  double lr(std::size_t group) const;
  std::int64_t steps() const noexcept { return steps_; }
  const std::vector<double>& base_lrs() const noexcept { return base_lrs_; }
  const std::string& name() const noexcept { return name_; }

  StateDict state_dict() const;
  void load_state_dict(const StateDict& dict);

 protected:
  LRScheduler(Optimizer& optimizer, std::string name);
  // Called last by each subclass's constructor: checks the settings and sets
  // the lr of step 0.
  void start();
  // Group g's lr after t steps, from its base rate `base`.
  virtual double lr_at(double base, std::int64_t t) const noexcept = 0;
  // The settings saved in state dicts, as (name, member); load_state_dict
  // writes the members and calls check() to accept them.
  virtual std::vector<std::pair<const char*, double*>> settings() = 0;
  // invalid_argument (prefixed `op`) for settings that make no sense.
  virtual void check(const char* op) const = 0;

 private:
  void apply();
  Optimizer* optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  std::int64_t steps_ = 0;
};

// lr = base * gamma^floor(t / step_size) after t calls of step().
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(double base, std::int64_t t) const noexcept override;
  std::vector<std::pair<const char*, double*>> settings() override;
  void check(const char* op) const override;

 private:
  double step_size_;
  double gamma_;
};

// lr = base * gamma^t.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  double lr_at(double base, std::int64_t t) const noexcept override;
  std::vector<std::pair<const char*, double*>> settings() override;
  void check(const char* op) const override;

 private:
  double gamma_;
};

// A linear ramp of the factor (as torch's LinearLR, e.g. a warm-up):
// lr = base * (start + (end - start) * min(t, total_steps) / total_steps).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, std::int64_t total_steps = 5);

 protected:
  double lr_at(double base, std::int64_t t) const noexcept override;
  std::vector<std::pair<const char*, double*>> settings() override;
  void check(const char* op) const override;

 private:
  double start_factor_;
  double end_factor_;
  double total_steps_;
};

// After t calls of step(): base * t / warmup_steps while t < warmup_steps
// (linear warmup from 0), then min_lr + (base - min_lr) (1 + cos(pi s)) / 2
// with s = (t - warmup_steps) / (total_steps - warmup_steps), and min_lr
// from total_steps on.
class CosineWithWarmup : public LRScheduler {
 public:
  CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps, double min_lr = 0);

 protected:
  double lr_at(double base, std::int64_t t) const noexcept override;
  std::vector<std::pair<const char*, double*>> settings() override;
  void check(const char* op) const override;

 private:
  double warmup_steps_;
  double total_steps_;
  double min_lr_;
};

// The one-cycle policy (torch's OneCycleLR with cosine annealing, two
// phases). The optimizer's lr per group is the peak: the lr starts at
// base / div_factor, rises to base at step pct_start * total_steps - 1, then
// falls to base / (div_factor * final_div_factor) at step total_steps - 1,
// each phase along a half cosine. Past total_steps - 1 it stays at the last
// value (torch refuses to step further).
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, std::int64_t total_steps, double pct_start = 0.3, double div_factor = 25,
             double final_div_factor = 1e4);

 protected:
  double lr_at(double base, std::int64_t t) const noexcept override;
  std::vector<std::pair<const char*, double*>> settings() override;
  void check(const char* op) const override;

 private:
  double total_steps_;
  double pct_start_;
  double div_factor_;
  double final_div_factor_;
};

}  // namespace forge::optim
