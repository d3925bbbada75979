// Indexing, loss, attention, mask and shape ops: time per call (and bytes or
// elements per second where a size makes that meaningful), on 1 thread and on
// the machine's threads (Arg 0).
//
//   build/release/benchmarks/nn_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include "forge/forge.h"

namespace {

int threads_of(const benchmark::State& state) {
  return state.range(0) == 0 ? static_cast<int>(std::thread::hardware_concurrency()) : static_cast<int>(state.range(0));
}

forge::Tensor indices(forge::ExecContext& ctx, std::int64_t n, std::int64_t bound) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = (i * 7919) % bound;
  return ctx.from_vector(v);
}

void bytes(benchmark::State& state, const forge::Tensor& out) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(out.nbytes()));
}

void BM_Embedding(benchmark::State& state) {  // 32k x 512 table, 2048 lookups
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor w = ctx.randn({32000, 512});
  const forge::Tensor idx = indices(ctx, 2048, 32000);
  forge::Tensor out;
  for (auto _ : state) out = forge::embedding(w, idx);
  bytes(state, out);
}
BENCHMARK(BM_Embedding)->Arg(1)->Arg(0);

void BM_IndexSelectRows(benchmark::State& state) {
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor x = ctx.randn({4096, 1024});
  const forge::Tensor idx = indices(ctx, 2048, 4096);
  forge::Tensor out;
  for (auto _ : state) out = forge::index_select(x, 0, idx);
  bytes(state, out);
}
BENCHMARK(BM_IndexSelectRows)->Arg(1)->Arg(0);

void BM_GatherLastDim(benchmark::State& state) {
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor x = ctx.randn({1024, 1024});
  const forge::Tensor idx = indices(ctx, 1024 * 256, 1024).reshape({1024, 256});
  forge::Tensor out;
  for (auto _ : state) out = forge::gather(x, 1, idx);
  bytes(state, out);
}
BENCHMARK(BM_GatherLastDim)->Arg(1)->Arg(0);

void BM_CrossEntropy(benchmark::State& state) {  // [512, 32000] logits
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor logits = ctx.randn({512, 32000});
  const forge::Tensor target = indices(ctx, 512, 32000);
  for (auto _ : state) benchmark::DoNotOptimize(forge::cross_entropy(logits, target, {.label_smoothing = 0.1}));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(logits.nbytes()));
}
BENCHMARK(BM_CrossEntropy)->Arg(1)->Arg(0);

void BM_MseLossMean(benchmark::State& state) {
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor a = ctx.randn({1 << 20}), b = ctx.randn({1 << 20});
  for (auto _ : state) benchmark::DoNotOptimize(forge::mse_loss(a, b));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * a.numel());
}
BENCHMARK(BM_MseLossMean)->Arg(1)->Arg(0);

void BM_Dropout(benchmark::State& state) {
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor x = ctx.randn({1 << 20});
  forge::Tensor out;
  for (auto _ : state) out = forge::dropout(x, 0.1);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * x.numel());
}
BENCHMARK(BM_Dropout)->Arg(1)->Arg(0);

void BM_Attention(benchmark::State& state) {  // [1, 8 heads, 128, 64], causal
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor q = ctx.randn({1, 8, 128, 64}), k = ctx.randn({1, 8, 128, 64}), v = ctx.randn({1, 8, 128, 64});
  forge::Tensor out;
  for (auto _ : state) out = forge::scaled_dot_product_attention(q, k, v, forge::Tensor(), true);
  // 2 * L * S * (E + Ev) flops per head
  state.counters["GFLOPS"] = benchmark::Counter(static_cast<double>(state.iterations()) * 8 * 2.0 * 128 * 128 * 128,
                                                benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attention)->Arg(1)->Arg(0);

void BM_CatLastDim(benchmark::State& state) {  // four [256, 1024] along dim 1
  forge::ExecContext ctx({.threads = threads_of(state)});
  const std::vector<forge::Tensor> xs{ctx.randn({256, 1024}), ctx.randn({256, 1024}), ctx.randn({256, 1024}),
                                      ctx.randn({256, 1024})};
  forge::Tensor out;
  for (auto _ : state) out = forge::cat(xs, 1);
  bytes(state, out);
}
BENCHMARK(BM_CatLastDim)->Arg(1)->Arg(0);

void BM_CatSmall(benchmark::State& state) {  // dispatch cost: two [64] tensors
  forge::ExecContext ctx({.threads = 1});
  const std::vector<forge::Tensor> xs{ctx.randn({64}), ctx.randn({64})};
  for (auto _ : state) benchmark::DoNotOptimize(forge::cat(xs));
}
BENCHMARK(BM_CatSmall);

void BM_Repeat(benchmark::State& state) {
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor x = ctx.randn({64, 1024});
  forge::Tensor out;
  for (auto _ : state) out = forge::repeat(x, {8, 2});
  bytes(state, out);
}
BENCHMARK(BM_Repeat)->Arg(1)->Arg(0);

void BM_FlipRows(benchmark::State& state) {
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor x = ctx.randn({2048, 1024});
  forge::Tensor out;
  for (auto _ : state) out = forge::flip(x, {0});
  bytes(state, out);
}
BENCHMARK(BM_FlipRows)->Arg(1)->Arg(0);

void BM_Triu(benchmark::State& state) {
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor x = ctx.randn({2048, 2048});
  forge::Tensor out;
  for (auto _ : state) out = forge::triu(x, 1);
  bytes(state, out);
}
BENCHMARK(BM_Triu)->Arg(1)->Arg(0);

void BM_PadConstant(benchmark::State& state) {  // NCHW image batch, 1 pixel border
  forge::ExecContext ctx({.threads = threads_of(state)});
  const forge::Tensor x = ctx.randn({16, 64, 56, 56});
  forge::Tensor out;
  for (auto _ : state) out = forge::pad(x, {1, 1, 1, 1});
  bytes(state, out);
}
BENCHMARK(BM_PadConstant)->Arg(1)->Arg(0);

}  // namespace

BENCHMARK_MAIN();
