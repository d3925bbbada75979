// GradScaler (forge/amp.h), torch.amp.GradScaler's state machine:
// - unscale_ divides every gradient by the scale under no grad and checks it
//   for inf/NaN (sum(g * 0) is NaN exactly when g holds one, and cannot
//   overflow as sum(g) could);
// - step skips optimizer.step() when its optimizer's gradients held one;
// - update halves (backoff_factor) the scale after any skip and resets the
//   count of clean steps, or doubles (growth_factor) it after
//   growth_interval clean steps in a row, then forgets the iteration.

#include <cmath>
#include <string>

#include "forge/amp.h"
#include "forge/autograd.h"
#include "forge/exec_context.h"
#include "forge/ops.h"
#include "forge/optim/optimizer.h"

namespace forge::amp {
namespace {

void check_options(const GradScalerOptions& o, double scale) {
  const char* op = "GradScaler";
  FORGE_CHECK(scale > 0 && std::isfinite(scale), invalid_argument, op, "scale must be positive and finite, got ",
              scale);
  FORGE_CHECK(o.growth_factor > 1 && std::isfinite(o.growth_factor), invalid_argument, op,
              "growth_factor must be > 1, got ", o.growth_factor);
  FORGE_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, invalid_argument, op,
              "backoff_factor must be in (0, 1), got ", o.backoff_factor);
  FORGE_CHECK(o.growth_interval >= 1, invalid_argument, op, "growth_interval must be at least 1, got ",
              o.growth_interval);
}

bool finite(const Tensor& g) { return std::isfinite(mul(g, 0.0).sum().item<double>()); }

double scalar_of(const StateDict& dict, const std::string& key) {
  const char* op = "GradScaler.load_state_dict";
  const auto it = dict.find(key);
  FORGE_CHECK(it != dict.end() && it->second.defined(), invalid_argument, op, "missing key \"", key, "\"");
  FORGE_CHECK(it->second.numel() == 1, shape, op, "\"", key, "\" must hold one value, got shape ", it->second.shape());
  return it->second.item<double>();
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  check_options(options_, scale_);
}

Tensor GradScaler::scale(const Tensor& loss) const { return options_.enabled ? mul(loss, scale_) : loss; }

const GradScaler::Unscaled* GradScaler::find(const optim::Optimizer& optimizer) const {
  for (const Unscaled& u : unscaled_)
    if (u.optimizer == &optimizer) return &u;
  return nullptr;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  FORGE_CHECK(find(optimizer) == nullptr, invalid_argument, "GradScaler.unscale_",
              "unscale_() was already called on this optimizer (", optimizer.name(), ") since the last update()");
  autograd::NoGradGuard no_grad;
  bool found_inf = false;
  const double inverse = 1.0 / scale_;
  for (const Tensor& p : optimizer.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(inverse);
    found_inf = found_inf || !finite(g);
  }
  unscaled_.push_back({&optimizer, found_inf});
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (find(optimizer) == nullptr) unscale_(optimizer);
  if (find(optimizer)->found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (new_scale) {
    check_options(options_, *new_scale);
    scale_ = *new_scale;
    growth_tracker_ = 0;
  } else {
    bool skipped = false;
    for (const Unscaled& u : unscaled_) skipped = skipped || u.found_inf;
    if (skipped) {
      scale_ *= options_.backoff_factor;
      growth_tracker_ = 0;
    } else if (++growth_tracker_ == options_.growth_interval) {
      scale_ *= options_.growth_factor;
      growth_tracker_ = 0;
    }
  }
  unscaled_.clear();
}

StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", full({}, scale_, DType::f64)},
          {"growth_factor", full({}, options_.growth_factor, DType::f64)},
          {"backoff_factor", full({}, options_.backoff_factor, DType::f64)},
          {"growth_interval", full({}, options_.growth_interval, DType::i64)},
          {"_growth_tracker", full({}, growth_tracker_, DType::i64)}};
}

void GradScaler::load_state_dict(const StateDict& dict) {
  GradScalerOptions o = options_;
  const double scale = scalar_of(dict, "scale");
  o.growth_factor = scalar_of(dict, "growth_factor");
  o.backoff_factor = scalar_of(dict, "backoff_factor");
  o.growth_interval = static_cast<std::int64_t>(scalar_of(dict, "growth_interval"));
  const auto tracker = static_cast<std::int64_t>(scalar_of(dict, "_growth_tracker"));
  check_options(o, scale);
  FORGE_CHECK(tracker >= 0 && tracker < o.growth_interval, invalid_argument, "GradScaler.load_state_dict",
              "_growth_tracker ", tracker, " must be in [0, growth_interval ", o.growth_interval, ")");
  options_ = o;
  scale_ = scale;
  growth_tracker_ = tracker;
}

}  // namespace forge::amp
