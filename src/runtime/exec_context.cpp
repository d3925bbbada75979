#include "forge/exec_context.h"

#include <tbb/info.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "backend/device_runtime.h"
#include "forge/error.h"

namespace forge {
namespace {}  // namespace

namespace detail {

// Note [The current context]
// Each thread keeps a stack of the contexts it made (the only global of
// forge, DESIGN §5), as a list of refcounted slots: the list holds one
// reference, the context another. A context that dies clears its slot and,
// on its own thread, unlinks it; one that dies on another thread only clears
// it, and the owning thread drops the dead slot when it next looks. The list
// head is a plain pointer (trivially destructible), so a context with static
// storage may still unlink itself after the thread's other thread_locals died.
class ContextSlot : public RefCounted<ContextSlot> {
 public:
  explicit ContextSlot(ExecContext* ctx) noexcept : ctx(ctx), owner(std::this_thread::get_id()) {}
  void on_last_release() noexcept { delete this; }
  std::atomic<ExecContext*> ctx;
  const std::thread::id owner;
  ContextSlot* below = nullptr;
};

}  // namespace detail

namespace {

thread_local detail::ContextSlot* t_top = nullptr;

// Drops the list's references when a thread exits.
struct SlotDrain {
  ~SlotDrain() {
    while (detail::ContextSlot* s = t_top) {
      t_top = s->below;
      s->release_ref();
    }
  }
};
thread_local SlotDrain t_drain;

// A positive integer from the environment, with an optional K/M/G suffix
// (powers of 1024) when `allow_suffix`.
std::optional<std::uint64_t> env_number(const char* name, bool allow_suffix) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  std::string_view text(raw);
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view rest(end, static_cast<std::size_t>(text.data() + text.size() - end));
  if (allow_suffix && rest.size() == 1) {
    const int shift = rest[0] == 'K' || rest[0] == 'k'   ? 10
                      : rest[0] == 'M' || rest[0] == 'm' ? 20
                      : rest[0] == 'G' || rest[0] == 'g' ? 30
                                                         : -1;
    if (shift > 0 && value <= (UINT64_MAX >> shift)) {
      value <<= shift;
      rest = {};
    }
  }
  FORGE_CHECK(ec == std::errc() && rest.empty(), invalid_argument, "ExecContext", "environment variable ", name, "='",
              text, "' is not a ", allow_suffix ? "byte count" : "non-negative integer");
  return value;
}

RuntimeOptions resolve(const ExecContextOptions& o) {
  FORGE_CHECK(o.threads >= 0, invalid_argument, "ExecContext", "threads must be >= 0, got ", o.threads);
  detail::check_accelerator_available(o.device);
  RuntimeOptions r;
  r.device = o.device;
  r.threads = o.threads;
  if (r.threads == 0) {
    const auto env = env_number("FORGE_NUM_THREADS", false);
    FORGE_CHECK(!env || (*env >= 1 && *env <= 4096), invalid_argument, "ExecContext",
                "FORGE_NUM_THREADS must be in [1, 4096], got ", *env);
    r.threads = env ? static_cast<int>(*env) : std::max(1, tbb::info::default_concurrency());
  }
  r.seed = o.seed ? *o.seed : env_number("FORGE_SEED", false).value_or(ExecContext::kDefaultSeed);
  r.max_cached_bytes =
      o.max_cached_bytes
          ? *o.max_cached_bytes
          : static_cast<std::size_t>(
                env_number("FORGE_POOL_MAX_CACHED_BYTES", true).value_or(BufferPool::kDefaultMaxCachedBytes));
  return r;
}

}  // namespace

ExecContext::ExecContext() : ExecContext(ExecContextOptions{}) {}

ExecContext::ExecContext(const ExecContextOptions& options) try
    : runtime_(Ref<Runtime>::adopt(new Runtime(resolve(options)))), slot_(new detail::ContextSlot(this)) {
  (void)&t_drain;       // constructs this thread's drain
  slot_->retain_ref();  // the list's reference
  slot_->below = t_top;
  t_top = slot_;
}
FORGE_CATCH_OOM("ExecContext")

ExecContext::~ExecContext() {
  slot_->ctx.store(nullptr, std::memory_order_release);
  if (slot_->owner == std::this_thread::get_id()) {
    for (detail::ContextSlot** link = &t_top; *link != nullptr; link = &(*link)->below) {
      if (*link != slot_) continue;
      *link = slot_->below;
      slot_->release_ref();  // the list's reference
      break;
    }
  }
  slot_->release_ref();
  runtime_->pool().trim();
  const PoolStats s = runtime_->pool().stats();
  if (s.outstanding != 0) {
    // Tensors that outlive their context keep its runtime (and their pool's
    // core) alive until they are released; the pool's stats still count them.
#ifndef NDEBUG
    std::fprintf(stderr,
                 "[forge] ExecContext destroyed with %lld buffer(s) (%zu bytes) still outstanding; "
                 "they are freed when their last tensor is released\n",
                 static_cast<long long>(s.outstanding), s.live_bytes);
#endif
  }
}

ExecContext* ExecContext::current() noexcept {
  while (detail::ContextSlot* s = t_top) {
    if (ExecContext* ctx = s->ctx.load(std::memory_order_acquire)) return ctx;
    t_top = s->below;  // a context destroyed on another thread
    s->release_ref();
  }
  return nullptr;
}

ExecContext& ExecContext::current_or_throw(const char* op) {
  ExecContext* ctx = current();
  FORGE_CHECK(ctx != nullptr, invalid_argument, op, "no ExecContext is alive on this thread; create one first");
  return *ctx;
}

}  // namespace forge
