#pragma once
// EmulatedDevice: a StreamDriver (memory/stream_driver.h) over host memory
// and host threads, so that the device memory policy (stream tags,
// event-gated reuse, OOM retry, teardown, stream-ordered arenas) runs and is
// tested on every machine, under TSan too. Each stream is a worker thread
// running its queue in order; an event completes when its stream's worker
// reaches it; enqueue() is the emulated kernel launch. Like cudaFree, free()
// first waits for every stream. A capacity makes allocations fail like a
// full device.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "memory/stream_driver.h"

namespace forge::detail {

class EmulatedDevice final : public StreamDriver {
 public:
  struct Counters {
    std::atomic<std::int64_t> allocations{0}, frees{0}, refusals{0};
    std::atomic<std::int64_t> live_blocks{0}, live_bytes{0};
    std::atomic<std::int64_t> events_live{0};
  };

  explicit EmulatedDevice(std::size_t capacity_bytes = SIZE_MAX, int ordinal = 0);
  ~EmulatedDevice() override;  // drains and joins every stream

  Device device() const noexcept override { return Device::cuda(ordinal_); }
  void* allocate(std::size_t bytes) noexcept override;
  void free(void* block, std::size_t bytes) noexcept override;
  EventId record_event(StreamId stream) noexcept override;
  bool event_done(EventId event) noexcept override;
  bool wait_event(EventId event) noexcept override;
  void destroy_event(EventId event) noexcept override;
  bool stream_done(StreamId stream) noexcept override;
  bool synchronize(StreamId stream) noexcept override;
  bool stream_wait(StreamId stream, EventId event) noexcept override;
  void* allocate_async(std::size_t bytes, StreamId stream) noexcept override;
  void free_async(void* block, std::size_t bytes, StreamId stream) noexcept override;

  // A new stream (its thread ends with the device); nullptr names the default one.
  StreamId create_stream() noexcept override;
  void destroy_stream(StreamId stream) noexcept override;
  // Queues `work` on `stream`: it runs on that stream's worker, after the
  // work queued there before it.
  void enqueue(StreamId stream, std::function<void()> work);
  // Waits for every stream.
  void synchronize_all() noexcept;
  // Shared, so a test can read them after the pool that owns the device is gone.
  std::shared_ptr<const Counters> counters() const noexcept { return counters_; }

 private:
  class Stream;
  struct Event;
  Stream& stream(StreamId id) noexcept;
  bool reserve(std::size_t bytes) noexcept;  // counts `bytes` against the capacity
  void unreserve(std::size_t bytes) noexcept;

  const std::size_t capacity_bytes_;
  const int ordinal_;
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
  std::atomic<std::size_t> used_bytes_{0};
  std::mutex streams_mu_;
  std::vector<std::unique_ptr<Stream>> streams_;  // [0]: the default stream
};

}  // namespace forge::detail
