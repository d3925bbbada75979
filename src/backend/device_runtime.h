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

#include "forge/buffer_pool.h"
#include "forge/device.h"
#include "memory/block_source.h"

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
  // Test hook (tests/backend_ops_test.cpp plants a wrong kernel): ops of this
  // device call `table` from now on; nullptr restores the backend's own.
  void replace_kernels_for_testing(const backend::Kernels* table) noexcept;

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
  BufferPool pool_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace forge::detail
