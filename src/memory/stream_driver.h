#pragma once
// StreamDriver: a device whose work runs in order on streams, as a CUDA
// device does. The device pool's stream policy (Note [Streams and reuse] in
// buffer_pool.cpp) and the stream-ordered arenas (src/runtime/arena.cpp) are
// written against this small interface, so their logic runs and is tested on
// every machine: cuda/cuda_driver.cpp implements it over the CUDA runtime,
// memory/emulated_device.cpp over host threads (one worker per stream).
//
// Streams and events are opaque handles (cudaStream_t, cudaEvent_t);
// nullptr is the device's default stream. Every call is noexcept: a failure
// is reported by the return value, so the pool's release path (which cannot
// throw) may call them.

#include <atomic>
#include <cstddef>
#include <string>

#include "memory/block_source.h"

namespace forge::detail {

using StreamId = void*;
using EventId = void*;

class StreamDriver : public BlockSource {
 public:
  StreamDriver* streams() noexcept final { return this; }

  // The stream allocations are tagged with now (the context's compute
  // stream, or a StreamGuard's). One thread drives a context, so this is
  // read and written by it; relaxed atomics keep other threads' reads defined.
  StreamId current_stream() const noexcept { return current_.load(std::memory_order_relaxed); }
  void set_current_stream(StreamId stream) noexcept { current_.store(stream, std::memory_order_relaxed); }

  // An event recorded on `stream` now: it completes when the work queued on
  // the stream before it has. nullptr when none could be made.
  virtual EventId record_event(StreamId stream) noexcept = 0;
  // Whether `event` has completed (true for an event that failed).
  virtual bool event_done(EventId event) noexcept = 0;
  // Blocks the calling thread until `event` has completed; false when the
  // work before it failed (take_error() says how).
  virtual bool wait_event(EventId event) noexcept = 0;
  // Gives an event back (completed or not).
  virtual void destroy_event(EventId event) noexcept = 0;
  // Whether the work queued on `stream` has all completed.
  virtual bool stream_done(StreamId stream) noexcept = 0;
  // Blocks until the work queued on `stream` has completed; false when it
  // failed (take_error() says how).
  virtual bool synchronize(StreamId stream) noexcept = 0;
  // The last failure a call above swallowed, described, and forgets it
  // (empty when none).
  virtual std::string take_error() { return {}; }
  // Makes `stream` wait for `event` (recorded on another stream) before the
  // work queued after this call; false when it cannot.
  virtual bool stream_wait(StreamId stream, EventId event) noexcept = 0;

  // A new stream of the device, or nullptr when none can be made; and its end.
  virtual StreamId create_stream() noexcept = 0;
  virtual void destroy_stream(StreamId stream) noexcept = 0;

  // Stream-ordered blocks (arenas): usable by work queued on `stream` from
  // now on; freed when the stream reaches the free. nullptr when refused.
  virtual void* allocate_async(std::size_t bytes, StreamId stream) noexcept = 0;
  virtual void free_async(void* block, std::size_t bytes, StreamId stream) noexcept = 0;

 private:
  std::atomic<StreamId> current_{nullptr};
};

}  // namespace forge::detail
