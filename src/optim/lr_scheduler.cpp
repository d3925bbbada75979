#include "forge/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

#include "forge/error.h"

namespace forge::optim {

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : optimizer_(&optimizer), base_lr_(optimizer.lr()), step_size_(step_size), gamma_(gamma), lr_(base_lr_) {
  FORGE_CHECK(step_size >= 1, invalid_argument, "StepLR", "step_size ", step_size, " must be at least 1");
  FORGE_CHECK(gamma >= 0 && std::isfinite(gamma), invalid_argument, "StepLR", "gamma ", gamma,
              " must be finite and not negative");
}

void StepLR::step() {
  ++steps_;
  // From the base each time, so no rounding accumulates over many decays.
  lr_ = base_lr_ * std::pow(gamma_, static_cast<double>(steps_ / step_size_));
  optimizer_->set_lr(lr_);
}

CosineWithWarmup::CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps,
                                   double min_lr)
    : optimizer_(&optimizer),
      base_lr_(optimizer.lr()),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      min_lr_(min_lr) {
  const char* op = "CosineWithWarmup";
  FORGE_CHECK(warmup_steps >= 0, invalid_argument, op, "warmup_steps ", warmup_steps, " is negative");
  FORGE_CHECK(total_steps > 0 && total_steps >= warmup_steps, invalid_argument, op, "total_steps ", total_steps,
              " must be positive and at least warmup_steps ", warmup_steps);
  FORGE_CHECK(min_lr >= 0 && min_lr <= base_lr_, invalid_argument, op, "min_lr ", min_lr,
              " must lie in [0, the optimizer's lr ", base_lr_, "]");
  lr_ = lr_at(0);
  optimizer_->set_lr(lr_);
}

double CosineWithWarmup::lr_at(std::int64_t t) const noexcept {
  if (t < warmup_steps_) return base_lr_ * static_cast<double>(t) / static_cast<double>(warmup_steps_);
  if (t >= total_steps_) return min_lr_;
  const double s = static_cast<double>(t - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  return min_lr_ + (base_lr_ - min_lr_) * 0.5 * (1 + std::cos(std::numbers::pi * s));
}

void CosineWithWarmup::step() {
  ++steps_;
  lr_ = lr_at(steps_);
  optimizer_->set_lr(lr_);
}

}  // namespace forge::optim
