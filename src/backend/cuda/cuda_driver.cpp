#include "backend/cuda/cuda_driver.h"

#include <cstdint>

namespace forge::cuda {

namespace {
cudaStream_t native(detail::StreamId stream) noexcept { return static_cast<cudaStream_t>(stream); }
cudaEvent_t native_event(detail::EventId event) noexcept { return static_cast<cudaEvent_t>(event); }
}  // namespace

CudaDriver::CudaDriver(int ordinal) : ordinal_(ordinal) {
  // The arenas' stream-ordered pool: the device's default pool, told to keep
  // what is freed in stream order (an arena rewinds and regrows often).
  if (set_device() && cudaDeviceGetDefaultMemPool(&arena_pool_, ordinal_) == cudaSuccess) {
    std::uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(arena_pool_, cudaMemPoolAttrReleaseThreshold, &keep);
  } else {
    arena_pool_ = nullptr;
    cudaGetLastError();
  }
}

CudaDriver::~CudaDriver() {
  std::lock_guard lock(mu_);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
}

bool CudaDriver::set_device() const noexcept {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == ordinal_) return true;
  return cudaSetDevice(ordinal_) == cudaSuccess;
}

void* CudaDriver::allocate(std::size_t bytes) noexcept {
  void* block = nullptr;
  if (!set_device() || cudaMalloc(&block, bytes) != cudaSuccess) {
    cudaGetLastError();  // a refusal is reported by the pool, with its figures
    return nullptr;
  }
  std::lock_guard lock(mu_);
  ++device_allocations_;
  return block;
}

// cudaFree waits for the device, so no queued work still uses the block.
void CudaDriver::free(void* block, std::size_t) noexcept {
  set_device();
  cudaFree(block);
}

std::uint64_t CudaDriver::device_allocations() const noexcept {
  std::lock_guard lock(mu_);
  return device_allocations_;
}

detail::EventId CudaDriver::record_event(detail::StreamId stream) noexcept {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (event == nullptr && (!set_device() || cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess)) {
    cudaGetLastError();
    return nullptr;
  }
  if (cudaEventRecord(event, native(stream)) != cudaSuccess) {
    cudaGetLastError();
    cudaEventDestroy(event);
    return nullptr;
  }
  return event;
}

bool CudaDriver::event_done(detail::EventId event) noexcept {
  const cudaError_t status = cudaEventQuery(native_event(event));
  if (status == cudaErrorNotReady) return false;
  if (status != cudaSuccess) cudaGetLastError();  // a failed event gates nothing
  return true;
}

void CudaDriver::wait_event(detail::EventId event) noexcept {
  if (cudaEventSynchronize(native_event(event)) != cudaSuccess) cudaGetLastError();
}

void CudaDriver::destroy_event(detail::EventId event) noexcept {
  try {
    std::lock_guard lock(mu_);
    free_events_.push_back(native_event(event));
  } catch (...) {
    cudaEventDestroy(native_event(event));
  }
}

void CudaDriver::synchronize(detail::StreamId stream) noexcept {
  if (cudaStreamSynchronize(native(stream)) != cudaSuccess) cudaGetLastError();
}

bool CudaDriver::stream_wait(detail::StreamId stream, detail::EventId event) noexcept {
  if (cudaStreamWaitEvent(native(stream), native_event(event), 0) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

detail::StreamId CudaDriver::create_stream() noexcept {
  cudaStream_t stream = nullptr;
  if (!set_device() || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return stream;
}

void CudaDriver::destroy_stream(detail::StreamId stream) noexcept {
  if (stream != nullptr) cudaStreamDestroy(native(stream));
}

void* CudaDriver::allocate_async(std::size_t bytes, detail::StreamId stream) noexcept {
  void* block = nullptr;
  const cudaError_t status = arena_pool_ != nullptr
                                 ? cudaMallocFromPoolAsync(&block, bytes, arena_pool_, native(stream))
                                 : cudaMallocAsync(&block, bytes, native(stream));
  if (status != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return block;
}

void CudaDriver::free_async(void* block, std::size_t, detail::StreamId stream) noexcept {
  if (cudaFreeAsync(block, native(stream)) != cudaSuccess) {
    cudaGetLastError();
    synchronize(stream);
    cudaFree(block);
  }
}

}  // namespace forge::cuda
