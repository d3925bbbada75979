// Dispatch cost: a chain of 1,000 adds on 64-element f32 tensors, in ns per op
// (validation, pool allocation, the kernel, releasing the previous value),
// with and without an exec scope; and 1,000 small randn calls.
//
//   build/release/benchmarks/dispatch_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include "forge/forge.h"

namespace {

constexpr int kChain = 1000;

// Reports the time of one op of the chain.
void report_ns_per_op(benchmark::State& state) {
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * kChain,
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_AddChain64(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const forge::Tensor c = ctx.full({64}, 1e-3);
  for (auto _ : state) {
    forge::Tensor x = ctx.zeros({64});
    for (int i = 0; i < kChain; ++i) x = forge::add(x, c);
    benchmark::DoNotOptimize(x.buffer()->data());
  }
  report_ns_per_op(state);
  state.counters["system_allocations"] = static_cast<double>(ctx.stats().system_allocations);
}
BENCHMARK(BM_AddChain64)->Arg(1)->Arg(2);

// The same chain inside an exec scope: every intermediate is held until close.
void BM_AddChain64Scoped(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor c = ctx.full({64}, 1e-3);
  for (auto _ : state) {
    auto scope = ctx.open_exec_scope();
    forge::Tensor x = ctx.zeros({64});
    for (int i = 0; i < kChain; ++i) x = forge::add(x, c);
    benchmark::DoNotOptimize(x.buffer()->data());
  }
  report_ns_per_op(state);
}
BENCHMARK(BM_AddChain64Scoped);

// Writing into a caller's tensor: no allocation at all.
void BM_AddInto64(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor c = ctx.full({64}, 1e-3);
  forge::Tensor x = ctx.zeros({64});
  for (auto _ : state) {
    for (int i = 0; i < kChain; ++i) forge::add_into(x, x, c);
    benchmark::DoNotOptimize(x.buffer()->data());
  }
  report_ns_per_op(state);
}
BENCHMARK(BM_AddInto64);

// randn of 64 elements, 1,000 times: what leasing the RNG per call costs
// beside the draw itself (Note [One driving thread]).
void BM_Randn64(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  for (auto _ : state) {
    for (int i = 0; i < kChain; ++i) benchmark::DoNotOptimize(ctx.randn({64}).buffer()->data());
  }
  report_ns_per_op(state);
}
BENCHMARK(BM_Randn64);

}  // namespace

BENCHMARK_MAIN();
