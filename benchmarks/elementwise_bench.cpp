// Elementwise throughput on f32, two threads: a + b, a * b + c, gelu (erf and
// tanh forms) and a row-broadcast bias add, in logical bytes per second (each
// op's inputs read once and its output written once; a * b + c counts both
// ops' traffic, 6 floats per element). Outputs come from the context's pool,
// so each iteration reuses the buffer the previous one released.
//
//   build/release/benchmarks/elementwise_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include "forge/forge.h"

namespace {

constexpr int kThreads = 2;

void set_bytes(benchmark::State& state, std::int64_t floats_per_iteration) {
  state.SetBytesProcessed(state.iterations() * floats_per_iteration * static_cast<std::int64_t>(sizeof(float)));
}

void BM_Add(benchmark::State& state) {
  forge::ExecContext ctx({.threads = kThreads});
  const std::int64_t n = state.range(0);
  const forge::Tensor a = ctx.randn({n}), b = ctx.randn({n});
  benchmark::DoNotOptimize((a + b).buffer()->data());  // the first use of a pooled block faults its pages in
  for (auto _ : state) {
    forge::Tensor c = a + b;
    benchmark::DoNotOptimize(c.buffer()->data());
  }
  set_bytes(state, 3 * n);
}
BENCHMARK(BM_Add)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

void BM_MulAdd(benchmark::State& state) {
  forge::ExecContext ctx({.threads = kThreads});
  const std::int64_t n = state.range(0);
  const forge::Tensor a = ctx.randn({n}), b = ctx.randn({n}), c = ctx.randn({n});
  benchmark::DoNotOptimize((a * b + c).buffer()->data());
  for (auto _ : state) {
    forge::Tensor d = a * b + c;
    benchmark::DoNotOptimize(d.buffer()->data());
  }
  set_bytes(state, 6 * n);
}
BENCHMARK(BM_MulAdd)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

void BM_Gelu(benchmark::State& state) {
  forge::ExecContext ctx({.threads = kThreads});
  const std::int64_t n = state.range(0);
  const forge::Tensor a = ctx.randn({n});
  benchmark::DoNotOptimize(forge::gelu(a).buffer()->data());
  for (auto _ : state) {
    forge::Tensor y = forge::gelu(a);
    benchmark::DoNotOptimize(y.buffer()->data());
  }
  set_bytes(state, 2 * n);
}
BENCHMARK(BM_Gelu)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

void BM_GeluTanh(benchmark::State& state) {
  forge::ExecContext ctx({.threads = kThreads});
  const std::int64_t n = state.range(0);
  const forge::Tensor a = ctx.randn({n});
  benchmark::DoNotOptimize(forge::gelu(a, forge::GeluApproximation::tanh).buffer()->data());
  for (auto _ : state) {
    forge::Tensor y = forge::gelu(a, forge::GeluApproximation::tanh);
    benchmark::DoNotOptimize(y.buffer()->data());
  }
  set_bytes(state, 2 * n);
}
BENCHMARK(BM_GeluTanh)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

// [4096, 1024] + [1024]: every row adds the same bias.
void BM_BiasAdd(benchmark::State& state) {
  forge::ExecContext ctx({.threads = kThreads});
  const forge::Tensor x = ctx.randn({4096, 1024}), bias = ctx.randn({1024});
  benchmark::DoNotOptimize((x + bias).buffer()->data());
  for (auto _ : state) {
    forge::Tensor y = x + bias;
    benchmark::DoNotOptimize(y.buffer()->data());
  }
  set_bytes(state, 2 * 4096 * 1024 + 1024);
}
BENCHMARK(BM_BiasAdd)->UseRealTime();

// Small ops: the per-call cost of an f32 unary and a tensor-scalar op.
void BM_Small(benchmark::State& state) {
  forge::ExecContext ctx({.threads = kThreads});
  const forge::Tensor a = ctx.randn({64});
  for (auto _ : state) {
    forge::Tensor y = forge::sigmoid(a * 0.5);
    benchmark::DoNotOptimize(y.buffer()->data());
  }
}
BENCHMARK(BM_Small);

}  // namespace

BENCHMARK_MAIN();
