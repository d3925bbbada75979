#include "forge/runtime.h"

#include "backend/cpu/host_executor.h"
#include "backend/device_runtime.h"
#include "core/internal.h"
#include "forge/error.h"
#include "runtime/runtime_internal.h"

// Note [One driving thread]
// One thread drives an ExecContext at a time (DESIGN §5). Most of what a
// context owns is safe to share anyway: the pool takes releases from any
// thread, a tensor's refcount is atomic, a tape lives on its tensors. Two
// pieces are not, and a second thread using them at once would corrupt
// memory, so they check who is calling instead:
// - The exec-scope stack belongs to the thread that opened its outermost
//   scope (ScopeStack::owner_), until that scope closes. Opening a scope, or
//   running an op that allocates a pooled output (ScopeStack::reserve), on
//   another thread meanwhile is refused.
//   With no scope open the check is one atomic load; with one open, also a
//   compare with the calling thread's id. An exec scope closes on the thread
//   that opened it, or after that thread has stopped using the context
//   (closing cannot throw, so it does not check).
// - The RNG is leased per call (Generator::lease): a compare-and-swap of its
//   holder's thread id, so two threads never step mt19937_64 at once.
// Both refusals are ErrorCode::contended naming the context and the two
// threads, as an arena serving another call is.

namespace forge {

// Note [A context computes on its device]
// A context made on a CUDA device serves that device and the host. Its ops
// allocate their outputs on, and run their kernels on, the context's device
// (Runtime::compute()); a host tensor of such a context (from cpu() or
// to(Device::cpu())) is for reading and moving: ops refuse it with
// ErrorCode::device (detail::check_input), naming the move that fixes it.
// So an op never mixes devices, and the device of every output is known
// before any kernel runs.

Runtime::Runtime(const RuntimeOptions& options)
    : device_(options.device),
      threads_(options.threads),
      host_(cpu::host_runtime(options.threads, options.max_cached_bytes)),
      accelerator_(options.device.is_cpu()
                       ? nullptr
                       : detail::make_accelerator_runtime(options.device, options.max_cached_bytes)),
      host_pool_(&host_->pool()),
      compute_(accelerator_ ? accelerator_.get() : host_.get()),
      compute_pool_(&compute_->pool()),
      scopes_(std::make_unique<detail::ScopeStack>(this)),
      generator_(std::make_unique<detail::Generator>(this, options.seed)) {}

// Scopes still open hold buffers of these pools; they hold a reference to
// this runtime too, so by now there are none.
Runtime::~Runtime() = default;

BufferPool& Runtime::pool(Device device, const char* op) { return device_runtime(device, op).pool(); }

void Runtime::manual_seed(std::uint64_t seed) { *generator_->lease("manual_seed") = std::mt19937_64(seed); }

void Runtime::refuse_device(Device device, const char* op) const {
  FORGE_FAIL(device, op, "ExecContext ", static_cast<const void*>(this), " serves ", device_.str(),
             " and the host; it has no runtime for ", device.str());
}

namespace detail {
namespace {

[[noreturn]] void refuse(const void* context, const char* op, const char* what, std::thread::id holder) {
  FORGE_FAIL(contended, op, "ExecContext ", context, " is driven by another thread: ", what, " thread ", holder,
             ", and thread ", std::this_thread::get_id(),
             " called; one thread drives a context at a time (use one ExecContext per thread)");
}

}  // namespace

void ScopeStack::adopt(const Ref<Buffer>& buffer) noexcept {
  // reserve() made room, so push_back cannot allocate here. A scope another
  // thread opened after this op's reserve() is not this op's.
  const std::thread::id owner = owner_.load(std::memory_order_acquire);
  if (owner == std::thread::id() || owner != std::this_thread::get_id()) return;
  if (pending_ > 0) --pending_;
  if (!holding_) return;  // a release or recompute scope holds nothing
  buffer->add_scope_hold(internal);
  held_.push_back(buffer);
}

void ScopeStack::claim(const char* op) {
  const std::thread::id self = std::this_thread::get_id();
  std::thread::id owner{};
  if (!owner_.compare_exchange_strong(owner, self, std::memory_order_acquire) && owner != self)
    refuse_other_thread(op, "its exec scopes are open on", owner);
}

void ScopeStack::release_if_none_open() noexcept {
  if (!frames_.empty()) return;
  pending_ = 0;
  owner_.store(std::thread::id(), std::memory_order_release);
}

void ScopeStack::refuse_other_thread(const char* op, const char* what, std::thread::id holder) const {
  refuse(context_, op, what, holder);
}

Generator::Lease Generator::lease(const char* op) {
  const std::thread::id self = std::this_thread::get_id();
  std::thread::id holder{};
  if (holder_.compare_exchange_strong(holder, self, std::memory_order_acquire)) return {this, true};
  if (holder != self) refuse(context_, op, "its random generator is in use by", holder);
  return {this, false};
}

}  // namespace detail
}  // namespace forge
