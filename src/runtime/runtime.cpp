#include "forge/runtime.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "runtime/threading.h"

// Note [TSan and TBB]
// ThreadSanitizer sees synchronization only in instrumented code, and the
// system's libtbb is not instrumented: the hand-over of a parallel_for's
// chunks to TBB's workers and their join are invisible to it, so every
// kernel body would be reported as racing with the code around it. Under
// TSan, parallel_for_impl states those edges (the documented fork and join
// of tbb::parallel_for) with TSan's annotations; races inside a body, or
// between bodies, are still reported. What remains inside TBB's inline
// headers is suppressed by tests/tsan.supp.
#if defined(__SANITIZE_THREAD__)
#define FORGE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FORGE_TSAN 1
#endif
#endif

#ifdef FORGE_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace forge {
namespace {

// The fork (release before, acquire in each chunk) and join (release after
// each chunk, acquire after the loop) of one parallel_for; no-ops without TSan.
inline void tsan_release([[maybe_unused]] void* edge) noexcept {
#ifdef FORGE_TSAN
  __tsan_release(edge);
#endif
}
inline void tsan_acquire([[maybe_unused]] void* edge) noexcept {
#ifdef FORGE_TSAN
  __tsan_acquire(edge);
#endif
}

}  // namespace

Runtime::Runtime(const RuntimeOptions& options)
    : device_(options.device),
      threads_(options.threads),
      pool_(BufferPoolOptions{Device::cpu(), options.max_cached_bytes}),
      threading_(std::make_unique<detail::Threading>(options.threads)),
      rng_(options.seed) {}

// Scopes still open hold buffers of this pool; they hold a reference to this
// runtime too, so by now there are none.
Runtime::~Runtime() = default;

void Runtime::parallel_for_impl(std::int64_t n, std::int64_t grain,
                                std::function<void(std::int64_t, std::int64_t)> fn) {
  int fork = 0, join = 0;  // their addresses name this call's edges (Note [TSan and TBB])
  tsan_release(&fork);
  threading_->arena().execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain), [&](const tbb::blocked_range<std::int64_t>& r) {
      tsan_acquire(&fork);
      fn(r.begin(), r.end());
      tsan_release(&join);
    });
  });
  tsan_acquire(&join);
}

void Runtime::scope_adopt(const Ref<Buffer>& buffer) noexcept {
  // scope_reserve() made room, so push_back cannot allocate here.
  if (scope_frames_.empty()) return;
  ++buffer->scope_refs_;
  scope_held_.push_back(buffer);
}

}  // namespace forge
