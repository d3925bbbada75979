#include "forge/runtime.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "runtime/threading.h"

namespace forge {

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
  threading_->arena().execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                      [&](const tbb::blocked_range<std::int64_t>& r) { fn(r.begin(), r.end()); });
  });
}

void Runtime::scope_adopt(const Ref<Buffer>& buffer) noexcept {
  // scope_reserve() made room, so push_back cannot allocate here.
  if (scope_frames_.empty()) return;
  ++buffer->scope_refs_;
  scope_held_.push_back(buffer);
}

}  // namespace forge
