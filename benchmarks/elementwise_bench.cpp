// Elementwise throughput on f32, two threads: a + b, a * b + c, the vector
// activations (tanh, sigmoid, silu, gelu in its erf and tanh forms, and the
// gelu/silu gradient kernels) and a row-broadcast bias add, in logical bytes
// per second (each op's inputs read once and its output written once; a * b + c
// counts both ops' traffic, 6 floats per element). The activations run on
// randn inputs and, under /wide, on randn * 6, where most lanes lie in the
// tails (|tanh| near 1, sigmoid near 0 or 1). Outputs come from the context's
// pool, so each iteration reuses the buffer the previous one released.
//
//   build/release/benchmarks/elementwise_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include "backend/kernels.h"
#include "core/tensor_internal.h"
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

// randn({n}), times 6 when the benchmark's second argument is 1 (/wide).
forge::Tensor activation_input(forge::ExecContext& ctx, const benchmark::State& state) {
  const forge::Tensor a = ctx.randn({state.range(0)});
  return state.range(1) != 0 ? a * 6.0 : a;
}

template <typename Op>
void unary_bench(benchmark::State& state, Op op) {
  forge::ExecContext ctx({.threads = kThreads});
  const forge::Tensor a = activation_input(ctx, state);
  benchmark::DoNotOptimize(op(a).buffer()->data());
  for (auto _ : state) {
    forge::Tensor y = op(a);
    benchmark::DoNotOptimize(y.buffer()->data());
  }
  set_bytes(state, 2 * state.range(0));
}

void BM_Tanh(benchmark::State& state) {
  unary_bench(state, [](const forge::Tensor& a) { return forge::tanh(a); });
}
void BM_Sigmoid(benchmark::State& state) {
  unary_bench(state, [](const forge::Tensor& a) { return forge::sigmoid(a); });
}
void BM_Silu(benchmark::State& state) {
  unary_bench(state, [](const forge::Tensor& a) { return forge::silu(a); });
}
void BM_Gelu(benchmark::State& state) {
  unary_bench(state, [](const forge::Tensor& a) { return forge::gelu(a); });
}
void BM_GeluTanh(benchmark::State& state) {
  unary_bench(state, [](const forge::Tensor& a) { return forge::gelu(a, forge::GeluApproximation::tanh); });
}

// The fused gradient kernels the activations' VJPs run (from the table of
// dx's device, as the rules call them): g and x in, dx out.
template <forge::backend::UnaryBackward Op>
void BM_Backward(benchmark::State& state) {
  forge::ExecContext ctx({.threads = kThreads});
  const std::int64_t n = state.range(0);
  const forge::Tensor x = activation_input(ctx, state), g = ctx.randn({n});
  forge::Tensor dx = ctx.empty({n});
  forge::detail::DeviceRuntime& dev = forge::detail::device_runtime(dx);
  const auto kernel = dev.kernels().elementwise.unary_backward_flat.get("backward", forge::DType::f32, dev);
  for (auto _ : state) {
    kernel(dev, Op, forge::DType::f32, n, forge::detail::first_element(dx), forge::detail::first_element(g),
           forge::detail::first_element(x));
    benchmark::DoNotOptimize(dx.buffer()->data());
  }
  set_bytes(state, 3 * n);
}

void activation_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "wide"})->Args({1 << 20, 0})->Args({16 << 20, 0})->Args({1 << 20, 1})->UseRealTime();
}
BENCHMARK(BM_Tanh)->Apply(activation_args);
BENCHMARK(BM_Sigmoid)->Apply(activation_args);
BENCHMARK(BM_Silu)->Apply(activation_args);
BENCHMARK(BM_Gelu)->Apply(activation_args);
BENCHMARK(BM_GeluTanh)->Apply(activation_args);
BENCHMARK(BM_Backward<forge::backend::UnaryBackward::gelu>)->Name("BM_GeluBackward")->Apply(activation_args);
BENCHMARK(BM_Backward<forge::backend::UnaryBackward::gelu_tanh>)->Name("BM_GeluTanhBackward")->Apply(activation_args);
BENCHMARK(BM_Backward<forge::backend::UnaryBackward::silu>)->Name("BM_SiluBackward")->Apply(activation_args);

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
