// The host's Executor: a oneTBB task arena with the context's thread count.

#include "backend/cpu/host_executor.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <memory>

// Note [TSan and TBB]
// ThreadSanitizer sees synchronization only in instrumented code, and the
// system's libtbb is not instrumented: the hand-over of a parallel_for's
// chunks to TBB's workers and their join are invisible to it, so every
// kernel body would be reported as racing with the code around it. Under
// TSan, parallel_for states those edges (the documented fork and join of
// tbb::parallel_for) with TSan's annotations; races inside a body, or
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

namespace forge::cpu {
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

class HostExecutor final : public detail::Executor {
 public:
  explicit HostExecutor(int threads) : arena_(threads) {}

  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn) override {
    int fork = 0, join = 0;  // their addresses name this call's edges (Note [TSan and TBB])
    tsan_release(&fork);
    arena_.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain), [&](const tbb::blocked_range<std::int64_t>& r) {
        tsan_acquire(&fork);
        fn(r.begin(), r.end());
        tsan_release(&join);
      });
    });
    tsan_acquire(&join);
  }

 private:
  tbb::task_arena arena_;
};

}  // namespace

std::unique_ptr<detail::Executor> host_executor(int threads) { return std::make_unique<HostExecutor>(threads); }

}  // namespace forge::cpu
