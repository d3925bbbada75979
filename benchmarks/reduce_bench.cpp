// Reductions and fused normalizations, f32, in the context's threads (the
// argument). GB/s counts the logical bytes (read + written), the figure the
// targets name: sum of 16M floats >= 50 GB/s; softmax and layer_norm on
// [4096, 1024] >= 50 GB/s (libtorch 1.13 does softmax there at ~1.2 GB/s).
// The _into forms run, so the figures are the kernels' and not the pool's.
// topk / sort / multinomial: the sampling step of a decode loop (below).
//
//   build/release/benchmarks/reduce_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include "forge/forge.h"

namespace {

void set_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] = benchmark::Counter(bytes_per_iteration * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}

// The machine's read roofline for one thread: a plain SIMD loop over the same
// 64 MB, to read the figures below against when the machine is shared.
void BM_ReadRoofline16M(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 1});
  const std::int64_t n = std::int64_t{1} << 24;
  const forge::Tensor x = ctx.rand({n});
  const float* p = x.data_ptr<float>();
  using V = float __attribute__((vector_size(32)));
  for (auto _ : state) {
    V a[4] = {};
    for (std::int64_t i = 0; i < n; i += 32)
      for (int u = 0; u < 4; ++u) {
        V v;
        __builtin_memcpy(&v, p + i + 8 * u, sizeof(V));
        a[u] += v;
      }
    V t = a[0] + a[1] + a[2] + a[3];
    benchmark::DoNotOptimize(t);
  }
  set_bytes(state, static_cast<double>(n) * 4);
}
BENCHMARK(BM_ReadRoofline16M)->UseRealTime();

void BM_Sum16M(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const std::int64_t n = std::int64_t{1} << 24;
  const forge::Tensor x = ctx.rand({n});
  forge::Tensor out = ctx.zeros({});
  for (auto _ : state) {
    forge::sum_into(out, x);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, static_cast<double>(n) * 4);
}
BENCHMARK(BM_Sum16M)->Arg(1)->Arg(2)->UseRealTime();

// Sum over the outer axis of [4096, 4096]: whole rows accumulate into the output.
void BM_SumDim0(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const forge::Tensor x = ctx.rand({4096, 4096});
  forge::Tensor out = ctx.zeros({4096});
  for (auto _ : state) {
    forge::sum_into(out, x, 0);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, 4096.0 * 4096 * 4);
}
BENCHMARK(BM_SumDim0)->Arg(2)->UseRealTime();

// Sum over the inner axis of [4096, 4096]: one contiguous row per output.
void BM_SumDim1(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const forge::Tensor x = ctx.rand({4096, 4096});
  forge::Tensor out = ctx.zeros({4096});
  for (auto _ : state) {
    forge::sum_into(out, x, 1);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, 4096.0 * 4096 * 4);
}
BENCHMARK(BM_SumDim1)->Arg(2)->UseRealTime();

void BM_Amax16M(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const std::int64_t n = std::int64_t{1} << 24;
  const forge::Tensor x = ctx.rand({n});
  forge::Tensor out = ctx.zeros({});
  for (auto _ : state) {
    forge::amax_into(out, x);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, static_cast<double>(n) * 4);
}
BENCHMARK(BM_Amax16M)->Arg(2)->UseRealTime();

void BM_Softmax(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const forge::Tensor x = ctx.randn({4096, 1024});
  forge::Tensor out = ctx.zeros({4096, 1024});
  for (auto _ : state) {
    forge::softmax_into(out, x, 1);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, 4096.0 * 1024 * 4 * 2);
}
BENCHMARK(BM_Softmax)->Arg(1)->Arg(2)->UseRealTime();

void BM_LogSoftmax(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const forge::Tensor x = ctx.randn({4096, 1024});
  forge::Tensor out = ctx.zeros({4096, 1024});
  for (auto _ : state) {
    forge::log_softmax_into(out, x, 1);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, 4096.0 * 1024 * 4 * 2);
}
BENCHMARK(BM_LogSoftmax)->Arg(2)->UseRealTime();

// softmax over dim 0 of [1024, 4096]: the column formulation.
void BM_SoftmaxDim0(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const forge::Tensor x = ctx.randn({1024, 4096});
  forge::Tensor out = ctx.zeros({1024, 4096});
  for (auto _ : state) {
    forge::softmax_into(out, x, 0);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, 4096.0 * 1024 * 4 * 2);
}
BENCHMARK(BM_SoftmaxDim0)->Arg(2)->UseRealTime();

void BM_LayerNorm(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const forge::Tensor x = ctx.randn({4096, 1024});
  const forge::Tensor w = ctx.rand({1024}), b = ctx.rand({1024});
  forge::Tensor out = ctx.zeros({4096, 1024});
  for (auto _ : state) {
    forge::layer_norm_into(out, x, {1024}, w, b);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, 4096.0 * 1024 * 4 * 2);
}
BENCHMARK(BM_LayerNorm)->Arg(1)->Arg(2)->UseRealTime();

void BM_RmsNorm(benchmark::State& state) {
  forge::ExecContext ctx({.threads = static_cast<int>(state.range(0))});
  const forge::Tensor x = ctx.randn({4096, 1024});
  const forge::Tensor w = ctx.rand({1024});
  forge::Tensor out = ctx.zeros({4096, 1024});
  for (auto _ : state) {
    forge::rms_norm_into(out, x, {1024}, w);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  set_bytes(state, 4096.0 * 1024 * 4 * 2);
}
BENCHMARK(BM_RmsNorm)->Arg(2)->UseRealTime();

// Small-op overhead: sum of 64 floats, end to end (allocation included).
void BM_Sum64(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor x = ctx.rand({64});
  for (auto _ : state) {
    forge::Tensor s = forge::sum(x);
    benchmark::DoNotOptimize(s.buffer()->data());
  }
}
BENCHMARK(BM_Sum64);

void BM_Softmax64(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor x = ctx.rand({64});
  for (auto _ : state) {
    forge::Tensor s = forge::softmax(x, 0);
    benchmark::DoNotOptimize(s.buffer()->data());
  }
}
BENCHMARK(BM_Softmax64);

// The sampling step of a decode loop: topk and multinomial over logits-sized
// rows, [1, 32000] (one sequence, a Llama-sized vocabulary) and [8, 512]
// (a batch, a small vocabulary), through the _into forms (the kernels'
// figures, not the pool's). The target: microseconds per call.
void BM_Topk(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const std::int64_t rows = state.range(0), n = state.range(1), k = state.range(2);
  const forge::Tensor x = ctx.randn({rows, n});
  forge::Tensor values = ctx.zeros({rows, k}), indices = ctx.zeros({rows, k}, forge::DType::i64);
  for (auto _ : state) {
    forge::topk_into(values, indices, x, k);
    benchmark::DoNotOptimize(indices.buffer()->data());
  }
  state.SetItemsProcessed(state.iterations() * rows * n);
}
BENCHMARK(BM_Topk)->Args({1, 32000, 50})->Args({8, 512, 50})->Args({1, 32000, 1000});

void BM_SortRow(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const std::int64_t rows = state.range(0), n = state.range(1);
  const forge::Tensor x = ctx.randn({rows, n});
  forge::Tensor values = ctx.zeros({rows, n}), indices = ctx.zeros({rows, n}, forge::DType::i64);
  for (auto _ : state) {
    forge::sort_into(values, indices, x, -1, true);
    benchmark::DoNotOptimize(indices.buffer()->data());
  }
  state.SetItemsProcessed(state.iterations() * rows * n);
}
BENCHMARK(BM_SortRow)->Args({1, 32000})->Args({8, 512});

void BM_Multinomial(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const std::int64_t rows = state.range(0), n = state.range(1), samples = state.range(2);
  const forge::Tensor probs = forge::softmax(ctx.randn({rows, n}), 1);
  forge::Tensor out = ctx.zeros({rows, samples}, forge::DType::i64);
  for (auto _ : state) {
    forge::multinomial_into(out, probs, samples, false);
    benchmark::DoNotOptimize(out.buffer()->data());
  }
  state.SetItemsProcessed(state.iterations() * rows * n);
}
BENCHMARK(BM_Multinomial)->Args({1, 32000, 1})->Args({8, 512, 1})->Args({8, 512, 16});

}  // namespace

BENCHMARK_MAIN();
