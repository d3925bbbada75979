#pragma once
// Runtime: everything an ExecContext executes with. It owns one device
// runtime per device it serves (src/backend/device_runtime.h: the device's
// pool, executor and kernel table; the host's today), the seeded RNG and
// the exec-scope stack. Every tensor holds a reference to its
// runtime, so the runtime outlives the last tensor that uses it.
//
// One thread drives a context at a time. The two pieces of per-context state
// that a second thread could corrupt check it (Note [One driving thread] in
// runtime.cpp): the exec-scope stack belongs to the thread that opened its
// outermost scope, and the RNG is leased to one thread per draw. Either one
// used from another thread meanwhile is ErrorCode::contended, naming the
// context and both threads.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "forge/buffer.h"
#include "forge/buffer_pool.h"
#include "forge/device.h"
#include "forge/ref.h"

namespace forge {

namespace detail {
class DeviceRuntime;
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
  // The host's pool.
  BufferPool& pool() noexcept { return *host_pool_; }
  const BufferPool& pool() const noexcept { return *host_pool_; }
  // The runtime of `device`: the pool its tensors come from, its executor
  // and its kernel table. ErrorCode::device (naming `op`) for a device this
  // context does not serve.
  detail::DeviceRuntime& device_runtime(Device device, const char* op = "device_runtime") {
    if (device.is_cpu()) [[likely]]
      return *host_;
    refuse_device(device, op);
  }
  detail::DeviceRuntime& host() noexcept { return *host_; }
  // TRANSITION (backend seam): lets a call site not yet routed through the
  // kernel table hand a Runtime to a host kernel. Removed once every op,
  // rule and optimizer calls the table.
  operator detail::DeviceRuntime&() noexcept { return *host_; }  // NOLINT(google-explicit-constructor)
  // The pool of `device` (as device_runtime()).
  BufferPool& pool(Device device, const char* op = "pool");

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

  // The seeded RNG (FORGE_SEED, ExecContext::manual_seed), held by one thread
  // while the lease lives; `op` names the caller in a contended error. A
  // thread may lease it again while it holds it.
  class GeneratorLease {
   public:
    std::mt19937_64& operator*() const noexcept { return runtime_->rng_; }
    ~GeneratorLease();
    GeneratorLease(const GeneratorLease&) = delete;
    GeneratorLease& operator=(const GeneratorLease&) = delete;

   private:
    friend class Runtime;
    GeneratorLease(Runtime* runtime, bool outermost) noexcept : runtime_(runtime), outermost_(outermost) {}
    Runtime* runtime_;
    bool outermost_;
  };
  GeneratorLease lease_generator(const char* op);
  void manual_seed(std::uint64_t seed) { *lease_generator("manual_seed") = std::mt19937_64(seed); }

  // ---- exec scopes (see exec_scope.h) ----
  // Makes room for one more scope_adopt, so that no adopt can fail; call
  // before computing, once per output. Each call counts a pending adopt: an
  // op that allocates two outputs before adopting either (max along a dim),
  // or an op nested in another, still finds room for all of them. While a
  // scope is open, an op of another thread than the scopes' is refused here
  // (contended).
  void scope_reserve(const char* op) {
    const std::thread::id owner = scope_owner_.load(std::memory_order_acquire);
    if (owner == std::thread::id()) return;
    if (owner != std::this_thread::get_id()) [[unlikely]]
      refuse_other_thread(op, "its exec scopes are open on", owner);
    const std::size_t need = scope_held_.size() + scope_pending_ + 1;
    if (need > scope_held_.capacity()) scope_held_.reserve(std::max(need, scope_held_.capacity() * 2 + 16));
    ++scope_pending_;
  }
  void scope_adopt(const Ref<Buffer>& buffer) noexcept;

 private:
  friend class ExecScope;
  struct ScopeFrame {
    std::uint64_t id;
    std::size_t mark;          // index into scope_held_ where this scope begins
    std::size_t saved_window;  // the pool peak window of the enclosing scope
  };
  void parallel_for_impl(std::int64_t n, std::int64_t grain, std::function<void(std::int64_t, std::int64_t)> fn);
  // Makes the calling thread the scopes' owner (opening the outermost scope)
  // or checks that it is; releases ownership when the last scope closes.
  void scope_claim(const char* op);
  void scope_release_if_none_open() noexcept;
  [[noreturn]] void refuse_other_thread(const char* op, const char* what, std::thread::id holder) const;
  [[noreturn]] void refuse_device(Device device, const char* op) const;

  Device device_;
  int threads_;
  std::unique_ptr<detail::DeviceRuntime> host_;
  BufferPool* host_pool_;  // host_->pool(), reached inline
  std::mt19937_64 rng_;
  std::atomic<std::thread::id> rng_holder_{};   // the thread leasing rng_; id() when none
  std::atomic<std::thread::id> scope_owner_{};  // the thread whose scopes are open; id() when none
  std::vector<Ref<Buffer>> scope_held_;
  // Reservations not yet adopted. An allocation that is never adopted (a
  // temporary) leaves one counted until the last scope closes: it costs a
  // spare slot, never a missing one.
  std::size_t scope_pending_ = 0;
  std::vector<ScopeFrame> scope_frames_;
  std::uint64_t next_scope_id_ = 1;
};

}  // namespace forge
