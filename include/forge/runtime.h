#pragma once
// Runtime: everything an ExecContext executes with. It owns the host
// BufferPool, the oneTBB task arena with the context's thread count, the
// seeded RNG and the exec-scope stack. Every tensor holds a reference to its
// runtime, so the runtime outlives the last tensor that uses it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "forge/buffer.h"
#include "forge/buffer_pool.h"
#include "forge/device.h"
#include "forge/ref.h"

namespace forge {

namespace detail {
class Threading;
}

struct RuntimeOptions {
  Device device = Device::cpu();
  int threads = 1;
  std::uint64_t seed = 0;
  std::size_t max_cached_bytes = BufferPool::kDefaultMaxCachedBytes;
};

class Runtime : public RefCounted<Runtime> {
 public:
  explicit Runtime(const RuntimeOptions& options);
  ~Runtime();
  void on_last_release() noexcept { delete this; }

  Device device() const noexcept { return device_; }
  int threads() const noexcept { return threads_; }
  BufferPool& pool() noexcept { return pool_; }
  const BufferPool& pool() const noexcept { return pool_; }

  // Runs fn(begin, end) over [0, n) in the context's task arena; inline (one
  // call, no task) when n <= grain or the context has one thread.
  template <typename Fn>
  void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
    if (n <= grain || threads_ == 1) {
      if (n > 0) fn(std::int64_t{0}, n);
      return;
    }
    parallel_for_impl(n, grain, std::function<void(std::int64_t, std::int64_t)>(std::ref(fn)));
  }

  // Seeded RNG (FORGE_SEED, ExecContext::manual_seed).
  std::mt19937_64& generator() noexcept { return rng_; }
  void manual_seed(std::uint64_t seed) noexcept { rng_.seed(seed); }

  // ---- exec scopes (see exec_scope.h) ----
  // Makes room so that the next scope_adopt cannot fail; call before computing.
  void scope_reserve() {
    if (!scope_frames_.empty() && scope_held_.size() == scope_held_.capacity())
      scope_held_.reserve(scope_held_.size() * 2 + 16);
  }
  void scope_adopt(const Ref<Buffer>& buffer) noexcept;

 private:
  friend class ExecScope;
  struct ScopeFrame {
    std::uint64_t id;
    std::size_t mark;          // index into scope_held_ where this scope begins
    std::size_t saved_window;  // the pool peak window of the enclosing scope
  };
  void parallel_for_impl(std::int64_t n, std::int64_t grain,
                         std::function<void(std::int64_t, std::int64_t)> fn);

  Device device_;
  int threads_;
  BufferPool pool_;
  std::unique_ptr<detail::Threading> threading_;
  std::mt19937_64 rng_;
  std::vector<Ref<Buffer>> scope_held_;
  std::vector<ScopeFrame> scope_frames_;
  std::uint64_t next_scope_id_ = 1;
};

}  // namespace forge
