#pragma once
// Runtime: everything an ExecContext executes with. It owns one device
// runtime per device it serves (src/backend/device_runtime.h: the device's
// pool, executor and kernel table): the host's always, and the CUDA
// device's for a context made on one. Ops compute on the context's device
// (Note [A context computes on its device] in runtime.cpp). It owns the seeded RNG and
// the exec-scope stack. Every tensor holds a reference to its
// runtime, so the runtime outlives the last tensor that uses it.
//
// One thread drives a context at a time. The two pieces of per-context state
// that a second thread could corrupt (src/runtime/runtime_internal.h) check
// it (Note [One driving thread] in runtime.cpp): the exec-scope stack belongs
// to the thread that opened its outermost scope, and the RNG is leased to one
// thread per draw. Either one used from another thread meanwhile is
// ErrorCode::contended, naming the context and both threads.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "forge/buffer_pool.h"
#include "forge/device.h"
#include "forge/ref.h"

namespace forge {

namespace detail {
class DeviceRuntime;
class ScopeStack;
class Generator;
}  // namespace detail

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
  // The runtime of the context's device: where ops allocate and compute;
  // and its pool, reached inline (every op output comes from it).
  detail::DeviceRuntime& compute() noexcept { return *compute_; }
  BufferPool& compute_pool() noexcept { return *compute_pool_; }
  // The runtime of `device`: the pool its tensors come from, its executor
  // and its kernel table. ErrorCode::device (naming `op`) for a device this
  // context does not serve.
  detail::DeviceRuntime& device_runtime(Device device, const char* op = "device_runtime") {
    if (device.is_cpu()) [[likely]]
      return *host_;
    if (device == device_) return *compute_;
    refuse_device(device, op);
  }
  detail::DeviceRuntime& host() noexcept { return *host_; }
  // The same, or nullptr for a device this context does not serve.
  detail::DeviceRuntime* find_device_runtime(Device device) noexcept {
    if (device.is_cpu()) return host_.get();
    return device == device_ ? compute_ : nullptr;
  }
  // The pool of `device` (as device_runtime()).
  BufferPool& pool(Device device, const char* op = "pool");

  // Reseeds the context's RNG (contended while another thread draws from it).
  void manual_seed(std::uint64_t seed);

  // forge's own sources: the exec-scope stack and the RNG
  // (src/runtime/runtime_internal.h).
  detail::ScopeStack& scopes() noexcept { return *scopes_; }
  detail::Generator& generator() noexcept { return *generator_; }

 private:
  [[noreturn]] void refuse_device(Device device, const char* op) const;

  Device device_;
  int threads_;
  std::unique_ptr<detail::DeviceRuntime> host_;
  std::unique_ptr<detail::DeviceRuntime> accelerator_;  // a CUDA device's, or null
  BufferPool* host_pool_;                               // host_->pool(), reached inline
  detail::DeviceRuntime* compute_;                      // accelerator_, else host_
  BufferPool* compute_pool_;                            // compute_->pool()
  std::unique_ptr<detail::ScopeStack> scopes_;
  std::unique_ptr<detail::Generator> generator_;
};

}  // namespace forge
