// What a buffer costs: a cached BufferPool acquire + release, beside malloc/free
// and tbb::scalable_malloc/free of the same sizes, each also with the first
// touch of the new pages (one write per 4 KiB page: what a fresh tensor really
// costs before a kernel has done any work).
//
//   build/release/benchmarks/pool_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>
#include <tbb/scalable_allocator.h>

#include <cstdlib>

#include "forge/forge.h"

namespace {

constexpr std::size_t kPageBytes = 4096;

void touch_pages(void* p, std::size_t bytes) {
  auto* c = static_cast<volatile char*>(p);
  for (std::size_t i = 0; i < bytes; i += kPageBytes) c[i] = 1;
}

void sizes(benchmark::internal::Benchmark* b) {
  for (long n : {256L, 64L << 10, 4L << 20, 64L << 20}) b->Arg(n);
}

// A cached block: acquire hits the free list, release puts it back. No page is touched.
void BM_PoolCached(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  forge::BufferPool pool;
  pool.acquire(n).reset();  // warm: the block is now cached
  for (auto _ : state) {
    forge::Ref<forge::Buffer> b = pool.acquire(n);
    benchmark::DoNotOptimize(b->data());
  }
  state.counters["system_allocations"] = static_cast<double>(pool.stats().system_allocations);
}
BENCHMARK(BM_PoolCached)->Apply(sizes);

// The same, writing one byte per page of the recycled block: the pages are
// already committed, so this is cache traffic, not page faults.
void BM_PoolCachedTouch(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  forge::BufferPool pool;
  pool.acquire(n).reset();
  for (auto _ : state) {
    forge::Ref<forge::Buffer> b = pool.acquire(n);
    touch_pages(b->data(), n);
  }
}
BENCHMARK(BM_PoolCachedTouch)->Apply(sizes);

// A pool that caches nothing: every acquire is a fresh system block.
void BM_PoolUncachedTouch(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  forge::BufferPool pool({forge::Device::cpu(), 0});
  for (auto _ : state) {
    forge::Ref<forge::Buffer> b = pool.acquire(n);
    touch_pages(b->data(), n);
  }
}
BENCHMARK(BM_PoolUncachedTouch)->Apply(sizes);

void BM_Malloc(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(n);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_Malloc)->Apply(sizes);

void BM_MallocTouch(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(n);
    touch_pages(p, n);
    std::free(p);
  }
}
BENCHMARK(BM_MallocTouch)->Apply(sizes);

void BM_ScalableMalloc(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = scalable_malloc(n);
    benchmark::DoNotOptimize(p);
    scalable_free(p);
  }
}
BENCHMARK(BM_ScalableMalloc)->Apply(sizes);

void BM_ScalableMallocTouch(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = scalable_malloc(n);
    touch_pages(p, n);
    scalable_free(p);
  }
}
BENCHMARK(BM_ScalableMallocTouch)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
