#include "forge/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "forge/error.h"
#include "optim/optimizer_internal.h"

namespace forge::optim {

namespace {

// A count setting kept as a double (state dicts hold f64 settings): integral, at least `low`.
bool is_count(double v, double low) noexcept { return v >= low && v <= 9007199254740992.0 && v == std::floor(v); }

// From `from` to `to` along a half cosine as pct goes from 0 to 1.
double cos_anneal(double from, double to, double pct) noexcept {
  return to + (from - to) * 0.5 * (1 + std::cos(std::numbers::pi * pct));
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name) : optimizer_(&optimizer), name_(std::move(name)) {
  for (std::size_t g = 0; g < optimizer.num_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
}

void LRScheduler::start() {
  check(name_.c_str());
  apply();
}

void LRScheduler::apply() {
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) optimizer_->set_lr(g, lr_at(base_lrs_[g], steps_));
}

void LRScheduler::step() {
  ++steps_;
  apply();
}

double LRScheduler::lr(std::size_t group) const {
  FORGE_CHECK(group < base_lrs_.size(), out_of_range, name_, "parameter group ", group, " of ", base_lrs_.size());
  return lr_at(base_lrs_[group], steps_);
}

StateDict LRScheduler::state_dict() const try {
  Runtime& rt = optimizer_->params()[0].runtime();
  const char* op = name_.c_str();
  StateDict dict;
  dict.emplace("step", scalar_tensor(rt, static_cast<double>(steps_), DType::i64, op));
  for (std::size_t g = 0; g < base_lrs_.size(); ++g)
    dict.emplace(group_key(g, base_lrs_.size(), "base_lr"), scalar_tensor(rt, base_lrs_[g], DType::f64, op));
  for (const auto& [name, member] : const_cast<LRScheduler*>(this)->settings())
    dict.emplace(name, scalar_tensor(rt, *member, DType::f64, op));
  return dict;
}
FORGE_CATCH_OOM(name_.c_str())

void LRScheduler::load_state_dict(const StateDict& dict) try {
  DictReader read(dict, name_ + ".load_state_dict");
  const char* op = read.op().c_str();
  const std::int64_t steps = read.count("step");
  std::vector<double> base_lrs;
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) {
    const std::string key = group_key(g, base_lrs_.size(), "base_lr");
    base_lrs.push_back(read.scalar(key));
    FORGE_CHECK(base_lrs.back() >= 0 && std::isfinite(base_lrs.back()), invalid_argument, op, "key '", key, "' holds ",
                base_lrs.back(), ", not a learning rate");
  }
  const auto members = settings();
  std::vector<double> values, old;
  for (const auto& [name, member] : members) {
    values.push_back(read.scalar(name));
    old.push_back(*member);
  }
  read.finish(name_ + " schedules " + std::to_string(base_lrs_.size()) +
              (base_lrs_.size() == 1 ? " parameter group" : " parameter groups"));
  // Try the settings on; put the old ones back if check() refuses them.
  for (std::size_t k = 0; k < members.size(); ++k) *members[k].second = values[k];
  try {
    check(op);
  } catch (...) {
    for (std::size_t k = 0; k < members.size(); ++k) *members[k].second = old[k];
    throw;
  }
  base_lrs_ = std::move(base_lrs);
  steps_ = steps;
  apply();
}
FORGE_CATCH_OOM(name_.c_str())

// ---- StepLR ----

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(static_cast<double>(step_size)), gamma_(gamma) {
  start();
}

double StepLR::lr_at(double base, std::int64_t t) const noexcept {
  // From the base each time, so no rounding accumulates over many decays.
  return base * std::pow(gamma_, std::floor(static_cast<double>(t) / step_size_));
}

std::vector<std::pair<const char*, double*>> StepLR::settings() {
  return {{"step_size", &step_size_}, {"gamma", &gamma_}};
}

void StepLR::check(const char* op) const {
  FORGE_CHECK(is_count(step_size_, 1), invalid_argument, op, "step_size ", step_size_, " must be at least 1");
  FORGE_CHECK(gamma_ >= 0 && std::isfinite(gamma_), invalid_argument, op, "gamma ", gamma_,
              " must be finite and not negative");
}

// ---- ExponentialLR ----

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer, "ExponentialLR"), gamma_(gamma) {
  start();
}

double ExponentialLR::lr_at(double base, std::int64_t t) const noexcept {
  return base * std::pow(gamma_, static_cast<double>(t));
}

std::vector<std::pair<const char*, double*>> ExponentialLR::settings() { return {{"gamma", &gamma_}}; }

void ExponentialLR::check(const char* op) const {
  FORGE_CHECK(gamma_ >= 0 && std::isfinite(gamma_), invalid_argument, op, "gamma ", gamma_,
              " must be finite and not negative");
}

// ---- LinearLR ----

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, std::int64_t total_steps)
    : LRScheduler(optimizer, "LinearLR"),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_steps_(static_cast<double>(total_steps)) {
  start();
}

double LinearLR::lr_at(double base, std::int64_t t) const noexcept {
  const double done = std::min(static_cast<double>(t), total_steps_) / total_steps_;
  return base * (start_factor_ + (end_factor_ - start_factor_) * done);
}

std::vector<std::pair<const char*, double*>> LinearLR::settings() {
  return {{"start_factor", &start_factor_}, {"end_factor", &end_factor_}, {"total_steps", &total_steps_}};
}

void LinearLR::check(const char* op) const {
  // As torch: the start factor may not be 0 (a warm-up from 0 is CosineWithWarmup's).
  FORGE_CHECK(start_factor_ > 0 && start_factor_ <= 1, invalid_argument, op, "start_factor ", start_factor_,
              " must lie in (0, 1]");
  FORGE_CHECK(end_factor_ >= 0 && end_factor_ <= 1, invalid_argument, op, "end_factor ", end_factor_,
              " must lie in [0, 1]");
  FORGE_CHECK(is_count(total_steps_, 1), invalid_argument, op, "total_steps ", total_steps_, " must be at least 1");
}

// ---- CosineWithWarmup ----

CosineWithWarmup::CosineWithWarmup(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps,
                                   double min_lr)
    : LRScheduler(optimizer, "CosineWithWarmup"),
      warmup_steps_(static_cast<double>(warmup_steps)),
      total_steps_(static_cast<double>(total_steps)),
      min_lr_(min_lr) {
  start();
}

double CosineWithWarmup::lr_at(double base, std::int64_t step) const noexcept {
  const double t = static_cast<double>(step);
  if (t < warmup_steps_) return base * t / warmup_steps_;
  if (t >= total_steps_) return min_lr_;
  return cos_anneal(base, min_lr_, (t - warmup_steps_) / (total_steps_ - warmup_steps_));
}

std::vector<std::pair<const char*, double*>> CosineWithWarmup::settings() {
  return {{"warmup_steps", &warmup_steps_}, {"total_steps", &total_steps_}, {"min_lr", &min_lr_}};
}

void CosineWithWarmup::check(const char* op) const {
  FORGE_CHECK(is_count(warmup_steps_, 0), invalid_argument, op, "warmup_steps ", warmup_steps_,
              " must be a count (not negative)");
  FORGE_CHECK(is_count(total_steps_, 1) && total_steps_ >= warmup_steps_, invalid_argument, op, "total_steps ",
              total_steps_, " must be positive and at least warmup_steps ", warmup_steps_);
  for (std::size_t g = 0; g < base_lrs().size(); ++g)
    FORGE_CHECK(min_lr_ >= 0 && min_lr_ <= base_lrs()[g], invalid_argument, op, "min_lr ", min_lr_,
                " must lie in [0, the lr ", base_lrs()[g], " of parameter group ", g, "]");
}

// ---- OneCycleLR ----

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::int64_t total_steps, double pct_start, double div_factor,
                       double final_div_factor)
    : LRScheduler(optimizer, "OneCycleLR"),
      total_steps_(static_cast<double>(total_steps)),
      pct_start_(pct_start),
      div_factor_(div_factor),
      final_div_factor_(final_div_factor) {
  start();
}

double OneCycleLR::lr_at(double base, std::int64_t step) const noexcept {
  // torch's phase ends: the peak at step pct_start * total - 1, the floor at total - 1.
  const double initial = base / div_factor_, floor = initial / final_div_factor_;
  const double peak_step = pct_start_ * total_steps_ - 1, last_step = total_steps_ - 1;
  const double t = std::min(static_cast<double>(step), last_step);
  if (t <= peak_step) return cos_anneal(initial, base, peak_step > 0 ? t / peak_step : 1.0);
  return cos_anneal(base, floor, (t - peak_step) / (last_step - peak_step));
}

std::vector<std::pair<const char*, double*>> OneCycleLR::settings() {
  return {{"total_steps", &total_steps_},
          {"pct_start", &pct_start_},
          {"div_factor", &div_factor_},
          {"final_div_factor", &final_div_factor_}};
}

void OneCycleLR::check(const char* op) const {
  FORGE_CHECK(is_count(total_steps_, 2), invalid_argument, op, "total_steps ", total_steps_, " must be at least 2");
  FORGE_CHECK(pct_start_ > 0 && pct_start_ < 1, invalid_argument, op, "pct_start ", pct_start_, " must lie in (0, 1)");
  FORGE_CHECK(pct_start_ * total_steps_ - 1 < total_steps_ - 1, invalid_argument, op, "pct_start ", pct_start_,
              " leaves no steps to anneal over ", total_steps_, " steps");
  FORGE_CHECK(
      div_factor_ > 0 && std::isfinite(div_factor_) && final_div_factor_ > 0 && std::isfinite(final_div_factor_),
      invalid_argument, op, "div_factor ", div_factor_, " and final_div_factor ", final_div_factor_,
      " must be positive and finite");
}

}  // namespace forge::optim
