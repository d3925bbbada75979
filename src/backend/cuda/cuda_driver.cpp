#include "backend/cuda/cuda_driver.h"

#include <cstdint>
#include <string>
#include <utility>

namespace forge::cuda {

namespace {
cudaStream_t native(detail::StreamId stream) noexcept { return static_cast<cudaStream_t>(stream); }
cudaEvent_t native_event(detail::EventId event) noexcept { return static_cast<cudaEvent_t>(event); }
}  // namespace

// Makes the driver's device current for one call and restores the caller's:
// a pool call for device B (a release in the middle of an op on device A)
// must not leave B current for A's next launch.
class CudaDriver::OnDevice {
 public:
  explicit OnDevice(int ordinal) noexcept {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ == ordinal) {
      ok_ = true;
      return;
    }
    ok_ = cudaSetDevice(ordinal) == cudaSuccess;
    switched_ = ok_;
    if (!ok_) cudaGetLastError();
  }
  ~OnDevice() {
    if (switched_ && previous_ >= 0) cudaSetDevice(previous_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  bool ok() const noexcept { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = false;
  bool switched_ = false;
};

CudaDriver::CudaDriver(int ordinal) : ordinal_(ordinal) {
  // The arenas' stream-ordered pool: a private one (the device's default pool
  // serves everyone else's cudaMallocAsync), told to keep what is freed in
  // stream order, since an arena rewinds and regrows often. allocate() trims
  // it when cudaMalloc is refused, so neither allocator strands the other.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal_;
  const OnDevice on(ordinal_);
  if (on.ok() && cudaMemPoolCreate(&arena_pool_, &props) == cudaSuccess) {
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
  if (arena_pool_ != nullptr) cudaMemPoolDestroy(arena_pool_);
  cudaGetLastError();
}

// A failed call's CUDA error, kept for the error a caller throws; clears it.
void CudaDriver::note_error(cudaError_t error) noexcept {
  cudaGetLastError();
  if (error == cudaSuccess || error == cudaErrorNotReady) return;
  std::lock_guard lock(mu_);
  last_error_ = error;
}

std::string CudaDriver::take_error() {
  cudaError_t error;
  {
    std::lock_guard lock(mu_);
    error = std::exchange(last_error_, cudaSuccess);
  }
  if (error == cudaSuccess) return {};
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

void* CudaDriver::allocate(std::size_t bytes) noexcept {
  void* block = nullptr;
  const OnDevice on(ordinal_);
  if (!on.ok()) return nullptr;
  cudaError_t status = cudaMalloc(&block, bytes);
  if (status == cudaErrorMemoryAllocation && arena_pool_ != nullptr) {
    // Memory the arenas freed in stream order may be what is missing.
    cudaGetLastError();
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(arena_pool_, 0);
    status = cudaMalloc(&block, bytes);
  }
  if (status != cudaSuccess) {
    // A refusal is reported by the pool, with its figures; anything else is
    // kept for the device error it throws instead (take_error).
    if (status == cudaErrorMemoryAllocation)
      cudaGetLastError();
    else
      note_error(status);
    return nullptr;
  }
  std::lock_guard lock(mu_);
  ++device_allocations_;
  return block;
}

// cudaFree waits for the device, so no queued work still uses the block.
void CudaDriver::free(void* block, std::size_t) noexcept {
  const OnDevice on(ordinal_);
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
  const OnDevice on(ordinal_);
  if (event == nullptr && (!on.ok() || cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess)) {
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

// cudaErrorNotReady is cleared too, so that no later launch check reports it.
bool CudaDriver::event_done(detail::EventId event) noexcept {
  const cudaError_t status = cudaEventQuery(native_event(event));
  if (status == cudaSuccess) return true;
  note_error(status);
  return status != cudaErrorNotReady;  // a failed event gates nothing
}

bool CudaDriver::wait_event(detail::EventId event) noexcept {
  const cudaError_t status = cudaEventSynchronize(native_event(event));
  if (status == cudaSuccess) return true;
  note_error(status);
  return false;
}

void CudaDriver::destroy_event(detail::EventId event) noexcept {
  try {
    std::lock_guard lock(mu_);
    free_events_.push_back(native_event(event));
  } catch (...) {
    cudaEventDestroy(native_event(event));
  }
}

bool CudaDriver::stream_done(detail::StreamId stream) noexcept {
  const cudaError_t status = cudaStreamQuery(native(stream));
  if (status == cudaSuccess) return true;
  note_error(status);
  return status != cudaErrorNotReady;
}

bool CudaDriver::synchronize(detail::StreamId stream) noexcept {
  const cudaError_t status = cudaStreamSynchronize(native(stream));
  if (status == cudaSuccess) return true;
  note_error(status);
  return false;
}

bool CudaDriver::stream_wait(detail::StreamId stream, detail::EventId event) noexcept {
  if (cudaStreamWaitEvent(native(stream), native_event(event), 0) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

detail::StreamId CudaDriver::create_stream() noexcept {
  cudaStream_t stream = nullptr;
  const OnDevice on(ordinal_);
  if (!on.ok() || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
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
