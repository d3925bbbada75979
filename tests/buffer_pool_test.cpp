// BufferPool (DESIGN §3): rounding, one free list for every dtype, best fit
// with LIFO, the oversize bound, the cache cap (options, context options,
// FORGE_POOL_MAX_CACHED_BYTES), trim, stats, thread-safe release, teardown,
// scratch leases, borrowed buffers, fault injection and the steady loop.

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "forge/forge.h"
#include "memory/block_source.h"
#include "support.h"

using forge::Buffer;
using forge::BufferPool;
using forge::BufferPoolOptions;
using forge::DType;
using forge::ErrorCode;
using forge::PoolStats;
using forge::Ref;
using forge::Tensor;
using forge_test::context_options;
using forge_test::EnvGuard;
using forge_test::TestContext;

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * 1024;

bool aligned64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

}  // namespace

// ---------------------------------------------------------------------------
// Rounding

TEST_CASE("buffer_pool: rounded_size follows the contract table") {
  // n <= 4096: max(64, next_pow2(n)); beyond: align_up(n, 4096).
  const std::vector<std::pair<std::size_t, std::size_t>> table = {
      {0, 64},
      {1, 64},
      {2, 64},
      {63, 64},
      {64, 64},
      {65, 128},
      {100, 128},
      {128, 128},
      {129, 256},
      {1000, 1024},
      {1024, 1024},
      {1025, 2048},
      {2049, 4096},
      {4095, 4096},
      {4096, 4096},
      {4097, 8192},
      {8191, 8192},
      {8192, 8192},
      {8193, 12288},  // not a power of two: a multiple of 4096
      {10 * KiB, 12 * KiB},
      {12289, 16384},
      {20000, 20480},
      {MiB, MiB},
      {MiB + 1, MiB + 4096},
      {3 * MiB + 5, 3 * MiB + 4096},
  };
  for (const auto& [n, expected] : table) {
    INFO("n = " << n);
    CHECK(BufferPool::rounded_size(n) == expected);
  }
  CHECK(BufferPool::kMaxOversizeFactor == 2);
  CHECK(BufferPool::kMinBlockBytes == 64);
  CHECK(BufferPool::kSmallLimitBytes == 4096);
  CHECK(BufferPool::kSlabQuantumBytes == 4096);
  CHECK(BufferPool::kDefaultMaxCachedBytes == std::size_t{1} << 30);
}

TEST_CASE("buffer_pool: acquire hands out a block of the rounded size, 64-byte aligned") {
  BufferPool pool;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{65}, std::size_t{100},
                        std::size_t{4095}, std::size_t{4097}, std::size_t{8191}, 10 * KiB, MiB + 1}) {
    INFO("n = " << n);
    Ref<Buffer> b = pool.acquire(n);
    REQUIRE(b);
    CHECK(b->nbytes() == n);
    CHECK(b->capacity_bytes() == BufferPool::rounded_size(n));
    CHECK(b->pooled());
    CHECK(b->device() == forge::Device::cpu());
    CHECK(aligned64(b->data()));
    if (n > 0) {
      std::memset(b->data(), 0x5A, b->capacity_bytes());  // the whole block is usable
      CHECK(static_cast<unsigned char>(b->data()[b->capacity_bytes() - 1]) == 0x5A);
    }
  }
  CHECK(pool.outstanding() == 0);
}

TEST_CASE("buffer_pool: one free list serves every dtype") {
  TestContext ctx;
  std::byte* address = nullptr;
  {
    Tensor h = ctx.empty({1000}, DType::f16);  // 2000 bytes -> a 2048-byte block
    REQUIRE(h.buffer()->capacity_bytes() == 2048);
    address = h.buffer()->data();
  }
  const PoolStats before = ctx.stats();
  REQUIRE(before.cached_blocks >= 1);
  {
    Tensor bytes = ctx.empty({2048}, DType::u8);  // 2048 bytes: the same rounded size
    CHECK(bytes.buffer()->data() == address);
    const PoolStats after = ctx.stats();
    CHECK(after.hits == before.hits + 1);
    CHECK(after.misses == before.misses);
    CHECK(after.system_allocations == before.system_allocations);
  }
  // The same through scratch leases of two element types.
  BufferPool pool;
  std::int8_t* first = nullptr;
  {
    auto halves = pool.scratch<forge::Half>(3000);  // 6000 bytes -> 8192
    first = reinterpret_cast<std::int8_t*>(halves.data());
  }
  {
    auto bytes = pool.scratch<std::int8_t>(8000);  // 8000 bytes -> 8192
    CHECK(bytes.data() == first);
    CHECK(pool.stats().hits == 1);
    CHECK(pool.stats().system_allocations == 1);
  }
  CHECK(pool.outstanding() == 0);
}

// ---------------------------------------------------------------------------
// Fit

TEST_CASE("buffer_pool: same-size release then acquire returns the same address") {
  BufferPool pool;
  Ref<Buffer> a = pool.acquire(1000);
  std::byte* address = a->data();
  a.reset();
  Ref<Buffer> b = pool.acquire(1000);
  CHECK(b->data() == address);
  b.reset();
  // Another request of the same rounded size (1024) gets it too.
  Ref<Buffer> c = pool.acquire(900);
  CHECK(c->data() == address);
  CHECK(c->nbytes() == 900);
  c.reset();
  const PoolStats s = pool.stats();
  CHECK(s.acquires == 3);
  CHECK(s.hits == 2);
  CHECK(s.misses == 1);
  CHECK(s.system_allocations == 1);
}

TEST_CASE("buffer_pool: LIFO within a size") {
  BufferPool pool;
  Ref<Buffer> a = pool.acquire(5000);
  Ref<Buffer> b = pool.acquire(5000);
  std::byte* pa = a->data();
  std::byte* pb = b->data();
  REQUIRE(pa != pb);
  a.reset();  // released first
  b.reset();  // released last: comes back first
  Ref<Buffer> x = pool.acquire(5000);
  Ref<Buffer> y = pool.acquire(5000);
  CHECK(x->data() == pb);
  CHECK(y->data() == pa);
  CHECK(pool.stats().system_allocations == 2);
}

TEST_CASE("buffer_pool: best fit picks the smallest cached block that fits") {
  BufferPool pool;
  Ref<Buffer> b8 = pool.acquire(8 * KiB);
  Ref<Buffer> b16 = pool.acquire(16 * KiB);
  Ref<Buffer> b64 = pool.acquire(64 * KiB);
  std::byte* p16 = b16->data();
  // Release in an order where LIFO alone would pick another block.
  b16.reset();
  b8.reset();
  b64.reset();
  const PoolStats before = pool.stats();
  REQUIRE(before.cached_blocks == 3);
  REQUIRE(before.cached_bytes == 88 * KiB);

  Ref<Buffer> r = pool.acquire(10 * KiB);  // rounds to 12 KiB: 8 KiB is too small, 16 KiB is the best fit
  CHECK(r->data() == p16);
  CHECK(r->capacity_bytes() == 16 * KiB);
  const PoolStats after = pool.stats();
  CHECK(after.hits == before.hits + 1);
  CHECK(after.system_allocations == before.system_allocations);
  CHECK(after.cached_bytes == 72 * KiB);
  CHECK(after.cached_blocks == 2);
  CHECK(after.live_bytes == 16 * KiB);  // live bytes count the block, not the request
}

TEST_CASE("buffer_pool: a cached block more than kMaxOversizeFactor x the request is not handed out") {
  BufferPool pool;
  pool.acquire(64 * KiB).reset();  // one cached 64 KiB block
  REQUIRE(pool.stats().cached_bytes == 64 * KiB);

  SECTION("a 4 KiB request misses instead of pinning the 64 KiB block") {
    Ref<Buffer> r = pool.acquire(4 * KiB);
    CHECK(r->capacity_bytes() == 4 * KiB);
    const PoolStats s = pool.stats();
    CHECK(s.misses == 2);
    CHECK(s.hits == 0);
    CHECK(s.system_allocations == 2);
    CHECK(s.cached_bytes == 64 * KiB);
  }
  SECTION("a request of exactly half the block may take it") {
    Ref<Buffer> r = pool.acquire(32 * KiB);
    CHECK(r->capacity_bytes() == 64 * KiB);
    CHECK(pool.stats().hits == 1);
    CHECK(pool.stats().cached_bytes == 0);
  }
  SECTION("a request just under half the block misses") {
    Ref<Buffer> r = pool.acquire(32 * KiB - 4096);  // rounds to 28 KiB; 64 > 2 * 28
    CHECK(r->capacity_bytes() == 28 * KiB);
    CHECK(pool.stats().hits == 0);
    CHECK(pool.stats().misses == 2);
  }
  SECTION("small sizes: a cached 128-byte block serves 64 bytes but a 256-byte one does not") {
    pool.trim();
    pool.acquire(256).reset();
    Ref<Buffer> r = pool.acquire(64);
    CHECK(r->capacity_bytes() == 64);
    CHECK(pool.stats().hits == 0);
    r.reset();
    pool.trim();
    pool.acquire(128).reset();
    Ref<Buffer> q = pool.acquire(64);
    CHECK(q->capacity_bytes() == 128);
    CHECK(pool.stats().hits == 1);
  }
  CHECK(pool.outstanding() == 0);
}

// ---------------------------------------------------------------------------
// The cache cap

TEST_CASE("buffer_pool: max_cached_bytes from BufferPoolOptions bounds the cache") {
  BufferPool pool(BufferPoolOptions{forge::Device::cpu(), 64 * KiB});
  CHECK(pool.stats().max_cached_bytes == 64 * KiB);

  SECTION("a block alone larger than the cap is freed on release") {
    Ref<Buffer> big = pool.acquire(128 * KiB);
    big.reset();
    const PoolStats s = pool.stats();
    CHECK(s.system_frees == 1);
    CHECK(s.cached_bytes == 0);
    CHECK(s.cached_blocks == 0);
    CHECK(s.outstanding == 0);
    CHECK(s.live_bytes == 0);
  }
  SECTION("a release that would push the cache past the cap is freed") {
    Ref<Buffer> a = pool.acquire(32 * KiB);
    Ref<Buffer> b = pool.acquire(32 * KiB);
    Ref<Buffer> c = pool.acquire(32 * KiB);
    a.reset();
    b.reset();
    CHECK(pool.stats().cached_bytes == 64 * KiB);
    CHECK(pool.stats().system_frees == 0);
    c.reset();  // 96 KiB > 64 KiB: goes back to the system
    const PoolStats s = pool.stats();
    CHECK(s.cached_bytes == 64 * KiB);
    CHECK(s.cached_blocks == 2);
    CHECK(s.system_frees == 1);
    CHECK(s.outstanding == 0);
  }
  SECTION("a block of exactly the cap is cached") {
    pool.acquire(64 * KiB).reset();
    CHECK(pool.stats().cached_bytes == 64 * KiB);
    CHECK(pool.stats().system_frees == 0);
  }
  SECTION("live bytes are not bounded by the cap") {
    std::vector<Ref<Buffer>> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.acquire(64 * KiB));
    CHECK(pool.stats().live_bytes == 256 * KiB);
    CHECK(pool.stats().outstanding == 4);
    held.clear();
    CHECK(pool.stats().cached_bytes <= 64 * KiB);
    CHECK(pool.stats().system_frees == 3);
  }
}

TEST_CASE("buffer_pool: max_cached_bytes from ExecContextOptions bounds the cache") {
  TestContext ctx(context_options(1, {}, 64 * KiB));
  CHECK(ctx.stats().max_cached_bytes == 64 * KiB);
  const PoolStats before = ctx.stats();
  {
    Tensor big = ctx.empty({static_cast<std::int64_t>(32 * KiB)}, DType::f32);  // 128 KiB
    REQUIRE(big.buffer()->capacity_bytes() == 128 * KiB);
  }
  const PoolStats after = ctx.stats();
  CHECK(after.system_frees == before.system_frees + 1);
  CHECK(after.cached_bytes == before.cached_bytes);
}

TEST_CASE("buffer_pool: FORGE_POOL_MAX_CACHED_BYTES sets the default cap of a context") {
  {
    EnvGuard env("FORGE_POOL_MAX_CACHED_BYTES", "65536");
    TestContext ctx;
    CHECK(ctx.stats().max_cached_bytes == 64 * KiB);
    const PoolStats before = ctx.stats();
    {
      Tensor big = ctx.empty({static_cast<std::int64_t>(32 * KiB)}, DType::f32);  // 128 KiB
    }
    CHECK(ctx.stats().system_frees == before.system_frees + 1);
    CHECK(ctx.stats().cached_bytes == before.cached_bytes);
    {
      Tensor small = ctx.empty({1024}, DType::f32);  // 4 KiB: fits under the cap
    }
    CHECK(ctx.stats().system_frees == before.system_frees + 1);
    CHECK(ctx.stats().cached_bytes == before.cached_bytes + 4 * KiB);

    // An explicit option wins over the environment.
    TestContext explicit_ctx(context_options(1, {}, 8 * MiB));
    CHECK(explicit_ctx.stats().max_cached_bytes == 8 * MiB);
  }
  SECTION("an invalid value is refused") {
    EnvGuard env("FORGE_POOL_MAX_CACHED_BYTES", "lots");
    FORGE_REQUIRE_ERROR(invalid_argument, "ExecContext", TestContext ctx);
  }
  // Restored: a new context has the default cap again (unless the runner's
  // environment set one).
  if (std::getenv("FORGE_POOL_MAX_CACHED_BYTES") == nullptr) {
    TestContext ctx;
    CHECK(ctx.stats().max_cached_bytes == BufferPool::kDefaultMaxCachedBytes);
  }
}

TEST_CASE("buffer_pool: set_max_cached_bytes evicts down to the new cap") {
  BufferPool pool;
  {
    std::vector<Ref<Buffer>> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.acquire(16 * KiB));
  }
  REQUIRE(pool.stats().cached_bytes == 64 * KiB);
  REQUIRE(pool.stats().system_frees == 0);

  pool.set_max_cached_bytes(32 * KiB);
  PoolStats s = pool.stats();
  CHECK(s.max_cached_bytes == 32 * KiB);
  CHECK(s.cached_bytes <= 32 * KiB);
  CHECK(s.cached_bytes == s.cached_blocks * 16 * KiB);
  CHECK(s.system_frees == 4 - s.cached_blocks);

  // The new cap also applies to later releases.
  {
    std::vector<Ref<Buffer>> held;
    for (int i = 0; i < 3; ++i) held.push_back(pool.acquire(16 * KiB));
  }
  s = pool.stats();
  CHECK(s.cached_bytes <= 32 * KiB);
  CHECK(s.outstanding == 0);

  pool.set_max_cached_bytes(0);
  CHECK(pool.stats().cached_bytes == 0);
  CHECK(pool.stats().cached_blocks == 0);
  pool.acquire(64).reset();
  CHECK(pool.stats().cached_bytes == 0);
}

TEST_CASE("buffer_pool: trim empties the cache") {
  BufferPool pool;
  {
    std::vector<Ref<Buffer>> held;
    for (std::size_t n : {std::size_t{100}, std::size_t{100}, std::size_t{5000}, 64 * KiB, MiB + 1})
      held.push_back(pool.acquire(n));
    // One outstanding buffer must survive the trim.
  }
  Ref<Buffer> kept = pool.acquire(300);  // a miss: no 512-byte block is cached
  const PoolStats before = pool.stats();
  REQUIRE(before.cached_blocks == 5);
  pool.trim();
  const PoolStats after = pool.stats();
  CHECK(after.cached_bytes == 0);
  CHECK(after.cached_blocks == 0);
  CHECK(after.system_frees == before.system_frees + 5);
  CHECK(after.outstanding == 1);
  CHECK(after.live_bytes == 512);
  std::memset(kept->data(), 1, kept->nbytes());  // still valid
  // After a trim the next acquire is a miss.
  Ref<Buffer> again = pool.acquire(100);
  CHECK(pool.stats().misses == after.misses + 1);
  again.reset();
  kept.reset();
  CHECK(pool.stats().cached_blocks == 2);
  pool.trim();
  CHECK(pool.stats().cached_bytes == 0);
  pool.trim();  // idempotent
  CHECK(pool.stats().system_frees == after.system_frees + 2);
}

// ---------------------------------------------------------------------------
// Stats

TEST_CASE("buffer_pool: stats count acquires, hits, misses, outstanding and live bytes") {
  BufferPool pool;
  PoolStats s = pool.stats();
  CHECK(s.acquires == 0);
  CHECK(s.hits == 0);
  CHECK(s.misses == 0);
  CHECK(s.system_allocations == 0);
  CHECK(s.system_frees == 0);
  CHECK(s.outstanding == 0);
  CHECK(s.live_bytes == 0);
  CHECK(s.peak_live_bytes == 0);
  CHECK(s.max_cached_bytes == BufferPool::kDefaultMaxCachedBytes);

  Ref<Buffer> a = pool.acquire(100);   // 128
  Ref<Buffer> b = pool.acquire(5000);  // 8192
  s = pool.stats();
  CHECK(s.acquires == 2);
  CHECK(s.misses == 2);
  CHECK(s.hits == 0);
  CHECK(s.system_allocations == 2);
  CHECK(s.outstanding == 2);
  CHECK(pool.outstanding() == 2);
  CHECK(s.live_bytes == 128 + 8192);
  CHECK(pool.live_bytes() == 128 + 8192);
  CHECK(s.peak_live_bytes == 128 + 8192);

  a.reset();
  s = pool.stats();
  CHECK(s.outstanding == 1);
  CHECK(s.live_bytes == 8192);
  CHECK(s.peak_live_bytes == 128 + 8192);  // the peak stays
  CHECK(s.cached_bytes == 128);
  CHECK(s.cached_blocks == 1);

  Ref<Buffer> c = pool.acquire(120);  // a hit on the 128-byte block
  s = pool.stats();
  CHECK(s.acquires == 3);
  CHECK(s.hits == 1);
  CHECK(s.misses == 2);
  CHECK(s.system_allocations == 2);
  CHECK(s.outstanding == 2);
  CHECK(s.cached_bytes == 0);
  CHECK(s.live_bytes == 128 + 8192);

  Ref<Buffer> d = pool.acquire(20000);  // 20480, a new peak
  s = pool.stats();
  CHECK(s.live_bytes == 128 + 8192 + 20480);
  CHECK(s.peak_live_bytes == 128 + 8192 + 20480);
  CHECK(s.acquires == s.hits + s.misses);

  b.reset();
  c.reset();
  d.reset();
  s = pool.stats();
  CHECK(s.outstanding == 0);
  CHECK(s.live_bytes == 0);
  CHECK(s.cached_blocks == 3);
  CHECK(s.cached_bytes == 128 + 8192 + 20480);
  CHECK(s.system_frees == 0);
  CHECK(pool.device() == forge::Device::cpu());
}

TEST_CASE("buffer_pool: a context's tensors are counted in its pool's stats") {
  TestContext ctx;
  const PoolStats base = ctx.stats();
  Tensor a = ctx.zeros({10, 10});  // 400 bytes -> 512
  Tensor b = ctx.ones({3000});     // 12000 bytes -> 12288
  PoolStats s = ctx.stats();
  CHECK(s.outstanding == base.outstanding + 2);
  CHECK(s.live_bytes == base.live_bytes + 512 + 12288);
  CHECK(s.acquires == base.acquires + 2);
  Tensor v = a.transpose(0, 1);  // a view: no new buffer
  CHECK(ctx.stats().outstanding == base.outstanding + 2);
  a = Tensor();
  CHECK(ctx.stats().outstanding == base.outstanding + 2);  // the view retains the buffer
  v = Tensor();
  CHECK(ctx.stats().outstanding == base.outstanding + 1);
  b = Tensor();
  CHECK(ctx.stats().outstanding == base.outstanding);
  CHECK(ctx.stats().live_bytes == base.live_bytes);
}

// ---------------------------------------------------------------------------
// Threads

TEST_CASE("buffer_pool: buffers released from 8 threads at once", "[concurrent]") {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  const std::size_t sizes[] = {100, 1000, 5000, 20000};
  BufferPool pool;
  std::vector<std::vector<Ref<Buffer>>> batches(kThreads);
  std::size_t expected_bytes = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const std::size_t n = sizes[static_cast<std::size_t>(i + t) % 4];
      batches[static_cast<std::size_t>(t)].push_back(pool.acquire(n));
      expected_bytes += BufferPool::rounded_size(n);
    }
  }
  REQUIRE(pool.outstanding() == kThreads * kPerThread);
  REQUIRE(pool.stats().live_bytes == expected_bytes);

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([batch = std::move(batches[static_cast<std::size_t>(t)])]() mutable {
      while (!batch.empty()) batch.pop_back();
    });
  for (auto& th : threads) th.join();

  const PoolStats s = pool.stats();
  CHECK(s.outstanding == 0);
  CHECK(pool.outstanding() == 0);
  CHECK(s.live_bytes == 0);
  CHECK(s.cached_blocks == static_cast<std::size_t>(kThreads * kPerThread));
  CHECK(s.cached_bytes == expected_bytes);
  CHECK(s.system_frees == 0);
  CHECK(s.system_allocations == static_cast<std::uint64_t>(kThreads * kPerThread));
  CHECK(s.peak_live_bytes == expected_bytes);

  // Every cached block is intact: acquiring them all again hits every time.
  std::vector<Ref<Buffer>> again;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPerThread; ++i) again.push_back(pool.acquire(sizes[static_cast<std::size_t>(i + t) % 4]));
  CHECK(pool.stats().hits == static_cast<std::uint64_t>(kThreads * kPerThread));
  CHECK(pool.stats().system_allocations == static_cast<std::uint64_t>(kThreads * kPerThread));
  again.clear();
  CHECK(pool.outstanding() == 0);
}

// ---------------------------------------------------------------------------
// Teardown

TEST_CASE("buffer_pool: a buffer may outlive its BufferPool") {
  Ref<Buffer> survivor;
  {
    BufferPool pool;
    pool.acquire(64 * KiB).reset();  // something cached, freed at teardown
    survivor = pool.acquire(5000);
    REQUIRE(pool.outstanding() == 1);
  }
  REQUIRE(survivor);
  std::memset(survivor->data(), 0xC3, survivor->nbytes());
  for (std::size_t i = 0; i < survivor->nbytes(); i += 997)
    CHECK(static_cast<unsigned char>(survivor->data()[i]) == 0xC3);
  Ref<Buffer> alias = survivor;  // more references are fine too
  survivor.reset();
  CHECK(static_cast<unsigned char>(alias->data()[0]) == 0xC3);
  alias.reset();  // the last release frees the block and the pool's core
  SUCCEED("released after the pool died");
}

TEST_CASE("buffer_pool: a tensor may outlive its ExecContext") {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 4.0f, 0.0f, -7.5f};
  Tensor t;
  forge::ExecContext* before = forge::ExecContext::current();
  {
    forge::ExecContext ctx(context_options(1));
    t = ctx.from_vector<float>(values, {2, 3});
    Tensor scratch = ctx.zeros({100});  // released before the context dies
  }
  CHECK(forge::ExecContext::current() == before);
  REQUIRE(t.defined());
  CHECK(t.to_vector<float>() == values);
  CHECK(t.runtime().pool().stats().outstanding == 1);
  // Still writable, and ops on it still run on its (surviving) runtime.
  t.data_ptr<float>()[0] = 10.0f;
  Tensor u = t + t;
  CHECK(u.to_vector<float>()[0] == 20.0f);
  CHECK(t.runtime().pool().stats().outstanding == 2);
  u = Tensor();
  CHECK(t.runtime().pool().stats().outstanding == 1);
  t = Tensor();  // the last release: frees the buffer and the runtime
  SUCCEED("released after the context died");
}

// ---------------------------------------------------------------------------
// Scratch leases

namespace {
template <typename T>
void check_lease_alignment(BufferPool& pool) {
  for (std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{1000}, std::size_t{5001}}) {
    INFO("count = " << count << ", element size = " << sizeof(T));
    const std::int64_t base = pool.outstanding();
    {
      forge::ScratchLease<T> lease = pool.scratch<T>(count);
      REQUIRE(lease.data() != nullptr);
      CHECK(aligned64(lease.data()));
      CHECK(lease.size() == count);
      CHECK(lease.span().size() == count);
      CHECK(pool.outstanding() == base + 1);
      for (std::size_t i = 0; i < count; ++i) lease[i] = static_cast<T>(i % 100);
      CHECK(lease[count - 1] == static_cast<T>((count - 1) % 100));
    }
    CHECK(pool.outstanding() == base);
  }
}
}  // namespace

TEST_CASE("buffer_pool: ScratchLease is 64-byte aligned for every size and type") {
  BufferPool pool;
  check_lease_alignment<float>(pool);
  check_lease_alignment<double>(pool);
  check_lease_alignment<std::int8_t>(pool);
  check_lease_alignment<std::uint16_t>(pool);
  check_lease_alignment<std::int64_t>(pool);
  CHECK(pool.outstanding() == 0);
}

TEST_CASE("buffer_pool: ScratchLease returns its block exactly once") {
  BufferPool pool;
  const PoolStats base = pool.stats();

  SECTION("the destructor returns it") {
    { auto lease = pool.scratch<float>(300); }
    CHECK(pool.outstanding() == base.outstanding);
    CHECK(pool.stats().cached_blocks == base.cached_blocks + 1);
  }
  SECTION("release() then the destructor returns it once") {
    {
      auto lease = pool.scratch<float>(300);
      lease.release();
      CHECK(lease.data() == nullptr);
      CHECK(lease.size() == 0);
      CHECK(pool.outstanding() == base.outstanding);
      CHECK(pool.stats().cached_blocks == base.cached_blocks + 1);
      lease.release();  // again: nothing
    }
    CHECK(pool.outstanding() == base.outstanding);
    CHECK(pool.stats().cached_blocks == base.cached_blocks + 1);
  }
  SECTION("a moved-from lease does not release") {
    {
      auto a = pool.scratch<double>(500);
      double* p = a.data();
      auto b = std::move(a);
      CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
      CHECK(b.data() == p);
      CHECK(b.size() == 500);
      CHECK(pool.outstanding() == base.outstanding + 1);
      { auto dead = std::move(a); }  // destroying moved-from leases releases nothing
      CHECK(pool.outstanding() == base.outstanding + 1);
      forge::ScratchLease<double> c;
      c = std::move(b);
      CHECK(c.data() == p);
      CHECK(pool.outstanding() == base.outstanding + 1);
      c = pool.scratch<double>(10);  // move-assigning over a live lease returns the old block
      CHECK(pool.outstanding() == base.outstanding + 1);
      CHECK(pool.stats().cached_blocks == base.cached_blocks + 1);
    }
    CHECK(pool.outstanding() == base.outstanding);
    CHECK(pool.stats().cached_blocks == base.cached_blocks + 2);
  }
  SECTION("a context's pool hands out leases too") {
    TestContext ctx;
    const std::int64_t before = ctx.pool().outstanding();
    {
      auto lease = ctx.pool().scratch<float>(1234);
      CHECK(aligned64(lease.data()));
      CHECK(ctx.pool().outstanding() == before + 1);
    }
    CHECK(ctx.pool().outstanding() == before);
  }
  SECTION("an element count whose bytes overflow is out_of_memory") {
    FORGE_REQUIRE_ERROR(out_of_memory, "scratch", pool.scratch<double>(SIZE_MAX / 4));
    CHECK(pool.outstanding() == base.outstanding);
  }
}

// ---------------------------------------------------------------------------
// Borrowed buffers

TEST_CASE("buffer_pool: a Buffer::borrow release hook fires exactly once, after the last reference") {
  alignas(64) static unsigned char storage[256];
  int calls = 0;
  {
    Ref<Buffer> b = Buffer::borrow(storage, sizeof storage, forge::Device::cpu(), [&] { ++calls; });
    CHECK(b->data() == reinterpret_cast<std::byte*>(storage));
    CHECK(b->nbytes() == sizeof storage);
    CHECK_FALSE(b->pooled());
    Ref<Buffer> c = b;
    Ref<Buffer> d = c;
    b.reset();
    c.reset();
    CHECK(calls == 0);
    d.reset();
    CHECK(calls == 1);
  }
  CHECK(calls == 1);
  // A borrow without a hook is fine too.
  { Ref<Buffer> e = Buffer::borrow(storage, sizeof storage, forge::Device::cpu(), {}); }
  CHECK(calls == 1);
}

TEST_CASE("buffer_pool: a from_blob release hook fires once, when the last view dies") {
  TestContext ctx;
  std::vector<float> data(12);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  int calls = 0;
  const PoolStats base = ctx.stats();
  {
    Tensor t = ctx.from_blob(data.data(), {3, 4}, DType::f32, [&] { ++calls; });
    CHECK(ctx.stats().outstanding == base.outstanding);  // not pooled
    CHECK_FALSE(t.buffer()->pooled());
    Tensor tr = t.transpose(0, 1);
    Tensor row = t.narrow(0, 1, 2);
    Tensor flat = t.flatten();
    Tensor again = tr.clone_view();
    CHECK(row.to_vector<float>() == std::vector<float>(data.begin() + 4, data.end()));
    t.fill_(2.0f);  // writes reach the caller's memory
    CHECK(data[11] == 2.0f);
    Tensor sum = row + row;  // an op's output is pooled, and does not hold the blob
    t = Tensor();
    tr = Tensor();
    row = Tensor();
    flat = Tensor();
    CHECK(calls == 0);
    again = Tensor();
    CHECK(calls == 1);
    CHECK(sum.to_vector<float>() == std::vector<float>(8, 4.0f));
  }
  CHECK(calls == 1);
  CHECK(ctx.stats().outstanding == base.outstanding);
}

// ---------------------------------------------------------------------------
// Failures

TEST_CASE("buffer_pool: fail_system_allocation_after(1) makes the next miss out_of_memory") {
  BufferPool pool;
  Ref<Buffer> held = pool.acquire(100);
  const PoolStats before = pool.stats();
  pool.fail_system_allocation_after(1);
  FORGE_REQUIRE_ERROR(out_of_memory, "pool", pool.acquire(5000));
  PoolStats s = pool.stats();
  CHECK(s.failed_allocations == before.failed_allocations + 1);
  CHECK(s.outstanding == before.outstanding);
  CHECK(s.live_bytes == before.live_bytes);
  CHECK(s.system_allocations == before.system_allocations);
  // The next acquire works.
  Ref<Buffer> next = pool.acquire(5000);
  CHECK(next);
  CHECK(pool.stats().outstanding == before.outstanding + 1);
  CHECK(pool.stats().failed_allocations == before.failed_allocations + 1);
  next.reset();
  held.reset();
  CHECK(pool.outstanding() == 0);
}

TEST_CASE("buffer_pool: fault injection counts system allocations, not cache hits") {
  BufferPool pool;
  pool.acquire(1000).reset();  // a cached 1 KiB block
  SECTION("a hit does not use up the countdown") {
    pool.fail_system_allocation_after(1);
    Ref<Buffer> hit = pool.acquire(1000);
    CHECK(pool.stats().hits == 1);
    FORGE_REQUIRE_ERROR(out_of_memory, "pool", pool.acquire(1000));  // now a miss
    CHECK(pool.stats().failed_allocations == 1);
  }
  SECTION("after(2): the first miss works, the second fails") {
    pool.fail_system_allocation_after(2);
    Ref<Buffer> first = pool.acquire(10000);
    FORGE_REQUIRE_ERROR(out_of_memory, "pool", pool.acquire(20000));
    CHECK(pool.stats().failed_allocations == 1);
    CHECK(pool.outstanding() == 1);
  }
  SECTION("0 turns it off") {
    pool.fail_system_allocation_after(1);
    pool.fail_system_allocation_after(0);
    Ref<Buffer> fine = pool.acquire(10000);
    CHECK(pool.stats().failed_allocations == 0);
  }
  CHECK(pool.outstanding() == 0);
}

TEST_CASE("buffer_pool: an op whose allocation fails leaks nothing") {
  TestContext ctx;
  Tensor a = ctx.ones({300});
  Tensor b = ctx.full({300}, 2.0, DType::f64);
  ctx.pool().trim();  // every allocation below is a miss
  const PoolStats before = ctx.stats();
  SECTION("the output allocation fails") {
    ctx.pool().fail_system_allocation_after(1);
    FORGE_REQUIRE_ERROR(out_of_memory, "zeros", ctx.zeros({1000}));
  }
  SECTION("a cast temporary succeeds, then the output allocation fails") {
    ctx.pool().fail_system_allocation_after(2);  // a (f32) is cast to f64 first
    FORGE_REQUIRE_ERROR(out_of_memory, "add", a + b);
  }
  const PoolStats after = ctx.stats();
  CHECK(after.outstanding == before.outstanding);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(after.failed_allocations == before.failed_allocations + 1);
  Tensor c = a + b;  // and the next op works
  CHECK(c.to_vector<double>() == std::vector<double>(300, 3.0));
}

TEST_CASE("buffer_pool: a huge request is out_of_memory") {
  BufferPool pool;
  Ref<Buffer> held = pool.acquire(64);
  const PoolStats before = pool.stats();
  FORGE_REQUIRE_ERROR(out_of_memory, "pool", pool.acquire(std::size_t{1} << 60));
  FORGE_REQUIRE_ERROR(out_of_memory, "pool", pool.acquire(SIZE_MAX));
  // Larger than any address space this machine maps: the system refuses.
  FORGE_REQUIRE_ERROR(out_of_memory, "pool", pool.acquire(std::size_t{1} << 50));
  const PoolStats after = pool.stats();
  CHECK(after.outstanding == before.outstanding);
  CHECK(after.live_bytes == before.live_bytes);
  CHECK(after.acquires == before.acquires);
  CHECK(after.failed_allocations >= before.failed_allocations + 1);  // the 2^50 one reached the system
  Ref<Buffer> fine = pool.acquire(4096);
  CHECK(fine);

  TestContext ctx;
  const std::int64_t out = ctx.pool().outstanding();
  FORGE_REQUIRE_ERROR(out_of_memory, "empty", ctx.empty({std::int64_t{1} << 58}, DType::f32));  // 2^60 bytes
  CHECK(ctx.pool().outstanding() == out);
}

// ---------------------------------------------------------------------------
// The steady loop

TEST_CASE("buffer_pool: a steady loop makes no system allocation after its first iteration") {
  TestContext ctx;
  ctx.manual_seed(3);
  const Tensor x = ctx.randn({256, 256});
  const auto xs = x.to_vector<float>();
  auto check_values = [&](const Tensor& y) {
    const auto ys = y.to_vector<float>();
    REQUIRE(ys.size() == xs.size());
    for (std::size_t i = 0; i < xs.size(); i += 101) {
      const float sum = xs[i] + xs[i];
      CHECK(ys[i] == (sum > 0 ? sum : 0.0f) * xs[i]);
    }
  };

  SECTION("the result lives in the loop body") {
    PoolStats warm;
    for (int i = 0; i < 100; ++i) {
      Tensor y = forge::relu(x + x) * x;
      if (i == 0 || i == 99) check_values(y);
      if (i == 0) warm = ctx.stats();
    }
    const PoolStats s = ctx.stats();
    CHECK(s.system_allocations == warm.system_allocations);
    CHECK(s.misses == warm.misses);
    CHECK(s.acquires - warm.acquires == 99 * 3);  // three ops an iteration, all hits
    CHECK(s.hits - warm.hits == 99 * 3);
    CHECK(s.outstanding == 1);  // x
  }
  SECTION("the result is carried across iterations") {
    // Each iteration computes the new y while the previous one is alive. The
    // line before the loop has no previous y, so the loop's first iteration
    // needs one block more than it did; from then on every iteration is the same.
    Tensor y = forge::relu(x + x) * x;
    PoolStats warm;
    for (int i = 0; i < 100; ++i) {
      y = forge::relu(x + x) * x;
      if (i == 0) warm = ctx.stats();
    }
    const PoolStats s = ctx.stats();
    CHECK(s.system_allocations == warm.system_allocations);
    CHECK(s.misses == warm.misses);
    CHECK(s.hits - warm.hits == 99 * 3);
    CHECK(s.outstanding == 2);  // x and y
    check_values(y);
  }
}

// The pool policy is one implementation over a BlockSource (a device's
// allocator): a source that is not the host's gets the same rounding, reuse,
// cap and trim, and its device is the pool's and its buffers'.
namespace {

class CountingSource final : public forge::detail::BlockSource {
 public:
  forge::Device device() const noexcept override { return forge::Device::cuda(3); }
  void* allocate(std::size_t bytes) noexcept override {
    ++allocations;
    live += bytes;
    return std::aligned_alloc(64, bytes);
  }
  void free(void* block, std::size_t bytes) noexcept override {
    ++frees;
    live -= bytes;
    std::free(block);
  }
  int allocations = 0, frees = 0;
  std::size_t live = 0;
};

}  // namespace

TEST_CASE("buffer_pool: the pool policy runs over any block source") {
  auto owned = std::make_unique<CountingSource>();
  const CountingSource* source = owned.get();  // the pool's core owns it from here on
  BufferPool pool(forge::detail::internal, std::move(owned), {.max_cached_bytes = 8192});
  CHECK(pool.device() == forge::Device::cuda(3));
  {
    const Ref<Buffer> a = pool.acquire(100);
    CHECK(a->device() == forge::Device::cuda(3));
    CHECK(a->capacity_bytes() == 128);  // the rounding of every pool
    CHECK(source->allocations == 1);
    CHECK(source->live == 128);
  }
  Ref<Buffer> b = pool.acquire(120);  // the cached block: no new allocation
  CHECK(source->allocations == 1);
  Ref<Buffer> big = pool.acquire(16384);  // larger than the cap: freed on release
  CHECK(big->capacity_bytes() == 16384);
  CHECK(source->allocations == 2);
  big.reset();
  CHECK(source->frees == 1);
  CHECK(source->live == 128);
  b.reset();
  pool.trim();
  CHECK(source->frees == 2);
  CHECK(source->live == 0);
  CHECK(pool.stats().system_allocations == 2);
  CHECK(pool.stats().system_frees == 2);
}

TEST_CASE("buffer_pool: a host pool cannot be asked for another device's memory") {
  FORGE_REQUIRE_ERROR(device, "BufferPool", BufferPool({.device = forge::Device::cuda(0)}));
}
