#pragma once
// Reverse-mode automatic differentiation (DESIGN §7, docs/AUTOGRAD.md).
//
// A tensor that requires grad makes every op it enters record a node on the
// tape; backward() runs the tape newest-first and accumulates into the
// .grad() of the leaves. Grad mode is per thread: NoGradGuard turns recording
// off for a region (evaluation, optimizer updates).

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "forge/tensor.h"

namespace forge {
namespace detail {
struct HookEntry;  // src/autograd/hooks.h
}

namespace autograd {

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

// The handle of a hook registered on a tensor (Tensor::register_hook,
// register_post_accumulate_grad_hook), as libtorch's RemovableHandle:
// remove() unregisters it (a second call does nothing); dropping the handle
// leaves the hook registered. active(): registered, and its tensor alive.
class HookHandle {
 public:
  HookHandle() noexcept = default;
  explicit HookHandle(detail::HookEntry* entry) noexcept : entry_(entry) {}  // takes over a reference
  HookHandle(HookHandle&& other) noexcept : entry_(std::exchange(other.entry_, nullptr)) {}
  HookHandle& operator=(HookHandle&& other) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  ~HookHandle();

  void remove() noexcept;
  bool active() const noexcept;

 private:
  detail::HookEntry* entry_ = nullptr;
};

// Anomaly mode (docs/AUTOGRAD.md "Anomaly mode"), per thread like grad mode:
// while on, backward checks every gradient a node's VJP produces and throws
// ErrorCode::backward naming the op and its node when one holds NaN or Inf.
class AnomalyMode {
 public:
  static bool is_enabled() noexcept { return enabled_; }
  static void set_enabled(bool enabled) noexcept { enabled_ = enabled; }

 private:
  static inline thread_local bool enabled_ = false;
};

// Turns anomaly mode on for its lifetime and restores the previous mode.
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() noexcept : previous_(AnomalyMode::is_enabled()) { AnomalyMode::set_enabled(true); }
  ~DetectAnomalyGuard() { AnomalyMode::set_enabled(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// Backpropagates from `outputs` into the .grad() of the leaves that reach
// them. grad_outputs: one per output (undefined = ones, allowed only for
// outputs of one element). retain_graph keeps the saved values for another
// run. create_graph records the backward pass itself, so the gradients can
// be differentiated again (it implies retain_graph); a rule that cannot
// record its backward is ErrorCode::not_implemented naming its op.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

// Runs `callback` on this thread once the backward pass running now has
// committed its gradients (libtorch's queue_callback): a post-accumulate hook
// queues one to act on all of a pass's .grad at once (dist::DataParallel
// waits for its reductions there). Callbacks run in the order queued, and may
// queue more; a pass that fails drops them; one that throws ends the pass's
// backward() with its error, the gradients already in place. Outside a
// backward pass: ErrorCode::backward.
void queue_callback(std::function<void()> callback);
// The backward pass running on this thread (a number no other pass of the
// process has), or 0 outside one.
std::uint64_t current_pass() noexcept;

struct GradOptions {
  std::vector<Tensor> grad_outputs = {};  // as for backward()
  bool retain_graph = false;
  bool allow_unused = false;  // an input the outputs do not depend on gets an undefined tensor, not an error
  bool create_graph = false;  // as for backward(): the returned gradients have a history
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

// Checks the second derivatives of fn (the derivatives of its backward pass):
// gradcheck of g(inputs, u) = <u', grad(<fn(inputs), u>, inputs, create_graph)>
// with fixed random u and u', which takes the gradient of fn's backward with
// respect to both the inputs and the output gradient u. Same input rules as
// gradcheck; the default tolerances are looser (two nested differences).
GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                              const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {.atol = 1e-4, .rtol = 1e-3});

}  // namespace autograd
}  // namespace forge
