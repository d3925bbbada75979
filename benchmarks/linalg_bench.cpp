// Linear algebra and convolution throughput on a 2-thread context, f32:
// square matmul at 256, 1024 and 2048 (fresh output and into a preallocated
// one), linear, batched matmul, and conv2d on a ResNet-sized layer. Counters
// report GFLOP/s (2 flops per multiply-add).
//
//   build/release/benchmarks/linalg_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <ctime>

#include "forge/forge.h"

namespace {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// GFLOP/s against wall time, and GFLOP per CPU-second of all the process's
// threads: the second stays meaningful on a machine shared with other jobs
// (two threads on an idle machine reach about twice it).
class FlopCounter {
 public:
  explicit FlopCounter(benchmark::State& state, double flops_per_iteration)
      : state_(state), flops_(flops_per_iteration), cpu0_(process_cpu_seconds()) {}
  ~FlopCounter() {
    const double total = flops_ * static_cast<double>(state_.iterations()) * 1e-9;
    state_.counters["GFLOP/s"] = benchmark::Counter(total, benchmark::Counter::kIsRate);
    state_.counters["GFLOP/cpu-s"] = total / (process_cpu_seconds() - cpu0_);
  }

 private:
  benchmark::State& state_;
  double flops_;
  double cpu0_;
};

void BM_Matmul(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor a = ctx.randn({n, n}), b = ctx.randn({n, n});
  const FlopCounter counter(state, 2.0 * static_cast<double>(n * n * n));
  for (auto _ : state) {
    forge::Tensor c = forge::matmul(a, b);
    benchmark::DoNotOptimize(c.buffer()->data());
  }
}
BENCHMARK(BM_Matmul)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_MatmulInto(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor a = ctx.randn({n, n}), b = ctx.randn({n, n});
  forge::Tensor c = ctx.empty({n, n});
  const FlopCounter counter(state, 2.0 * static_cast<double>(n * n * n));
  for (auto _ : state) {
    forge::matmul_into(c, a, b);
    benchmark::DoNotOptimize(c.buffer()->data());
  }
}
BENCHMARK(BM_MatmulInto)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Small products: dispatch, allocation and Eigen's coefficient kernels.
void BM_MatmulSmall(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor a = ctx.randn({n, n}), b = ctx.randn({n, n});
  const FlopCounter counter(state, 2.0 * static_cast<double>(n * n * n));
  for (auto _ : state) {
    forge::Tensor c = forge::matmul(a, b);
    benchmark::DoNotOptimize(c.buffer()->data());
  }
}
BENCHMARK(BM_MatmulSmall)->Arg(4)->Arg(16)->Arg(64)->UseRealTime();

// A transposed right operand, read through its strides.
void BM_MatmulTransposed(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor a = ctx.randn({n, n}), b = ctx.randn({n, n}).t();
  const FlopCounter counter(state, 2.0 * static_cast<double>(n * n * n));
  for (auto _ : state) {
    forge::Tensor c = forge::matmul(a, b);
    benchmark::DoNotOptimize(c.buffer()->data());
  }
}
BENCHMARK(BM_MatmulTransposed)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_MatmulF64(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor a = ctx.randn({n, n}, forge::DType::f64), b = ctx.randn({n, n}, forge::DType::f64);
  const FlopCounter counter(state, 2.0 * static_cast<double>(n * n * n));
  for (auto _ : state) {
    forge::Tensor c = forge::matmul(a, b);
    benchmark::DoNotOptimize(c.buffer()->data());
  }
}
BENCHMARK(BM_MatmulF64)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_MatmulHalf(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto dtype = state.range(1) ? forge::DType::bf16 : forge::DType::f16;
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor a = ctx.randn({n, n}, dtype), b = ctx.randn({n, n}, dtype);
  const FlopCounter counter(state, 2.0 * static_cast<double>(n * n * n));
  for (auto _ : state) {
    forge::Tensor c = forge::matmul(a, b);
    benchmark::DoNotOptimize(c.buffer()->data());
  }
}
BENCHMARK(BM_MatmulHalf)->Args({1024, 0})->Args({1024, 1})->Unit(benchmark::kMicrosecond)->UseRealTime();

// [64 batches of 128 x 64] x [64 x 128]: batches spread over the threads.
void BM_Bmm(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor a = ctx.randn({64, 128, 64}), b = ctx.randn({64, 64, 128});
  const FlopCounter counter(state, 2.0 * 64 * 128 * 64 * 128);
  for (auto _ : state) {
    forge::Tensor c = forge::bmm(a, b);
    benchmark::DoNotOptimize(c.buffer()->data());
  }
}
BENCHMARK(BM_Bmm)->Unit(benchmark::kMicrosecond)->UseRealTime();

// x [32, 128, 512] through weight [2048, 512] (transposed in place) plus bias.
void BM_Linear(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor x = ctx.randn({32, 128, 512}), w = ctx.randn({2048, 512}), bias = ctx.randn({2048});
  const FlopCounter counter(state, 2.0 * 32 * 128 * 512 * 2048);
  for (auto _ : state) {
    forge::Tensor y = forge::linear(x, w, bias);
    benchmark::DoNotOptimize(y.buffer()->data());
  }
}
BENCHMARK(BM_Linear)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Conv2d(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor x = ctx.randn({32, 64, 56, 56}), w = ctx.randn({64, 64, 3, 3});
  forge::Conv2dOptions options;
  options.padding = {1, 1};
  const FlopCounter counter(state, 2.0 * 32 * 64 * 56 * 56 * 64 * 9);
  for (auto _ : state) {
    forge::Tensor y = forge::conv2d(x, w, forge::Tensor(), options);
    benchmark::DoNotOptimize(y.buffer()->data());
  }
}
BENCHMARK(BM_Conv2d)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MaxPool2d(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor x = ctx.randn({32, 64, 112, 112});
  forge::Pool2dOptions options;
  options.kernel = {3, 3};
  options.stride = {2, 2};
  options.padding = {1, 1};
  for (auto _ : state) {
    forge::Tensor y = forge::max_pool2d(x, options);
    benchmark::DoNotOptimize(y.buffer()->data());
  }
}
BENCHMARK(BM_MaxPool2d)->Unit(benchmark::kMillisecond)->UseRealTime();

// The Fashion-MNIST CNN's pools (2x2, stride 2, batch 64): forward, and
// forward + backward. Arg: the input's channels
// (32 at 28x28, 64 at 14x14).
void BM_MaxPool2dTrain(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const std::int64_t c = state.range(0), hw = c == 32 ? 28 : 14;
  const bool backward = state.range(1) != 0;
  forge::Tensor x = ctx.randn({64, c, hw, hw});
  if (backward) x.requires_grad_();
  forge::Pool2dOptions options;
  options.kernel = {2, 2};
  options.stride = {2, 2};
  const forge::Tensor dy = ctx.ones({64, c, hw / 2, hw / 2});  // a contiguous upstream gradient
  for (auto _ : state) {
    forge::Tensor y = forge::max_pool2d(x, options);
    if (backward) {
      y.backward(dy);
      x.zero_grad();
    }
    benchmark::DoNotOptimize(y.buffer()->data());
  }
  state.SetBytesProcessed(state.iterations() * x.numel() * 4 * (backward ? 3 : 1));
}
BENCHMARK(BM_MaxPool2dTrain)->Args({32, 0})->Args({32, 1})->Args({64, 0})->Args({64, 1})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
