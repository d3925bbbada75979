#include "forge/exec_scope.h"

#include <algorithm>
#include <new>

#include "core/internal.h"
#include "forge/error.h"
#include "forge/runtime.h"
#include "runtime/runtime_internal.h"

namespace forge {

ExecScope::ExecScope(Runtime& runtime) : runtime_(Ref<Runtime>::share(&runtime)) {
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
  const std::size_t saved = runtime.pool().open_peak_window();
  scopes.frames().push_back({id_, scopes.held().size(), saved});
}

ExecScope::ExecScope(ExecScope&& other) noexcept
    : runtime_(std::move(other.runtime_)), id_(std::exchange(other.id_, 0)), closed_stats_(other.closed_stats_) {}

ExecScope::~ExecScope() { close(); }

bool ExecScope::is_open() const noexcept {
  if (!runtime_ || id_ == 0) return false;
  const auto& frames = runtime_->scopes().frames();
  return std::any_of(frames.begin(), frames.end(), [&](const auto& f) { return f.id == id_; });
}

ExecScopeStats ExecScope::stats() const noexcept {
  if (!is_open()) return closed_stats_;
  Runtime& rt = *runtime_;
  auto& frames = rt.scopes().frames();
  const auto& held = rt.scopes().held();
  auto frame = std::find_if(frames.begin(), frames.end(), [&](const auto& f) { return f.id == id_; });
  ExecScopeStats s;
  for (std::size_t i = frame->mark; i < held.size(); ++i) {
    ++s.buffers;
    s.bytes += held[i]->capacity_bytes();
  }
  // Scopes opened inside this one saved this scope's window (and each other's)
  // when they opened; the pool's current window is the innermost one's.
  s.peak_live_bytes = rt.pool().peak_window();
  for (auto inner = std::next(frame); inner != frames.end(); ++inner)
    s.peak_live_bytes = std::max(s.peak_live_bytes, inner->saved_window);
  return s;
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
      window = rt.pool().close_peak_window(inner->saved_window);
    }
    ExecScopeStats s;
    s.buffers = held.size() - mark;
    for (std::size_t i = mark; i < held.size(); ++i) s.bytes += held[i]->capacity_bytes();
    s.peak_live_bytes = window;
    closed_stats_ = s;
    frames.erase(frame, frames.end());
    while (held.size() > mark) {  // newest first
      held.back()->drop_scope_hold(detail::internal);
      held.pop_back();
    }
    rt.scopes().release_if_none_open();
  }
  id_ = 0;
  runtime_.reset();
}

}  // namespace forge
