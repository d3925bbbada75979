// Autograd overhead and a training step, forge alone (the side-by-side with
// libtorch is in libtorch_compare):
// - a chain of 1,000 ops (alternating + and *) on 64 f32 elements that
//   require grad, forward + backward, in ns per op;
// - the MLP 784-512-512-10 (batch 128, ReLU, cross-entropy) forward +
//   backward + Adam, in ms per step, with and without an exec scope.
//
//   build/release/benchmarks/autograd_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "forge/forge.h"

namespace {

constexpr int kChain = 1000;

void BM_GradChain64(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  forge::Tensor x = ctx.full({64}, 1.0).requires_grad_();
  const forge::Tensor c = ctx.full({64}, 1.0001);
  for (auto _ : state) {
    forge::Tensor h = x;
    for (int i = 0; i < kChain; ++i) h = i % 2 ? h * c : h + c;
    h.sum().backward();
    x.zero_grad();
  }
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * kChain,
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_GradChain64);

// The same chain without requires_grad: what recording adds.
void BM_NoGradChain64(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2});
  const forge::Tensor x = ctx.full({64}, 1.0);
  const forge::Tensor c = ctx.full({64}, 1.0001);
  for (auto _ : state) {
    forge::Tensor h = x;
    for (int i = 0; i < kChain; ++i) h = i % 2 ? h * c : h + c;
    benchmark::DoNotOptimize(h.buffer()->data());
  }
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * kChain,
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_NoGradChain64);

struct Mlp {
  std::vector<forge::Tensor> params;
  forge::Tensor x, y;
  explicit Mlp(forge::ExecContext& ctx) : x(ctx.randn({128, 784})) {
    for (auto [out, in] : {std::pair<std::int64_t, std::int64_t>{512, 784}, {512, 512}, {10, 512}}) {
      params.push_back((ctx.randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in)))).requires_grad_());
      params.push_back(ctx.zeros({out}).requires_grad_());
    }
    std::vector<std::int64_t> labels(128);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i * 7 % 10);
    y = ctx.from_vector(labels);
  }
  forge::Tensor loss() const {
    forge::Tensor h = forge::relu(forge::linear(x, params[0], params[1]));
    h = forge::relu(forge::linear(h, params[2], params[3]));
    return forge::cross_entropy(forge::linear(h, params[4], params[5]), y);
  }
};

void BM_MlpStep(benchmark::State& state) {
  const bool scoped = state.range(0) != 0;
  forge::ExecContext ctx({.threads = 2, .seed = 0});
  Mlp mlp(ctx);
  forge::optim::Adam adam(mlp.params, {.lr = 1e-3});
  for (auto _ : state) {
    std::optional<forge::ExecScope> scope;
    if (scoped) scope.emplace(ctx.open_exec_scope());
    mlp.loss().backward();
    adam.step();
    adam.zero_grad();
  }
  state.counters["system_allocations"] = static_cast<double>(ctx.stats().system_allocations);
}
BENCHMARK(BM_MlpStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Adam alone over the MLP's 669,706 parameters: 7 streams of 4 bytes each.
void BM_AdamStep(benchmark::State& state) {
  forge::ExecContext ctx({.threads = 2, .seed = 0});
  Mlp mlp(ctx);
  mlp.loss().backward();
  forge::optim::Adam adam(mlp.params, {.lr = 1e-3});
  std::int64_t n = 0;
  for (const auto& p : mlp.params) n += p.numel();
  for (auto _ : state) adam.step();
  state.SetBytesProcessed(state.iterations() * n * 4 * 7);
}
BENCHMARK(BM_AdamStep);

}  // namespace

BENCHMARK_MAIN();
