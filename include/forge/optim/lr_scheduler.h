#pragma once
// Learning-rate schedules. Each reads the optimizer's lr at construction as
// the base rate, sets the optimizer's lr for step 0 at once, and sets the next
// one on every step() (call it after optimizer.step()). The optimizer must
// outlive the schedule.

#include <cstdint>

#include "forge/optim/optimizer.h"

namespace forge::optim {

// lr = base * gamma^floor(t / step_size) after t calls of step().
class StepLR {
 public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  void step();
  double lr() const noexcept { return lr_; }
  std::int64_t steps() const noexcept { return steps_; }

 private:
  Optimizer* optimizer_;
  double base_lr_;
  std::int64_t step_size_;
  double gamma_;
  std::int64_t steps_ = 0;
  double lr_;
};

// After t calls of step(): base * t / warmup_steps while t < warmup_steps
// (linear warmup from 0), then min_lr + (base - min_lr) (1 + cos(pi s)) / 2
// with s = (t - warmup_steps) / (total_steps - warmup_steps), and min_lr
// from total_steps on.
class CosineWithWarmup {
 public:
  CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps, double min_lr = 0);
  void step();
  double lr() const noexcept { return lr_; }
  std::int64_t steps() const noexcept { return steps_; }

 private:
  double lr_at(std::int64_t t) const noexcept;
  Optimizer* optimizer_;
  double base_lr_;
  std::int64_t warmup_steps_;
  std::int64_t total_steps_;
  double min_lr_;
  std::int64_t steps_ = 0;
  double lr_;
};

}  // namespace forge::optim
