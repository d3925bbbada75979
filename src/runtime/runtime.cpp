#include "forge/runtime.h"

#include "backend/cpu/host_executor.h"
#include "backend/device_runtime.h"
#include "forge/error.h"

// Note [One driving thread]
// One thread drives an ExecContext at a time (DESIGN §5). Most of what a
// context owns is safe to share anyway: the pool takes releases from any
// thread, a tensor's refcount is atomic, a tape lives on its tensors. Two
// pieces are not, and a second thread using them at once would corrupt
// memory, so they check who is calling instead:
// - The exec-scope stack belongs to the thread that opened its outermost
//   scope (scope_owner_), until that scope closes. Opening a scope, or
//   running an op that allocates a pooled output (scope_reserve), on
//   another thread meanwhile is refused.
//   With no scope open the check is one atomic load; with one open, also a
//   compare with the calling thread's id. An exec scope closes on the thread
//   that opened it, or after that thread has stopped using the context
//   (closing cannot throw, so it does not check).
// - The RNG is leased per call (lease_generator): a compare-and-swap of its
//   holder's thread id, so two threads never step mt19937_64 at once.
// Both refusals are ErrorCode::contended naming the context and the two
// threads, as an arena serving another call is.

namespace forge {

Runtime::Runtime(const RuntimeOptions& options)
    : device_(options.device),
      threads_(options.threads),
      host_(cpu::host_runtime(options.threads, options.max_cached_bytes)),
      host_pool_(&host_->pool()),
      rng_(options.seed) {}

// Scopes still open hold buffers of this pool; they hold a reference to this
// runtime too, so by now there are none.
Runtime::~Runtime() = default;

void Runtime::parallel_for_impl(std::int64_t n, std::int64_t grain,
                                std::function<void(std::int64_t, std::int64_t)> fn) {
  host_->parallel_for(n, grain, fn);
}

BufferPool& Runtime::pool(Device device, const char* op) { return device_runtime(device, op).pool(); }

void Runtime::refuse_device(Device device, const char* op) const {
  FORGE_FAIL(device, op, "ExecContext ", static_cast<const void*>(this), " serves ", device_.str(),
             " and the host; it has no runtime for ", device.str());
}

void Runtime::scope_adopt(const Ref<Buffer>& buffer) noexcept {
  // scope_reserve() made room, so push_back cannot allocate here. A scope
  // another thread opened after this op's scope_reserve is not this op's.
  const std::thread::id owner = scope_owner_.load(std::memory_order_acquire);
  if (owner == std::thread::id() || owner != std::this_thread::get_id()) return;
  ++buffer->scope_refs_;
  scope_held_.push_back(buffer);
  if (scope_pending_ > 0) --scope_pending_;
}

void Runtime::scope_claim(const char* op) {
  const std::thread::id self = std::this_thread::get_id();
  std::thread::id owner{};
  if (!scope_owner_.compare_exchange_strong(owner, self, std::memory_order_acquire) && owner != self)
    refuse_other_thread(op, "its exec scopes are open on", owner);
}

void Runtime::scope_release_if_none_open() noexcept {
  if (!scope_frames_.empty()) return;
  scope_pending_ = 0;
  scope_owner_.store(std::thread::id(), std::memory_order_release);
}

Runtime::GeneratorLease Runtime::lease_generator(const char* op) {
  const std::thread::id self = std::this_thread::get_id();
  std::thread::id holder{};
  if (rng_holder_.compare_exchange_strong(holder, self, std::memory_order_acquire)) return {this, true};
  if (holder != self) refuse_other_thread(op, "its random generator is in use by", holder);
  return {this, false};
}

Runtime::GeneratorLease::~GeneratorLease() {
  if (outermost_) runtime_->rng_holder_.store(std::thread::id(), std::memory_order_release);
}

void Runtime::refuse_other_thread(const char* op, const char* what, std::thread::id holder) const {
  FORGE_FAIL(contended, op, "ExecContext ", static_cast<const void*>(this), " is driven by another thread: ", what,
             " thread ", holder, ", and thread ", std::this_thread::get_id(),
             " called; one thread drives a context at a time (use one ExecContext per thread)");
}

}  // namespace forge
