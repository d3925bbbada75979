#pragma once
// Stream: where a device's work runs, in order, after the host has moved on
// (a CUDA stream). Each ExecContext on a device computes on its own stream
// (ctx.stream()); a StreamGuard runs a region of ops on another one. The
// host's stream is a placeholder: host work is never queued, so waiting on
// it returns at once. Memory and streams: docs/MEMORY.md, "Streams".

#include "forge/device.h"
#include "forge/ref.h"
#include "forge/runtime.h"

namespace forge {

class Event;
class ExecContext;
class Tensor;

class Stream {
 public:
  Stream() = default;  // the host's
  Device device() const noexcept { return device_; }
  // The native handle (a cudaStream_t), nullptr for the host.
  void* native() const noexcept { return handle_; }
  // Waits for the work queued on it so far.
  void synchronize() const;
  // Whether that work has all completed.
  bool query() const;
  // An event that completes when the work queued so far has.
  Event record() const;
  // Work queued on this stream from now on waits for `event` first.
  void wait(const Event& event) const;
  friend bool operator==(const Stream& a, const Stream& b) noexcept {
    return a.device_ == b.device_ && a.handle_ == b.handle_;
  }

 private:
  friend class ExecContext;
  friend class StreamGuard;
  friend class Tensor;
  Stream(Ref<Runtime> runtime, Device device, void* handle) noexcept;
  Ref<Runtime> runtime_;
  Device device_{};
  void* handle_ = nullptr;
};

// A point in a stream's work (a cudaEvent_t). Move-only; an event of the
// host, or a default-made one, has always completed.
class Event {
 public:
  Event() = default;
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  bool query() const;        // whether it has completed
  void synchronize() const;  // waits until it has

 private:
  friend class Stream;
  Event(Ref<Runtime> runtime, Device device, void* handle) noexcept;
  void reset() noexcept;
  Ref<Runtime> runtime_;
  Device device_{};
  void* handle_ = nullptr;
};

// Makes `stream` the current stream of its context's device until destroyed:
// ops queue their kernels there and allocate from its free list (Note
// [Streams and reuse] in src/memory/buffer_pool.cpp). Nests; destroy in
// reverse order, on the thread driving the context.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream stream_;
  void* previous_ = nullptr;
};

}  // namespace forge
