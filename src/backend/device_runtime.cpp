#include "backend/device_runtime.h"

#include "backend/backend.h"
#include "core/internal.h"

namespace forge::detail {

DeviceRuntime::DeviceRuntime(const backend::Backend& backend, int threads, std::unique_ptr<BlockSource> blocks,
                             std::unique_ptr<Executor> executor, std::size_t max_cached_bytes)
    : backend_(&backend),
      kernels_(backend.kernels),
      device_(blocks->device()),
      threads_(threads),
      pool_(internal, std::move(blocks), BufferPoolOptions{.max_cached_bytes = max_cached_bytes}),
      executor_(std::move(executor)) {}

DeviceRuntime::~DeviceRuntime() = default;

void DeviceRuntime::replace_kernels_for_testing(const backend::Kernels* table) noexcept {
  kernels_ = table != nullptr ? table : backend_->kernels;
}

}  // namespace forge::detail
