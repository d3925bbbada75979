#pragma once
// CudaRuntime: the DeviceRuntime of one CUDA device in one ExecContext. It
// owns the context's compute stream, the cuBLAS/cuBLASLt handles bound to
// it (their workspace comes from the device pool) and the device pool over
// cudaMalloc (src/backend/cuda/cuda_driver.h). Kernels reach it through the
// DeviceRuntime they are given:
//
//   cudaStream_t s = cuda::stream_of(dev);       // the current stream
//   my_kernel<<<grid, block, 0, s>>>(...);
//   cuda::check_launch("add");                    // ErrorCode::device on failure
//
// Every kernel is queued on the current stream and returns without waiting
// (Note [Device calls are queued] in cuda_runtime.cpp); a kernel that must
// read a result on the host (a count, a scalar) synchronizes that stream.
// Only sources of the CUDA backend include this header.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "backend/device_runtime.h"

namespace forge::cuda {

class CudaDriver;

class CudaRuntime final : public detail::DeviceRuntime {
 public:
  CudaRuntime(int ordinal, std::size_t max_cached_bytes);
  ~CudaRuntime() override;

  int ordinal() const noexcept { return ordinal_; }
  // The stream kernels are queued on now: the context's own, or the one a
  // StreamGuard installed.
  cudaStream_t stream() const noexcept;
  // The context's own compute stream (made with the runtime).
  cudaStream_t compute_stream() const noexcept { return compute_stream_; }
  // Makes this runtime's device current on the calling thread (cheap when it
  // already is).
  void make_current() const;
  // cuBLAS and cuBLASLt handles set to stream(); the Lt workspace is a device
  // buffer of kLtWorkspaceBytes the runtime owns (outside the pool).
  cublasHandle_t cublas();
  cublasLtHandle_t cublas_lt();
  // The Lt workspace of the compute stream; nullptr (run without one) on any
  // other stream, whose matmuls could run at once with the compute stream's.
  void* lt_workspace() noexcept { return stream() == compute_stream_ ? lt_workspace_ : nullptr; }
  static constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;
  // The pinned staging pool's cache cap; larger uploads skip staging.
  static constexpr std::size_t kPinnedMaxCachedBytes = std::size_t{256} << 20;
  // The device driver behind the pool (streams, events, stream-ordered blocks).
  CudaDriver& driver() noexcept { return *driver_; }

  // Transfers (Note [Staged uploads] in cuda_runtime.cpp).
  void upload(std::byte* dst, const std::byte* src, std::size_t bytes) override;
  void download(std::byte* dst, const std::byte* src, std::size_t bytes, bool non_blocking) override;
  void synchronize() override;
  BufferPool* pinned_pool() noexcept override { return &pinned_; }
  void keep_until_done(Ref<Buffer> buffer) override;

 private:
  struct InFlight;
  CudaRuntime(int ordinal, std::size_t max_cached_bytes, CudaDriver* driver);
  void release_handles() noexcept;
  // Holds `buffer` until the work queued on the current stream so far is done.
  void hold(Ref<Buffer> buffer) noexcept;
  // Releases staging buffers whose copies completed (all, waiting, when `wait`).
  void poll_in_flight(bool wait) noexcept;

  int ordinal_;
  CudaDriver* driver_;  // owned by the pool (the pool's block source)
  BufferPool pinned_;   // page-locked host memory for transfers
  std::unique_ptr<InFlight> in_flight_;
  cudaStream_t compute_stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  Ref<Buffer> lt_workspace_buffer_;
  void* lt_workspace_ = nullptr;
};

inline CudaRuntime& runtime_of(detail::DeviceRuntime& dev) noexcept { return static_cast<CudaRuntime&>(dev); }
// The stream a kernel of `dev` is queued on; makes dev's device current.
cudaStream_t stream_of(detail::DeviceRuntime& dev);

// ErrorCode::device (out_of_memory for cudaErrorMemoryAllocation) naming op,
// what failed and CUDA's message.
[[noreturn]] void fail(cudaError_t error, const char* op, const char* what);
inline void check(cudaError_t error, const char* op, const char* what) {
  if (error != cudaSuccess) [[unlikely]]
    fail(error, op, what);
}
// After a <<<...>>> launch: a bad configuration is reported at once.
inline void check_launch(const char* op) { check(cudaGetLastError(), op, "kernel launch"); }
[[noreturn]] void fail_cublas(cublasStatus_t status, const char* op, const char* what);
inline void check_cublas(cublasStatus_t status, const char* op, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) [[unlikely]]
    fail_cublas(status, op, what);
}

}  // namespace forge::cuda
