// The device pool's stream policy (Note [Streams and reuse] in
// src/memory/buffer_pool.cpp), run over the emulated device
// (src/memory/emulated_device.h): host threads stand in for streams, so the
// policy's logic is checked on every machine and under TSan. The same pool
// runs over cudaMalloc on a GPU (tests/cuda_test.cpp).

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/internal.h"
#include "forge/forge.h"
#include "memory/emulated_device.h"

using forge::Buffer;
using forge::BufferPool;
using forge::ErrorCode;
using forge::Ref;
using forge::detail::EmulatedDevice;
using forge::detail::StreamId;

namespace {

constexpr std::size_t KiB = 1024;

// A pool over an emulated device; `dev` stays valid while the pool lives.
struct DevicePool {
  explicit DevicePool(std::size_t capacity = SIZE_MAX, std::size_t max_cached = BufferPool::kDefaultMaxCachedBytes)
      : dev(new EmulatedDevice(capacity)),
        counters(dev->counters()),
        pool(forge::detail::internal, std::unique_ptr<EmulatedDevice>(dev), {.max_cached_bytes = max_cached}) {}
  Ref<Buffer> acquire_on(StreamId stream, std::size_t bytes) {
    dev->set_current_stream(stream);
    return pool.acquire(bytes, "test");
  }
  EmulatedDevice* dev;
  std::shared_ptr<const EmulatedDevice::Counters> counters;
  BufferPool pool;
};

// A gate a stream's work waits at until the test opens it.
struct Gate {
  std::promise<void> open_promise;
  std::shared_future<void> opened = open_promise.get_future().share();
  void open() { open_promise.set_value(); }
};

}  // namespace

TEST_CASE("device pool: a block released on its own stream is reused at once on that stream, and only there",
          "[device-pool]") {
  DevicePool p;
  const StreamId a = p.dev->create_stream();
  const StreamId b = p.dev->create_stream();

  Ref<Buffer> first = p.acquire_on(a, 1000);
  CHECK(first->stream() == a);
  std::byte* const block = first->data();
  first.reset();
  CHECK(p.pool.stats().cached_blocks == 1);

  // Another stream may not take it without an event: a fresh block.
  Ref<Buffer> on_b = p.acquire_on(b, 1000);
  CHECK(on_b->data() != block);
  CHECK(on_b->stream() == b);
  CHECK(p.pool.stats().misses == 2);

  // Its own stream takes it back at once.
  Ref<Buffer> again = p.acquire_on(a, 1000);
  CHECK(again->data() == block);
  CHECK(p.pool.stats().hits == 1);
  CHECK(p.pool.stats().pending_blocks == 0);
}

TEST_CASE("device pool: a block another stream used is reused only after that stream's event",
          "[device-pool][concurrent]") {
  DevicePool p;
  const StreamId a = p.dev->create_stream();
  const StreamId b = p.dev->create_stream();

  Ref<Buffer> buf = p.acquire_on(a, 4 * KiB);
  std::byte* const block = buf->data();
  auto gate = std::make_shared<Gate>();
  // Work on stream b writes the block once the gate opens.
  p.pool.record_stream(*buf, b);
  p.dev->enqueue(b, [gate, block] {
    gate->opened.wait();
    std::memset(block, 0x5a, 4 * KiB);
  });
  buf.reset();
  CHECK(p.pool.stats().pending_blocks == 1);
  CHECK(p.pool.stats().cached_blocks == 0);

  // While b's work is queued, stream a gets a different block, and may write it.
  Ref<Buffer> other = p.acquire_on(a, 4 * KiB);
  CHECK(other->data() != block);
  std::memset(other->data(), 1, 4 * KiB);
  other.reset();

  gate->open();
  p.dev->synchronize(b);
  // The event has completed: the next acquire on a collects the block and,
  // LIFO within its size... the most recently released first: `other`'s.
  Ref<Buffer> x = p.acquire_on(a, 4 * KiB);
  Ref<Buffer> y = p.acquire_on(a, 4 * KiB);
  CHECK(p.pool.stats().pending_blocks == 0);
  CHECK((x->data() == block || y->data() == block));
  CHECK(std::to_integer<int>((x->data() == block ? x : y)->data()[4095]) == 0x5a);  // b's write landed first
  CHECK(p.pool.stats().misses == 2);
  CHECK(p.counters->events_live.load() == 0);
}

TEST_CASE("device pool: record_stream is a no-op for the buffer's own stream and bounded per buffer", "[device-pool]") {
  DevicePool p;
  const StreamId a = p.dev->create_stream();
  Ref<Buffer> buf = p.acquire_on(a, 256);
  p.pool.record_stream(*buf, a);
  buf.reset();
  CHECK(p.pool.stats().pending_blocks == 0);
  CHECK(p.pool.stats().cached_blocks == 1);

  buf = p.acquire_on(a, 256);
  for (int i = 0; i < 4; ++i) p.pool.record_stream(*buf, p.dev->create_stream());
  const StreamId fifth = p.dev->create_stream();
  try {
    p.pool.record_stream(*buf, fifth);
    FAIL("a fifth stream was accepted");
  } catch (const forge::Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
  }
  buf.reset();
  CHECK(p.pool.stats().pending_blocks == 1);

  // A buffer of another pool is refused.
  BufferPool host;
  Ref<Buffer> foreign = host.acquire(64);
  CHECK_THROWS_AS(p.pool.record_stream(*foreign, a), forge::Error);
  // A host pool has one stream: record_stream does nothing.
  host.record_stream(*foreign, a);
  foreign.reset();
  CHECK(host.stats().cached_blocks == 1);
}

TEST_CASE("device pool: a refused allocation empties the cache and retries once, then names what it saw",
          "[device-pool]") {
  DevicePool p(64 * KiB);
  const StreamId a = p.dev->create_stream();
  // Cache 48 KiB in blocks too small for the next request.
  {
    std::vector<Ref<Buffer>> held;
    for (int i = 0; i < 3; ++i) held.push_back(p.acquire_on(a, 16 * KiB));
  }
  CHECK(p.pool.stats().cached_bytes == 48 * KiB);

  // 32 KiB fits only once the cache is given back.
  Ref<Buffer> big = p.acquire_on(a, 32 * KiB);
  forge::PoolStats s = p.pool.stats();
  CHECK(s.cache_flushes == 1);
  CHECK(s.cached_bytes == 0);
  CHECK(p.counters->refusals.load() == 1);
  CHECK(p.counters->live_blocks.load() == 1);

  // 64 KiB cannot fit with 32 KiB live: out_of_memory naming the device,
  // the request, the cache it emptied and what is live.
  try {
    (void)p.acquire_on(a, 64 * KiB);
    FAIL("a request beyond the device was served");
  } catch (const forge::Error& e) {
    CHECK(e.code() == ErrorCode::out_of_memory);
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("cuda:0 is out of memory"));
    CHECK_THAT(what, Catch::Contains("a request of 65536 bytes"));
    CHECK_THAT(what, Catch::Contains("emptying a cache of 0 bytes"));
    CHECK_THAT(what, Catch::Contains("32768 bytes live"));
  }
  CHECK(p.pool.stats().cache_flushes == 2);
  CHECK(p.pool.outstanding() == 1);
}

TEST_CASE("device pool: emptying the cache for a refused allocation waits for pending blocks",
          "[device-pool][concurrent]") {
  DevicePool p(16 * KiB);
  const StreamId a = p.dev->create_stream();
  const StreamId b = p.dev->create_stream();
  Ref<Buffer> buf = p.acquire_on(a, 16 * KiB);
  std::byte* const block = buf->data();
  p.pool.record_stream(*buf, b);
  auto gate = std::make_shared<Gate>();
  std::atomic<bool> written{false};
  p.dev->enqueue(b, [gate, block, &written] {
    gate->opened.wait();
    std::memset(block, 7, 16 * KiB);
    written.store(true);
  });
  buf.reset();
  // Open the gate from another thread while the acquire below waits.
  std::thread opener([gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate->open();
  });
  // The device is full: the pool waits for b's event, frees, and retries.
  Ref<Buffer> next = p.acquire_on(b, 8 * KiB);
  opener.join();
  CHECK(written.load());
  CHECK(p.pool.stats().cache_flushes == 1);
  CHECK(p.pool.stats().pending_blocks == 0);
}

TEST_CASE("device pool: trim and teardown wait for streams still using pending blocks", "[device-pool][concurrent]") {
  std::shared_ptr<const EmulatedDevice::Counters> counters;
  auto gate = std::make_shared<Gate>();
  std::thread opener;
  {
    DevicePool p;
    counters = p.counters;
    const StreamId a = p.dev->create_stream();
    const StreamId b = p.dev->create_stream();
    for (int round = 0; round < 2; ++round) {
      Ref<Buffer> buf = p.acquire_on(a, 2 * KiB);
      std::byte* const block = buf->data();
      p.pool.record_stream(*buf, b);
      std::shared_future<void> opened = round == 0 ? std::shared_future<void>() : gate->opened;
      p.dev->enqueue(b, [opened, block] {
        if (opened.valid()) opened.wait();
        std::memset(block, 3, 2 * KiB);  // a use-after-free under ASan if the block went early
      });
      buf.reset();
      if (round == 0) {
        p.pool.trim();  // waits for b, then frees
        CHECK(p.pool.stats().pending_blocks == 0);
        CHECK(counters->live_blocks.load() == 0);
      }
    }
    opener = std::thread([gate] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      gate->open();
    });
    CHECK(p.pool.stats().pending_blocks == 1);
  }  // ~BufferPool waits for b's event before freeing the block
  opener.join();
  CHECK(counters->live_blocks.load() == 0);
  CHECK(counters->events_live.load() == 0);
}

TEST_CASE("device pool: buffers used on two streams, released from another thread while one thread acquires",
          "[device-pool][concurrent]") {
  DevicePool p;
  const StreamId a = p.dev->create_stream();
  const StreamId b = p.dev->create_stream();
  constexpr int kRounds = 400;
  std::vector<Ref<Buffer>> handed(kRounds);
  std::vector<forge::detail::EventId> events;
  std::atomic<int> ready{0}, wrong{0};
  std::thread releaser([&] {
    for (int i = 0; i < kRounds; ++i) {
      while (ready.load(std::memory_order_acquire) <= i) std::this_thread::yield();
      handed[i].reset();
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    Ref<Buffer> buf = p.acquire_on(a, 64 * (1 + i % 8));
    std::byte* const block = buf->data();
    const std::size_t n = buf->nbytes();
    // Each buffer is written on its own stream; every other one is then
    // read on b, after an event that orders b behind a's write.
    p.dev->enqueue(a, [block, n, i] { std::memset(block, i & 0xff, n); });
    if (i % 2 == 0) {
      events.push_back(p.dev->record_event(a));
      REQUIRE(p.dev->stream_wait(b, events.back()));
      p.pool.record_stream(*buf, b);
      p.dev->enqueue(b, [block, n, i, &wrong] {
        if (std::to_integer<int>(block[n - 1]) != (i & 0xff)) wrong.fetch_add(1);
      });
    }
    handed[i] = std::move(buf);
    ready.store(i + 1, std::memory_order_release);
  }
  releaser.join();
  p.dev->synchronize_all();
  for (forge::detail::EventId e : events) p.dev->destroy_event(e);
  CHECK(wrong.load() == 0);
  (void)p.acquire_on(a, 64);  // collects what completed
  CHECK(p.pool.outstanding() == 0);
  CHECK(p.pool.stats().pending_blocks == 0);
}
