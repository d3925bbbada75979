#include "forge/exec_scope.h"

#include <algorithm>
#include <new>

#include "forge/error.h"
#include "forge/runtime.h"

namespace forge {

ExecScope::ExecScope(Runtime& runtime) : runtime_(Ref<Runtime>::share(&runtime)) {
  runtime.scope_claim("open_exec_scope");  // Note [One driving thread]
  try {
    runtime.scope_frames_.reserve(runtime.scope_frames_.size() + 1);
    runtime.scope_held_.reserve(std::max<std::size_t>(runtime.scope_held_.capacity(), 64));
  } catch (const std::bad_alloc&) {
    runtime.scope_release_if_none_open();
    FORGE_FAIL(out_of_memory, "open_exec_scope", "no memory for the scope's bookkeeping");
  }
  id_ = runtime.next_scope_id_++;
  const std::size_t saved = runtime.pool().open_peak_window();
  runtime.scope_frames_.push_back({id_, runtime.scope_held_.size(), saved});
}

ExecScope::ExecScope(ExecScope&& other) noexcept
    : runtime_(std::move(other.runtime_)), id_(std::exchange(other.id_, 0)), closed_stats_(other.closed_stats_) {}

ExecScope::~ExecScope() { close(); }

bool ExecScope::is_open() const noexcept {
  if (!runtime_ || id_ == 0) return false;
  const auto& frames = runtime_->scope_frames_;
  return std::any_of(frames.begin(), frames.end(), [&](const auto& f) { return f.id == id_; });
}

ExecScopeStats ExecScope::stats() const noexcept {
  if (!is_open()) return closed_stats_;
  Runtime& rt = *runtime_;
  auto frame =
      std::find_if(rt.scope_frames_.begin(), rt.scope_frames_.end(), [&](const auto& f) { return f.id == id_; });
  ExecScopeStats s;
  for (std::size_t i = frame->mark; i < rt.scope_held_.size(); ++i) {
    ++s.buffers;
    s.bytes += rt.scope_held_[i]->capacity_bytes();
  }
  // Scopes opened inside this one saved this scope's window (and each other's)
  // when they opened; the pool's current window is the innermost one's.
  s.peak_live_bytes = rt.pool().peak_window();
  for (auto inner = std::next(frame); inner != rt.scope_frames_.end(); ++inner)
    s.peak_live_bytes = std::max(s.peak_live_bytes, inner->saved_window);
  return s;
}

void ExecScope::close() noexcept {
  if (!runtime_ || id_ == 0) return;
  Runtime& rt = *runtime_;
  auto& frames = rt.scope_frames_;
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
    s.buffers = rt.scope_held_.size() - mark;
    for (std::size_t i = mark; i < rt.scope_held_.size(); ++i) s.bytes += rt.scope_held_[i]->capacity_bytes();
    s.peak_live_bytes = window;
    closed_stats_ = s;
    frames.erase(frame, frames.end());
    while (rt.scope_held_.size() > mark) {  // newest first
      --rt.scope_held_.back()->scope_refs_;
      rt.scope_held_.pop_back();
    }
    rt.scope_release_if_none_open();
  }
  id_ = 0;
  runtime_.reset();
}

}  // namespace forge
