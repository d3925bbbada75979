#pragma once
// DeviceRuntime: what one device of a Runtime computes with. A Runtime owns
// one per device it serves (the host today); each has
//   - a BufferPool over the device's BlockSource (the pool policy is one
//     implementation for every device, src/memory/buffer_pool.cpp),
//   - an Executor, where its kernels run (the host: a oneTBB task arena with
//     the context's thread count; a CUDA device: a stream),
//   - the Backend whose kernel table its ops call (backend/backend.h).
// Kernels receive the DeviceRuntime of their output's device: they take
// scratch from its pool and split work with its parallel_for.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "forge/buffer_pool.h"
#include "forge/device.h"
#include "memory/block_source.h"
#include "memory/stream_driver.h"

namespace forge::backend {
struct Backend;
struct Kernels;
}  // namespace forge::backend

namespace forge::detail {

// Runs a device's parallel work. Called only above the grain (DeviceRuntime
// runs small work inline), so one virtual call per parallel kernel is free.
class Executor {
 public:
  virtual ~Executor() = default;
  // Runs fn(begin, end) over chunks of [0, n) of at least `grain` elements
  // (the last may be shorter), and returns when all have run.
  virtual void parallel_for(std::int64_t n, std::int64_t grain,
                            const std::function<void(std::int64_t, std::int64_t)>& fn) = 0;
};

class DeviceRuntime {
 public:
  DeviceRuntime(const backend::Backend& backend, int threads, std::unique_ptr<BlockSource> blocks,
                std::unique_ptr<Executor> executor, std::size_t max_cached_bytes);
  virtual ~DeviceRuntime();
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;

  Device device() const noexcept { return device_; }
  int threads() const noexcept { return threads_; }
  BufferPool& pool() noexcept { return pool_; }
  const BufferPool& pool() const noexcept { return pool_; }
  const backend::Backend& backend() const noexcept { return *backend_; }
  const backend::Kernels& kernels() const noexcept { return *kernels_; }
  // The device's streams and events (the driver behind its pool), or
  // nullptr for the host, whose work is never queued.
  StreamDriver* streams() const noexcept { return streams_; }
  // A buffer of at least `bytes` outside the pool, straight from the device's
  // block source and given back to it when released (owned memory).
  Ref<Buffer> allocate_owned(std::size_t bytes, const char* op);
  // A new stream of this device, destroyed with this runtime.
  StreamId new_stream(const char* op);
  // Test hook (tests/backend_ops_test.cpp plants a wrong kernel): ops of this
  // device call `table` from now on; nullptr restores the backend's own.
  void replace_kernels_for_testing(const backend::Kernels* table) noexcept;

  // ---- transfers (the host's: memcpy; a device's: its stream) ----
  // Copies `bytes` of host memory at `src` to this device's `dst`, in the
  // device's stream order. The caller may reuse `src` once it returns (a
  // device stages it, Note [Staged uploads] in cuda_runtime.cpp).
  virtual void upload(std::byte* dst, const std::byte* src, std::size_t bytes);
  // Copies `bytes` at this device's `src` to host memory `dst`. With
  // `non_blocking` it may return once queued: the caller synchronizes
  // before reading dst (and dst should be pinned_pool() memory).
  virtual void download(std::byte* dst, const std::byte* src, std::size_t bytes, bool non_blocking);
  // Waits for the work queued on the device's current stream.
  virtual void synchronize() {}
  // Host memory the device copies to and from asynchronously (page-locked),
  // or nullptr (the host).
  virtual BufferPool* pinned_pool() noexcept { return nullptr; }
  // Keeps `buffer` from being released until the work queued on the current
  // stream so far has completed (a non-blocking download's destination).
  virtual void keep_until_done(Ref<Buffer>) {}

  // Runs fn(begin, end) over [0, n): inline (one call, no task) when
  // n <= grain or the device runs one thread, else on the executor.
  template <typename Fn>
  void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
    if (n <= grain || threads_ == 1) {
      if (n > 0) fn(std::int64_t{0}, n);
      return;
    }
    executor_->parallel_for(n, grain, std::function<void(std::int64_t, std::int64_t)>(std::ref(fn)));
  }

 private:
  const backend::Backend* backend_;
  const backend::Kernels* kernels_;
  Device device_;
  int threads_;
  StreamDriver* streams_;
  BufferPool pool_;
  std::unique_ptr<Executor> executor_;
  std::vector<StreamId> own_streams_;
};

// How a context gets the runtime of a device other than the host: the CUDA
// backend's (backend/cuda/cuda_backend.h), or a test's.
using DeviceRuntimeFactory = std::unique_ptr<DeviceRuntime> (*)(Device device, std::size_t max_cached_bytes);
// Test hook: contexts made on a CUDA device get their device runtime from
// `factory` (tests run the device paths on any machine over an emulated
// device, memory/emulated_device.h); nullptr restores the CUDA backend's.
void set_accelerator_factory_for_testing(DeviceRuntimeFactory factory) noexcept;
// Throws ErrorCode::device unless a context can be made on `device`.
void check_accelerator_available(Device device);
// The runtime of `device` (not the host) for one context.
std::unique_ptr<DeviceRuntime> make_accelerator_runtime(Device device, std::size_t max_cached_bytes);

}  // namespace forge::detail
