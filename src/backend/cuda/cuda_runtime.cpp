#include "backend/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <deque>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_driver.h"
#include "core/internal.h"
#include "forge/error.h"

// Note [Device calls are queued]
// An op on a CUDA tensor validates on the host, takes its output from the
// device pool and queues its kernels on the runtime's current stream; it
// returns without waiting. Everything on one stream runs in order, which is
// what makes the pool's immediate reuse safe (Note [Streams and reuse] in
// buffer_pool.cpp). The host waits only where it must read device bytes:
// a download that is not non_blocking, to_vector/item/printing (which
// download), and kernels whose result sizes the next step (counts).
//
// Note [Staged uploads]
// cudaMemcpyAsync from pageable host memory may return before the bytes are
// read, so an upload copies them into a pinned staging buffer first and
// queues the copy from there; the staging buffer is held until an event
// after the copy completes (polled at the next upload, drained by
// synchronize() and teardown). The caller may reuse its bytes at once.

namespace forge::cuda {
namespace {

// A CUDA device runs no host-parallel loops: its kernels are queued.
class InlineExecutor final : public detail::Executor {
 public:
  void parallel_for(std::int64_t n, std::int64_t, const std::function<void(std::int64_t, std::int64_t)>& fn) override {
    if (n > 0) fn(0, n);
  }
};

// Page-locked host blocks (cudaHostAlloc): the staging area of transfers.
class PinnedSource final : public detail::BlockSource {
 public:
  Device device() const noexcept override { return Device::cpu(); }
  void* allocate(std::size_t bytes) noexcept override {
    void* block = nullptr;
    if (cudaHostAlloc(&block, bytes, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return block;
  }
  void free(void* block, std::size_t) noexcept override { cudaFreeHost(block); }
};

}  // namespace

// Staging buffers whose copies are still queued (Note [Staged uploads]).
struct CudaRuntime::InFlight {
  struct Entry {
    Ref<Buffer> staging;
    detail::EventId event;
  };
  std::deque<Entry> entries;
};

CudaRuntime::CudaRuntime(int ordinal, std::size_t max_cached_bytes)
    : CudaRuntime(ordinal, max_cached_bytes, new CudaDriver(ordinal)) {}

CudaRuntime::CudaRuntime(int ordinal, std::size_t max_cached_bytes, CudaDriver* driver)
    : DeviceRuntime(backend::cuda_backend(), 1, std::unique_ptr<detail::BlockSource>(driver),
                    std::make_unique<InlineExecutor>(), max_cached_bytes),
      ordinal_(ordinal),
      driver_(driver),
      pinned_(detail::internal, std::make_unique<PinnedSource>(),
              BufferPoolOptions{.max_cached_bytes = kPinnedMaxCachedBytes}),
      in_flight_(std::make_unique<InFlight>()) {
  const char* op = "ExecContext";
  make_current();
  check(cudaStreamCreateWithFlags(&compute_stream_, cudaStreamNonBlocking), op, "creating the compute stream");
  driver_->set_current_stream(compute_stream_);
  try {
    check_cublas(cublasCreate(&cublas_), op, "creating the cuBLAS handle");
    check_cublas(cublasLtCreate(&cublas_lt_), op, "creating the cuBLASLt handle");
    // Owned by the runtime, outside the pool: it lives as long as the
    // context, so the pool's outstanding count stays the program's own.
    lt_workspace_buffer_ = allocate_owned(kLtWorkspaceBytes, op);
    lt_workspace_ = lt_workspace_buffer_->data();
  } catch (...) {
    release_handles();
    throw;
  }
}

// Never throws: after a sticky device error, or at process exit when the
// static CUDA runtime is already unloading, every call fails, and the
// context must still go away quietly.
CudaRuntime::~CudaRuntime() {
  cudaSetDevice(ordinal_);
  if (compute_stream_ != nullptr) cudaStreamSynchronize(compute_stream_);
  cudaGetLastError();
  poll_in_flight(true);
  release_handles();
}

void CudaRuntime::release_handles() noexcept {
  if (compute_stream_ != nullptr) cudaStreamSynchronize(compute_stream_);
  lt_workspace_buffer_.reset();
  if (cublas_lt_ != nullptr) cublasLtDestroy(cublas_lt_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  cublas_lt_ = nullptr;
  cublas_ = nullptr;
  // Blocks tagged with the stream stay valid: the pool frees them with cudaFree.
  if (compute_stream_ != nullptr) cudaStreamDestroy(compute_stream_);
  compute_stream_ = nullptr;
  driver_->set_current_stream(nullptr);
}

cudaStream_t CudaRuntime::stream() const noexcept { return static_cast<cudaStream_t>(driver_->current_stream()); }

void CudaRuntime::make_current() const {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == ordinal_) return;
  check(cudaSetDevice(ordinal_), "cuda", "making the device current");
}

cublasHandle_t CudaRuntime::cublas() {
  check_cublas(cublasSetStream(cublas_, stream()), "matmul", "binding cuBLAS to the stream");
  return cublas_;
}

cublasLtHandle_t CudaRuntime::cublas_lt() { return cublas_lt_; }

void CudaRuntime::poll_in_flight(bool wait) noexcept {
  auto& entries = in_flight_->entries;
  while (!entries.empty()) {
    auto& front = entries.front();
    if (front.event != nullptr) {
      if (!wait && !driver_->event_done(front.event)) return;
      driver_->wait_event(front.event);
      driver_->destroy_event(front.event);
    }
    entries.pop_front();
  }
}

void CudaRuntime::upload(std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (bytes == 0) return;
  make_current();
  poll_in_flight(false);
  // Beyond the staging cap, or when no pinned memory is left, copy from the
  // caller's pageable bytes: cudaMemcpyAsync returns once it has staged them
  // itself, so the caller may still reuse them at once (only slower).
  Ref<Buffer> staging;
  if (bytes <= kPinnedMaxCachedBytes) {
    try {
      staging = pinned_.acquire(bytes, "upload");
    } catch (const Error&) {
    }
  }
  if (!staging) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()), "upload",
          "queuing the host-to-device copy");
    return;
  }
  std::memcpy(staging->data(), src, bytes);
  check(cudaMemcpyAsync(dst, staging->data(), bytes, cudaMemcpyHostToDevice, stream()), "upload",
        "queuing the host-to-device copy");
  hold(std::move(staging));
}

void CudaRuntime::hold(Ref<Buffer> buffer) noexcept {
  detail::EventId event = driver_->record_event(stream());
  if (event == nullptr) driver_->synchronize(stream());  // no event: finish the work now
  try {
    in_flight_->entries.push_back({std::move(buffer), event});
  } catch (...) {
    if (event != nullptr) {
      driver_->wait_event(event);
      driver_->destroy_event(event);
    }
  }
}

// A non-blocking download's pinned output: its block must not go back to the
// pinned pool (and be staged into) while the copy into it is queued.
void CudaRuntime::keep_until_done(Ref<Buffer> buffer) { hold(std::move(buffer)); }

void CudaRuntime::download(std::byte* dst, const std::byte* src, std::size_t bytes, bool non_blocking) {
  if (bytes == 0) return;
  make_current();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()), "download",
        "queuing the device-to-host copy");
  if (!non_blocking) check(cudaStreamSynchronize(stream()), "download", "waiting for the device-to-host copy");
}

void CudaRuntime::synchronize() {
  make_current();
  check(cudaStreamSynchronize(stream()), "synchronize", "waiting for the stream");
  poll_in_flight(true);
}

cudaStream_t stream_of(detail::DeviceRuntime& dev) {
  CudaRuntime& rt = runtime_of(dev);
  rt.make_current();
  return rt.stream();
}

void fail(cudaError_t error, const char* op, const char* what) {
  cudaGetLastError();
  const ErrorCode code = error == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::device;
  throw Error(code, detail::cat("[", op, "] ", what, " failed on CUDA: ", cudaGetErrorName(error), ": ",
                                cudaGetErrorString(error)));
}

void fail_cublas(cublasStatus_t status, const char* op, const char* what) {
  const ErrorCode code = status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::out_of_memory : ErrorCode::device;
  throw Error(code, detail::cat("[", op, "] ", what, " failed in cuBLAS: ", cublasGetStatusName(status), ": ",
                                cublasGetStatusString(status)));
}

}  // namespace forge::cuda
