// DataLoader throughput by worker threads: batches per second of one epoch
// over Fashion-MNIST-sized data (60000 u8 images 28x28, i64 labels: the
// real files when installed, random bytes otherwise), batch 64, shuffled,
// the transform u8 -> f32 / 255 on the calling thread. "plain" takes the
// batches and does nothing else: the loader's own cost. "with_step" spends
// a fixed ~200 us of the calling thread per batch (a stand-in for a training
// step), which workers can hide the gather behind.
//
//   build/release/benchmarks/data_bench
//
// Arguments: workers (0 = gathered on the calling thread in next()).

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "forge/data/dataloader.h"
#include "forge/forge.h"
#include "forge/io/idx.h"

namespace {

constexpr std::int64_t kImages = 60000, kBatch = 64;

struct Data {
  forge::ExecContext ctx{forge::ExecContextOptions{.threads = 1, .seed = 1}};
  forge::Tensor images, labels;
  Data() {
    const std::string dir = "/usr/share/datasets/fashion-mnist";
    if (std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
      images = forge::io::load_idx(ctx, dir + "/train-images-idx3-ubyte.gz");
      labels = forge::io::load_idx(ctx, dir + "/train-labels-idx1-ubyte.gz").to(forge::DType::i64);
    } else {
      images = (ctx.rand({kImages, 28, 28}) * 255).to(forge::DType::u8);
      labels = (ctx.rand({kImages}) * 10).to(forge::DType::i64);
    }
  }
};

Data& data() {
  static Data d;
  return d;
}

void spin_for(std::chrono::microseconds how_long) {
  const auto until = std::chrono::steady_clock::now() + how_long;
  while (std::chrono::steady_clock::now() < until) {
  }
}

void run(benchmark::State& state, std::chrono::microseconds step) {
  Data& d = data();
  const auto dataset = std::make_shared<forge::data::TensorDataset>(d.images, d.labels);
  forge::data::DataLoader loader(
      d.ctx, dataset,
      {.batch_size = kBatch,
       .seed = 1,
       .transform = [](const forge::Tensor& x) { return x.to(forge::DType::f32) * (1.0 / 255.0); },
       .num_workers = static_cast<int>(state.range(0))});
  std::int64_t batches = 0, epoch = 0;
  for (auto _ : state) {
    for (const forge::data::Batch& b : loader.epoch(epoch++)) {
      benchmark::DoNotOptimize(b.input.data_ptr<float>());
      if (step.count() > 0) spin_for(step);
      ++batches;
    }
  }
  state.counters["batches_per_s"] = benchmark::Counter(static_cast<double>(batches), benchmark::Counter::kIsRate);
}

void BM_DataLoaderPlain(benchmark::State& state) { run(state, std::chrono::microseconds(0)); }
BENCHMARK(BM_DataLoaderPlain)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DataLoaderWithStep(benchmark::State& state) { run(state, std::chrono::microseconds(200)); }
BENCHMARK(BM_DataLoaderWithStep)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
