#include "forge/exec_scope.h"

#include <algorithm>
#include <new>

#include "autograd/checkpoint.h"
#include "core/internal.h"
#include "forge/error.h"
#include "forge/runtime.h"
#include "runtime/runtime_internal.h"

// Note [Checkpoint stats]
// A scope's figures are read off the pool its context computes on (the
// device pool of a CUDA context): the peak live bytes of the window the
// scope opened, and the pool's acquire and system-allocation counters at
// open, subtracted from now. A recompute scope also counts, in its frame,
// the checkpoints run() recorded (and their inputs' bytes) and the
// recomputes backward ran for them while the scope was still open: the
// one-scope-per-step loop runs backward inside the scope, so its stats say
// what the step's recomputes cost. A recompute that runs after its scope
// closed counts nowhere.

namespace forge {

const char* to_string(ScopePolicy policy) noexcept {
  switch (policy) {
    case ScopePolicy::hold:
      return "hold";
    case ScopePolicy::release:
      return "release";
    case ScopePolicy::recompute:
      return "recompute";
    case ScopePolicy::offload:
      return "offload";
  }
  return "?";
}

namespace {

// Offload moves what the tape saves from device memory to pinned host
// memory and back when backward needs it. Not built: say so instead of
// silently holding everything.
void refuse_offload(const Runtime& runtime) {
  if (runtime.device().is_cpu())
    FORGE_FAIL(device, "open_exec_scope",
               "ScopePolicy::offload moves saved tensors from a device to host memory; this context computes on "
               "the host (cpu), where they already are: use ScopePolicy::recompute to save memory, or release");
  FORGE_FAIL(not_implemented, "open_exec_scope", "ScopePolicy::offload is not built yet for ", runtime.device().str(),
             ": use ScopePolicy::recompute to save memory, or release");
}

ExecScopeStats stats_of(Runtime& rt, const detail::ScopeStack::Frame& frame, std::size_t peak) {
  const auto& held = rt.scopes().held();
  ExecScopeStats s;
  s.policy = frame.policy;
  for (std::size_t i = frame.mark; i < held.size(); ++i) {
    ++s.buffers;
    s.bytes += held[i]->capacity_bytes();
  }
  s.peak_live_bytes = peak;
  const PoolStats pool = rt.compute_pool().stats();
  s.allocations = pool.acquires - frame.acquires_at_open;
  s.system_allocations = pool.system_allocations - frame.system_allocations_at_open;
  s.checkpoints = frame.checkpoints;
  s.checkpoint_bytes = frame.checkpoint_bytes;
  s.recomputes = frame.recomputes;
  s.recompute_seconds = static_cast<double>(frame.recompute_ns) * 1e-9;
  return s;
}

}  // namespace

ExecScope::ExecScope(Runtime& runtime, ScopePolicy policy) : runtime_(Ref<Runtime>::share(&runtime)), policy_(policy) {
  if (policy == ScopePolicy::offload) refuse_offload(runtime);
  detail::ScopeStack& scopes = runtime.scopes();
  scopes.claim("open_exec_scope");  // Note [One driving thread]
  try {
    scopes.frames().reserve(scopes.frames().size() + 1);
    scopes.held().reserve(std::max<std::size_t>(scopes.held().capacity(), 64));
  } catch (const std::bad_alloc&) {
    scopes.release_if_none_open();
    FORGE_FAIL(out_of_memory, "open_exec_scope", "no memory for the scope's bookkeeping");
  }
  id_ = scopes.next_id();
  BufferPool& pool = runtime.compute_pool();
  const PoolStats at_open = pool.stats();
  const std::size_t saved = pool.open_peak_window();
  scopes.frames().push_back({id_, scopes.held().size(), saved, policy, at_open.acquires, at_open.system_allocations});
  scopes.refresh();
}

ExecScope::ExecScope(ExecScope&& other) noexcept
    : runtime_(std::move(other.runtime_)),
      id_(std::exchange(other.id_, 0)),
      policy_(other.policy_),
      closed_stats_(other.closed_stats_) {}

ExecScope::~ExecScope() { close(); }

bool ExecScope::is_open() const noexcept { return runtime_ && id_ != 0 && runtime_->scopes().find(id_) != nullptr; }

ExecScopeStats ExecScope::stats() const noexcept {
  if (!is_open()) return closed_stats_;
  Runtime& rt = *runtime_;
  auto& frames = rt.scopes().frames();
  auto frame = std::find_if(frames.begin(), frames.end(), [&](const auto& f) { return f.id == id_; });
  // Scopes opened inside this one saved this scope's window (and each other's)
  // when they opened; the pool's current window is the innermost one's.
  std::size_t peak = rt.compute_pool().peak_window();
  for (auto inner = std::next(frame); inner != frames.end(); ++inner) peak = std::max(peak, inner->saved_window);
  return stats_of(rt, *frame, peak);
}

void ExecScope::close() noexcept {
  if (!runtime_ || id_ == 0) return;
  Runtime& rt = *runtime_;
  auto& frames = rt.scopes().frames();
  auto& held = rt.scopes().held();
  auto frame = std::find_if(frames.begin(), frames.end(), [&](const auto& f) { return f.id == id_; });
  if (frame != frames.end()) {
    // Closing a scope also closes every scope opened inside it.
    const std::size_t mark = frame->mark;
    std::size_t window = 0;
    for (auto inner = frames.end(); inner != frame;) {
      --inner;
      window = rt.compute_pool().close_peak_window(inner->saved_window);
    }
    closed_stats_ = stats_of(rt, *frame, window);
    frames.erase(frame, frames.end());
    rt.scopes().refresh();
    while (held.size() > mark) {  // newest first
      held.back()->drop_scope_hold(detail::internal);
      held.pop_back();
    }
    rt.scopes().release_if_none_open();
  }
  id_ = 0;
  runtime_.reset();
}

Tensor ExecScope::run(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                      const std::vector<Tensor>& inputs) try {
  FORGE_CHECK(is_open(), invalid_argument, "ExecScope::run", "the ", to_string(policy_),
              " scope is closed; run it while the scope is open");
  if (policy_ != ScopePolicy::recompute) return fn(inputs);
  return autograd::checkpoint_in_scope(fn, inputs, id_);
}
FORGE_CATCH_OOM("ExecScope::run")

}  // namespace forge
