#include "memory/emulated_device.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <thread>

namespace forge::detail {

// One stream: a queue of work run in order by its own thread.
class EmulatedDevice::Stream {
 public:
  Stream() : worker_([this] { run(); }) {}
  ~Stream() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void push(std::function<void()> work) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(work));
      ++queued_;
    }
    cv_.notify_all();
  }
  bool idle() noexcept {
    std::lock_guard lock(mu_);
    return done_ >= queued_;
  }
  // Waits until the work queued before this call has run.
  void drain() noexcept {
    std::unique_lock lock(mu_);
    const std::uint64_t target = queued_;
    cv_.wait(lock, [&] { return done_ >= target; });
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t queued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;  // last: starts once the rest is built
};

// Owned twice, by the task that completes it and by its holder: the last
// to let go deletes it, so an event may be destroyed before it completes.
struct EmulatedDevice::Event {
  std::atomic<bool> done{false};
  std::atomic<int> owners{2};
  static void release(Event* e) noexcept {
    if (e->owners.fetch_sub(1, std::memory_order_acq_rel) == 1) delete e;
  }
};

EmulatedDevice::EmulatedDevice(std::size_t capacity_bytes, int ordinal)
    : capacity_bytes_(capacity_bytes), ordinal_(ordinal) {
  streams_.push_back(std::make_unique<Stream>());
}

EmulatedDevice::~EmulatedDevice() {
  synchronize_all();
  streams_.clear();
}

EmulatedDevice::Stream& EmulatedDevice::stream(StreamId id) noexcept {
  return id == nullptr ? *streams_.front() : *static_cast<Stream*>(id);
}

StreamId EmulatedDevice::create_stream() noexcept {
  try {
    std::lock_guard lock(streams_mu_);
    streams_.push_back(std::make_unique<Stream>());
    return streams_.back().get();
  } catch (...) {
    return nullptr;
  }
}

// Its work is drained; the thread stays until the device goes (a stream's
// handle must not be reused while blocks are tagged with it).
void EmulatedDevice::destroy_stream(StreamId id) noexcept {
  if (id != nullptr) synchronize(id);
}

void EmulatedDevice::enqueue(StreamId id, std::function<void()> work) { stream(id).push(std::move(work)); }

bool EmulatedDevice::synchronize(StreamId id) noexcept {
  stream(id).drain();
  return true;
}
bool EmulatedDevice::stream_done(StreamId id) noexcept { return stream(id).idle(); }

void EmulatedDevice::synchronize_all() noexcept {
  std::lock_guard lock(streams_mu_);
  for (auto& s : streams_) s->drain();
}

bool EmulatedDevice::reserve(std::size_t bytes) noexcept {
  std::size_t used = used_bytes_.load(std::memory_order_relaxed);
  do {
    if (bytes > capacity_bytes_ - used) {
      counters_->refusals.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } while (!used_bytes_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  counters_->allocations.fetch_add(1, std::memory_order_relaxed);
  counters_->live_blocks.fetch_add(1, std::memory_order_relaxed);
  counters_->live_bytes.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  return true;
}

void EmulatedDevice::unreserve(std::size_t bytes) noexcept {
  used_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  counters_->frees.fetch_add(1, std::memory_order_relaxed);
  counters_->live_blocks.fetch_sub(1, std::memory_order_relaxed);
  counters_->live_bytes.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
}

void* EmulatedDevice::allocate(std::size_t bytes) noexcept {
  if (!reserve(bytes)) return nullptr;
  void* block = std::aligned_alloc(64, bytes);
  if (block == nullptr) unreserve(bytes);
  return block;
}

void EmulatedDevice::free(void* block, std::size_t bytes) noexcept {
  synchronize_all();  // as cudaFree: no queued work may still use the block
  std::free(block);
  unreserve(bytes);
}

EventId EmulatedDevice::record_event(StreamId id) noexcept {
  Event* event = new (std::nothrow) Event;
  if (event == nullptr) return nullptr;
  try {
    stream(id).push([event] {
      event->done.store(true, std::memory_order_release);
      Event::release(event);
    });
  } catch (...) {
    delete event;
    return nullptr;
  }
  counters_->events_live.fetch_add(1, std::memory_order_relaxed);
  return event;
}

bool EmulatedDevice::event_done(EventId event) noexcept {
  return static_cast<Event*>(event)->done.load(std::memory_order_acquire);
}

bool EmulatedDevice::wait_event(EventId event) noexcept {
  while (!event_done(event)) std::this_thread::yield();
  return true;
}

void EmulatedDevice::destroy_event(EventId event) noexcept {
  Event::release(static_cast<Event*>(event));
  counters_->events_live.fetch_sub(1, std::memory_order_relaxed);
}

bool EmulatedDevice::stream_wait(StreamId id, EventId event) noexcept {
  try {
    stream(id).push([this, event] { wait_event(event); });
  } catch (...) {
    return false;
  }
  return true;
}

// Stream-ordered blocks: the bytes are taken now (the stream's later work
// may use them) and given back when the stream reaches the free.
void* EmulatedDevice::allocate_async(std::size_t bytes, StreamId) noexcept { return allocate(bytes); }

void EmulatedDevice::free_async(void* block, std::size_t bytes, StreamId id) noexcept {
  try {
    stream(id).push([this, block, bytes] {
      std::free(block);
      unreserve(bytes);
    });
  } catch (...) {
    synchronize(id);
    std::free(block);
    unreserve(bytes);
  }
}

}  // namespace forge::detail
