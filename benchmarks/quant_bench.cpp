// Packed-weight products on the decode shapes, on a 2-thread context:
// y = x @ W^T for x [M, K] with M = 1, 4, 8, 16, against the f32 GEMM
// (forge::matmul of x by the transposed view of W). Shapes: N = K = 1024,
// and a d_model 256 decoder's layers (N = K = 256; N = 1024, K = 256 for the
// MLP's up projection; N = 256, K = 1024 for its down projection). Each row
// reports GFLOP/s (2 flops per multiply-add) and GB/s of weight bytes read
// (the weights' size in their format, once per call).
//
//   build/release/benchmarks/quant_bench --benchmark_min_time=0.2 --benchmark_repetitions=5 \
//     --benchmark_report_aggregates_only=true
//
// Argument order: {kind, M, N, K}, kind 0 = f32 GEMM (matmul), 1 = f32
// PackedMatrix, 2 = bf16, 3 = q8_0, 4 = q4_0.

#include <benchmark/benchmark.h>

#include "forge/forge.h"
#include "forge/infer/quant.h"

namespace {

using forge::infer::PackedMatrix;
using forge::infer::WeightFormat;

constexpr WeightFormat kFormats[] = {WeightFormat::f32, WeightFormat::f32, WeightFormat::bf16, WeightFormat::q8_0,
                                     WeightFormat::q4_0};

void BM_Linear(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const std::int64_t m = state.range(1), n = state.range(2), k = state.range(3);
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor w = ctx.randn({n, k}).mul(0.05);
  const forge::Tensor x = ctx.randn({m, k});
  const PackedMatrix packed = PackedMatrix::pack(w, kFormats[kind]);
  const forge::Tensor wt = w.t();
  state.SetLabel(kind == 0 ? "f32 GEMM (matmul)" : forge::infer::format_name(kFormats[kind]));
  for (auto _ : state) {
    forge::Tensor y = kind == 0 ? forge::matmul(x, wt) : forge::infer::linear(x, packed);
    benchmark::DoNotOptimize(y.buffer()->data());
  }
  const double calls = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(m * n * k) * calls * 1e-9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(packed.bytes()) * calls * 1e-9, benchmark::Counter::kIsRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  const std::int64_t nk[][2] = {{1024, 1024}, {256, 256}, {1024, 256}, {256, 1024}};
  for (const auto& s : nk)
    for (std::int64_t m : {1, 4, 8, 16})
      for (int kind = 0; kind < 5; ++kind) b->Args({kind, m, s[0], s[1]});
}
BENCHMARK(BM_Linear)->Apply(shapes)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
