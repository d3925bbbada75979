#pragma once
// Reverse-mode automatic differentiation (DESIGN §7, docs/AUTOGRAD.md).
//
// A tensor that requires grad makes every op it enters record a node on the
// tape; backward() runs the tape newest-first and accumulates into the
// .grad() of the leaves. Grad mode is per thread: NoGradGuard turns recording
// off for a region (evaluation, optimizer updates).

#include <functional>
#include <string>
#include <vector>

#include "forge/tensor.h"

namespace forge::autograd {

// Whether ops record on this thread (on by default).
class GradMode {
 public:
  static bool is_enabled() noexcept { return enabled_; }
  static void set_enabled(bool enabled) noexcept { enabled_ = enabled; }

 private:
  static inline thread_local bool enabled_ = true;  // constant-initialized: no TLS wrapper call
};

// Sets grad mode for its lifetime and restores the previous mode.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) noexcept : previous_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeGuard() { GradMode::set_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Records nothing on this thread while it lives.
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() noexcept : GradModeGuard(false) {}
};

// Backpropagates from `outputs` into the .grad() of the leaves that reach
// them. grad_outputs: one per output (undefined = ones, allowed only for
// outputs of one element). retain_graph keeps the saved values for another run.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false);

struct GradOptions {
  std::vector<Tensor> grad_outputs = {};  // as for backward()
  bool retain_graph = false;
  bool allow_unused = false;  // an input the outputs do not depend on gets an undefined tensor, not an error
};

// The gradients of `outputs` with respect to `inputs` (leaves or not),
// returned instead of accumulated: no .grad() changes.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const GradOptions& options = {});

struct GradcheckOptions {
  double eps = 1e-6;   // central difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  std::uint64_t seed = 0;  // for the random output weighting
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string message;  // the first mismatch: input, element, analytic vs numeric
  explicit operator bool() const noexcept { return ok; }
};

// Compares the analytic gradient of fn at `inputs` with central finite
// differences. The inputs that require grad must be f64 with elements that do
// not overlap; fn's output is weighted by a fixed random tensor w, so both
// sides compute the vector-Jacobian product w·J.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace forge::autograd
