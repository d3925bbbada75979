#include "forge/exec_context.h"

#include <tbb/info.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "forge/error.h"

namespace forge {
namespace {

// The stack of live contexts on this thread (the only global: DESIGN §5).
thread_local std::vector<ExecContext*> t_contexts;

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
    const int shift = rest[0] == 'K' || rest[0] == 'k' ? 10 : rest[0] == 'M' || rest[0] == 'm' ? 20
                      : rest[0] == 'G' || rest[0] == 'g' ? 30 : -1;
    if (shift > 0 && value <= (UINT64_MAX >> shift)) {
      value <<= shift;
      rest = {};
    }
  }
  FORGE_CHECK(ec == std::errc() && rest.empty(), invalid_argument, "ExecContext", "environment variable ", name,
              "='", text, "' is not a ", allow_suffix ? "byte count" : "non-negative integer");
  return value;
}

RuntimeOptions resolve(const ExecContextOptions& o) {
  FORGE_CHECK(o.threads >= 0, invalid_argument, "ExecContext", "threads must be >= 0, got ", o.threads);
  detail::check_device_available(o.device);
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
  r.max_cached_bytes = o.max_cached_bytes ? *o.max_cached_bytes
                                          : static_cast<std::size_t>(env_number("FORGE_POOL_MAX_CACHED_BYTES", true)
                                                                         .value_or(BufferPool::kDefaultMaxCachedBytes));
  return r;
}

}  // namespace

ExecContext::ExecContext() : ExecContext(ExecContextOptions{}) {}

ExecContext::ExecContext(const ExecContextOptions& options)
    : runtime_(Ref<Runtime>::adopt(new Runtime(resolve(options)))) {
  t_contexts.push_back(this);
}

ExecContext::~ExecContext() {
  auto it = std::find(t_contexts.rbegin(), t_contexts.rend(), this);
  if (it != t_contexts.rend()) t_contexts.erase(std::next(it).base());
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

ExecContext* ExecContext::current() noexcept { return t_contexts.empty() ? nullptr : t_contexts.back(); }

ExecContext& ExecContext::current_or_throw(const char* op) {
  ExecContext* ctx = current();
  FORGE_CHECK(ctx != nullptr, invalid_argument, op, "no ExecContext is alive on this thread; create one first");
  return *ctx;
}

}  // namespace forge
