#include "backend/device_runtime.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/internal.h"
#include "forge/error.h"

namespace forge::detail {

DeviceRuntime::DeviceRuntime(const backend::Backend& backend, int threads, std::unique_ptr<BlockSource> blocks,
                             std::unique_ptr<Executor> executor, std::size_t max_cached_bytes)
    : backend_(&backend),
      kernels_(backend.kernels),
      device_(blocks->device()),
      threads_(threads),
      streams_(blocks->streams()),
      pool_(internal, std::move(blocks), BufferPoolOptions{.max_cached_bytes = max_cached_bytes}),
      executor_(std::move(executor)) {}

// Streams made for the context end with it, their work done; blocks the
// pool tagged with them are freed by the pool (no stream needed).
DeviceRuntime::~DeviceRuntime() {
  for (StreamId s : own_streams_) {
    streams_->synchronize(s);
    streams_->destroy_stream(s);
  }
}

Ref<Buffer> DeviceRuntime::allocate_owned(std::size_t bytes, const char* op) {
  std::shared_ptr<BlockSource> source = pool_.block_source(internal);
  const std::size_t rounded =
      std::max<std::size_t>(Buffer::kAlignmentBytes,
                            (bytes + Buffer::kAlignmentBytes - 1) / Buffer::kAlignmentBytes * Buffer::kAlignmentBytes);
  void* block = source->allocate(rounded);
  FORGE_CHECK(block != nullptr, out_of_memory, op, device_.str(), " refused ", rounded, " bytes of owned memory");
  try {
    return Buffer::borrow(block, bytes, device_, [source, block, rounded] { source->free(block, rounded); });
  } catch (...) {
    source->free(block, rounded);
    throw;
  }
}

StreamId DeviceRuntime::new_stream(const char* op) {
  FORGE_CHECK(streams_ != nullptr, invalid_argument, op, device_.str(), " runs no streams: its work is never queued");
  own_streams_.reserve(own_streams_.size() + 1);
  StreamId s = streams_->create_stream();
  FORGE_CHECK(s != nullptr, device, op, "could not create a stream on ", device_.str());
  own_streams_.push_back(s);
  return s;
}

void DeviceRuntime::upload(std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void DeviceRuntime::download(std::byte* dst, const std::byte* src, std::size_t bytes, bool) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void DeviceRuntime::replace_kernels_for_testing(const backend::Kernels* table) noexcept {
  kernels_ = table != nullptr ? table : backend_->kernels;
}

namespace {
std::atomic<DeviceRuntimeFactory> g_accelerator_factory{nullptr};
}

void set_accelerator_factory_for_testing(DeviceRuntimeFactory factory) noexcept {
  g_accelerator_factory.store(factory, std::memory_order_release);
}

void check_accelerator_available(Device device) {
  if (!device.is_cpu() && g_accelerator_factory.load(std::memory_order_acquire) != nullptr) return;
  check_device_available(device);
}

std::unique_ptr<DeviceRuntime> make_accelerator_runtime(Device device, std::size_t max_cached_bytes) {
  if (DeviceRuntimeFactory factory = g_accelerator_factory.load(std::memory_order_acquire))
    return factory(device, max_cached_bytes);
  return make_cuda_runtime(device, max_cached_bytes);
}

}  // namespace forge::detail
