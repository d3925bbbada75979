#pragma once
// CudaDriver: the StreamDriver (memory/stream_driver.h) of one CUDA device:
// blocks from cudaMalloc for the pool, events from a small free list of
// cudaEvent_t (made without timing), and stream-ordered blocks for arenas
// from the device's cudaMemPool, whose release threshold is kept at its
// maximum so that memory freed in stream order stays reserved for the next
// call instead of going back to the driver.

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <vector>

#include "memory/stream_driver.h"

namespace forge::cuda {

class CudaDriver final : public detail::StreamDriver {
 public:
  explicit CudaDriver(int ordinal);
  ~CudaDriver() override;

  Device device() const noexcept override { return Device::cuda(ordinal_); }
  void* allocate(std::size_t bytes) noexcept override;
  void free(void* block, std::size_t bytes) noexcept override;
  detail::EventId record_event(detail::StreamId stream) noexcept override;
  bool event_done(detail::EventId event) noexcept override;
  bool wait_event(detail::EventId event) noexcept override;
  void destroy_event(detail::EventId event) noexcept override;
  bool stream_done(detail::StreamId stream) noexcept override;
  bool synchronize(detail::StreamId stream) noexcept override;
  std::string take_error() override;
  bool stream_wait(detail::StreamId stream, detail::EventId event) noexcept override;
  detail::StreamId create_stream() noexcept override;
  void destroy_stream(detail::StreamId stream) noexcept override;
  void* allocate_async(std::size_t bytes, detail::StreamId stream) noexcept override;
  void free_async(void* block, std::size_t bytes, detail::StreamId stream) noexcept override;

  int ordinal() const noexcept { return ordinal_; }
  // cudaMalloc calls so far (the benchmark of a steady loop reads it).
  std::uint64_t device_allocations() const noexcept;

 private:
  class OnDevice;
  void note_error(cudaError_t error) noexcept;

  const int ordinal_;
  cudaMemPool_t arena_pool_ = nullptr;
  mutable std::mutex mu_;
  std::vector<cudaEvent_t> free_events_;
  std::uint64_t device_allocations_ = 0;
  cudaError_t last_error_ = cudaSuccess;
};

}  // namespace forge::cuda
