#pragma once
// Mixed precision (docs/TRAINING.md "Mixed precision"), as torch.amp.
//
// AutocastGuard opens a region, per thread, in which matmul, linear, bmm,
// conv2d and scaled_dot_product_attention cast their f32 inputs to the
// region's dtype (bf16 or f16) and compute and return in it. The casts are
// recorded like any `to`, so f32 master weights get f32 gradients. Every
// other op is unchanged: it runs in the dtype it is given (a bf16 activation
// stays bf16 until something casts it). Outside a region the listed ops pay
// one thread-local branch.
//
// GradScaler is loss scaling for f16, whose small range loses gradients
// below ~6e-8: scale() multiplies the loss before backward, unscale_()
// divides an optimizer's gradients back and notes any inf/NaN, step() skips
// the update when there was one, update() lowers the scale after a skip and
// raises it after growth_interval clean steps. bf16 has f32's range and
// needs no scaler.

#include <cstdint>
#include <optional>
#include <vector>

#include "forge/dtype.h"
#include "forge/state_dict.h"
#include "forge/tensor.h"

namespace forge::optim {
class Optimizer;
}

namespace forge::amp {

// This thread's autocast state.
class Autocast {
 public:
  static bool is_enabled() noexcept { return enabled_; }
  static DType dtype() noexcept { return dtype_; }

 private:
  friend class AutocastGuard;
  static inline thread_local bool enabled_ = false;  // constant-initialized: no TLS wrapper call
  static inline thread_local DType dtype_ = DType::bf16;
};

// Turns autocast on (or, with enabled = false, off) for its lifetime on this
// thread and restores the previous state. dtype: bf16 or f16 (else dtype error).
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::bf16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

namespace detail {

inline bool is_f32(const Tensor& t) noexcept { return t.defined() && t.dtype() == DType::f32; }

// The check at the top of each listed op: autocast is on and an input is f32.
template <typename... Ts>
bool autocasts(const Ts&... inputs) noexcept {
  return Autocast::is_enabled() && (is_f32(inputs) || ...);
}

// t in the autocast dtype when it is f32 (a recorded cast), else t itself.
Tensor autocast(const Tensor& t);

}  // namespace detail

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, torch's
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // false: every call passes through (scale 1, no checks)
};

class GradScaler {
 public:
  // Refuses (invalid_argument) a scale <= 0, growth_factor <= 1, backoff_factor
  // outside (0, 1) or growth_interval < 1.
  explicit GradScaler(GradScalerOptions options = {});

  // loss times the current scale (recorded: backward gives scaled gradients).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of optimizer's parameters by the scale, in place,
  // and notes whether any is inf or NaN. Once per optimizer between updates
  // (a second call is ErrorCode::invalid_argument, as torch's).
  void unscale_(optim::Optimizer& optimizer);
  // unscale_() unless done, then optimizer.step() unless a gradient was inf
  // or NaN. Returns whether the step ran.
  bool step(optim::Optimizer& optimizer);
  // After the iteration's steps: backoff after a skipped step, growth after
  // growth_interval clean ones in a row; or set the scale to new_scale.
  void update(std::optional<double> new_scale = std::nullopt);

  double get_scale() const noexcept { return options_.enabled ? scale_ : 1.0; }
  bool is_enabled() const noexcept { return options_.enabled; }
  // How many clean steps in a row since the last change of scale.
  std::int64_t growth_tracker() const noexcept { return growth_tracker_; }

  // "scale", "growth_factor", "backoff_factor", "growth_interval",
  // "_growth_tracker" (torch's keys) as 0-d f64 tensors (growth_interval and
  // the tracker i64) on the current context (ExecContext::current()).
  StateDict state_dict() const;
  // Wants exactly those keys; changes nothing when it refuses a dict.
  void load_state_dict(const StateDict& dict);

 private:
  struct Unscaled {
    const optim::Optimizer* optimizer;
    bool found_inf;
  };
  const Unscaled* find(const optim::Optimizer& optimizer) const;

  GradScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
  std::vector<Unscaled> unscaled_;  // this iteration's unscale_ calls, cleared by update()
};

}  // namespace forge::amp
