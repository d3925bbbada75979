// Soak: a long training run that samples the process's resident set and the
// pool's stats, to show that memory is flat once the loop is warm.
//
// Each step: a DataLoader batch (Fashion-MNIST when installed, otherwise a
// random dataset of the same shape), forward, cross-entropy, backward,
// clip_grad_norm_, AdamW, a cosine schedule, all inside an exec scope. Every
// --checkpoint-every steps the model and the optimizer are saved as
// safetensors and loaded back into a second model and optimizer (the loads
// map the files), so that files, mappings and state dicts churn too.
//
// After --warmup steps (which should include the first checkpoint: its first
// save and load size their buffers), the samples are fitted by least squares: the slopes
// of RSS and of the pool's cached bytes, in KiB per 1,000 steps, are the
// figures; the run also reports the range of each and the pool's system
// allocations after the warm-up.
//
//   build/release/benchmarks/soak [--steps 20000] [--model mlp|cnn] [--batch 64]
//       [--threads 2] [--sample-every 100] [--warmup 2000] [--checkpoint-every 1000]
//       [--data DIR] [--csv FILE]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/io/idx.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::int64_t steps = 20000, batch = 64, sample_every = 100, warmup = 2000, checkpoint_every = 1000;
  int threads = 2;
  std::string model = "mlp", data = "/usr/share/datasets/fashion-mnist", csv;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    auto number = [&] { return value ? std::atoll(value) : 0LL; };
    if (arg == "--steps")
      f.steps = number();
    else if (arg == "--batch")
      f.batch = number();
    else if (arg == "--threads")
      f.threads = static_cast<int>(number());
    else if (arg == "--sample-every")
      f.sample_every = number();
    else if (arg == "--warmup")
      f.warmup = number();
    else if (arg == "--checkpoint-every")
      f.checkpoint_every = number();
    else if (arg == "--model" && value)
      f.model = value;
    else if (arg == "--data" && value)
      f.data = value;
    else if (arg == "--csv" && value)
      f.csv = value;
    else {
      std::fprintf(stderr, "soak: unknown or incomplete flag %s\n", arg.c_str());
      std::exit(2);
    }
    ++i;
  }
  if (f.steps <= 0 || f.batch <= 0 || f.sample_every <= 0 || f.warmup < 0 || f.warmup >= f.steps ||
      (f.model != "mlp" && f.model != "cnn")) {
    std::fprintf(stderr, "soak: need steps > warmup >= 0, batch > 0, sample-every > 0, model mlp|cnn\n");
    std::exit(2);
  }
  if (f.checkpoint_every > 0 && f.warmup < f.checkpoint_every)
    std::fprintf(stderr,
                 "soak: the warm-up ends before the first checkpoint, whose first save and load "
                 "allocate; expect them in the figures\n");
  return f;
}

std::shared_ptr<forge::nn::Sequential> make_model(forge::ExecContext& ctx, const std::string& kind) {
  namespace nn = forge::nn;
  auto net = std::make_shared<nn::Sequential>();
  if (kind == "cnn") {
    net->push_back(std::make_shared<nn::Conv2d>(ctx, 1, 32, 3, nn::Conv2dOptions{.padding = 1}));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::MaxPool2d>(2));
    net->push_back(std::make_shared<nn::Conv2d>(ctx, 32, 64, 3, nn::Conv2dOptions{.padding = 1}));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::MaxPool2d>(2));
    net->push_back(std::make_shared<nn::Flatten>());
    net->push_back(std::make_shared<nn::Linear>(ctx, 3136, 128));
  } else {
    net->push_back(std::make_shared<nn::Flatten>());
    net->push_back(std::make_shared<nn::Linear>(ctx, 784, 512));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(ctx, 512, 128));
  }
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(ctx, 128, 10));
  return net;
}

// Fashion-MNIST's training split when it can be read, else 10,000 random
// images with random labels (the loop's memory behaviour is the same).
std::pair<forge::Tensor, forge::Tensor> load_data(forge::ExecContext& ctx, const std::string& dir, bool& real) {
  try {
    forge::Tensor images = forge::io::load_idx(ctx, dir + "/train-images-idx3-ubyte.gz");
    forge::Tensor labels = forge::io::load_idx(ctx, dir + "/train-labels-idx1-ubyte.gz").to(forge::DType::i64);
    real = true;
    return {images, labels};
  } catch (const forge::Error& e) {
    std::fprintf(stderr, "soak: %s; training on random data instead\n", e.what());
  }
  real = false;
  forge::Tensor images = (ctx.rand({10000, 28, 28}) * 255.0).to(forge::DType::u8);
  forge::Tensor labels = (ctx.rand({10000}) * 10.0).to(forge::DType::i64);
  return {images, labels};
}

forge::Tensor to_input(const forge::Tensor& pixels) {
  return (pixels.to(forge::DType::f32) * (1.0 / 255.0) - 0.5).unsqueeze(1);
}

double resident_kib() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1024.0;
}

struct Sample {
  std::int64_t step;
  double rss_kib, cached_kib, live_kib;
  std::int64_t outstanding;
  std::uint64_t system_allocations;
};

// Least-squares slope of y over x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  }
  const double d = n * sxx - sx * sx;
  return d != 0 ? (n * sxy - sx * sy) / d : 0.0;
}

void draw_progress(std::int64_t step, std::int64_t steps, double loss, double rss_mib, double seconds) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * step / steps);
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<std::size_t>(kWidth - filled - 1), ' ');
  const double eta = seconds / static_cast<double>(step) * static_cast<double>(steps - step);
  std::printf("\r[%s] %lld/%lld  loss %.4f  RSS %.1f MiB  %.0f steps/s  ETA %.0f s   ", bar.c_str(),
              static_cast<long long>(step), static_cast<long long>(steps), loss, rss_mib,
              static_cast<double>(step) / seconds, eta);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse(argc, argv);
  forge::ExecContext ctx({.threads = flags.threads, .seed = 0});
  bool real = false;
  auto [images, labels] = load_data(ctx, flags.data, real);
  auto model = make_model(ctx, flags.model);
  auto shadow = make_model(ctx, flags.model);  // what checkpoints are loaded into
  forge::optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  forge::optim::AdamW shadow_opt(shadow->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  forge::optim::CosineWithWarmup schedule(opt, flags.steps / 20, flags.steps, 1e-5);
  forge::data::DataLoader loader(ctx, images, labels,
                                 {.batch_size = flags.batch, .drop_last = true, .seed = 1, .transform = to_input});
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("forge_soak_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);

  std::printf("soak: %s, batch %lld, %d threads, %lld steps (%s data, %lld batches per epoch), sample every %lld\n",
              flags.model.c_str(), static_cast<long long>(flags.batch), ctx.threads(),
              static_cast<long long>(flags.steps), real ? "Fashion-MNIST" : "random",
              static_cast<long long>(loader.size()), static_cast<long long>(flags.sample_every));
  std::vector<Sample> samples;
  const auto start = Clock::now();
  auto last_draw = start;
  std::int64_t step = 0, checkpoints = 0;
  float loss_value = 0;
  for (std::int64_t epoch = 0; step < flags.steps; ++epoch) {
    for (const forge::data::Batch& batch : loader.epoch(epoch)) {
      {
        auto scope = ctx.open_exec_scope();
        forge::Tensor loss = forge::cross_entropy(model->forward(batch.input), batch.target);
        loss.backward();
        forge::optim::clip_grad_norm_(model->parameters(), 5.0);
        opt.step();
        opt.zero_grad();
        schedule.step();
        loss_value = loss.item<float>();
      }
      ++step;
      if (flags.checkpoint_every > 0 && step % flags.checkpoint_every == 0) {
        forge::io::save_safetensors((dir / "model.safetensors").string(), model->state_dict());
        forge::io::save_safetensors((dir / "optim.safetensors").string(), opt.state_dict());
        shadow->load_state_dict(forge::io::load_safetensors(ctx, (dir / "model.safetensors").string()));
        shadow_opt.load_state_dict(forge::io::load_safetensors(ctx, (dir / "optim.safetensors").string()));
        ++checkpoints;
      }
      if (step % flags.sample_every == 0) {
        const forge::PoolStats s = ctx.stats();
        samples.push_back({step, resident_kib(), static_cast<double>(s.cached_bytes) / 1024.0,
                           static_cast<double>(s.live_bytes) / 1024.0, s.outstanding, s.system_allocations});
      }
      const auto now = Clock::now();
      if (now - last_draw > std::chrono::milliseconds(200) || step == flags.steps) {
        draw_progress(step, flags.steps, loss_value, resident_kib() / 1024.0,
                      std::chrono::duration<double>(now - start).count());
        last_draw = now;
      }
      if (step == flags.steps) break;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::filesystem::remove_all(dir);
  std::printf("\n%lld steps in %.1f s (%.2f ms/step), %lld checkpoints saved and reloaded, last loss %.4f\n",
              static_cast<long long>(step), seconds, 1000 * seconds / static_cast<double>(step),
              static_cast<long long>(checkpoints), loss_value);

  if (!flags.csv.empty()) {
    if (std::FILE* f = std::fopen(flags.csv.c_str(), "w")) {
      std::fprintf(f, "step,rss_kib,cached_kib,live_kib,outstanding,system_allocations\n");
      for (const Sample& s : samples)
        std::fprintf(f, "%lld,%.0f,%.0f,%.0f,%lld,%llu\n", static_cast<long long>(s.step), s.rss_kib, s.cached_kib,
                     s.live_kib, static_cast<long long>(s.outstanding),
                     static_cast<unsigned long long>(s.system_allocations));
      std::fclose(f);
    }
  }

  std::vector<double> x, rss, cached;
  const Sample* first = nullptr;
  for (const Sample& s : samples) {
    if (s.step <= flags.warmup) continue;
    if (!first) first = &s;
    x.push_back(static_cast<double>(s.step) / 1000.0);
    rss.push_back(s.rss_kib);
    cached.push_back(s.cached_kib);
  }
  if (x.size() < 2) {
    std::printf("too few samples after the warm-up to fit a slope\n");
    return 1;
  }
  const Sample& last = samples.back();
  const auto [rss_lo, rss_hi] = std::minmax_element(rss.begin(), rss.end());
  const auto [cached_lo, cached_hi] = std::minmax_element(cached.begin(), cached.end());
  std::printf("after step %lld (%zu samples):\n", static_cast<long long>(flags.warmup), x.size());
  std::printf("  RSS          %9.1f .. %9.1f MiB, slope %+8.2f KiB per 1,000 steps\n", *rss_lo / 1024, *rss_hi / 1024,
              slope(x, rss));
  std::printf("  pool cached  %9.1f .. %9.1f MiB, slope %+8.2f KiB per 1,000 steps\n", *cached_lo / 1024,
              *cached_hi / 1024, slope(x, cached));
  std::printf("  pool outstanding %lld at the first sample, %lld at the last; system allocations %llu\n",
              static_cast<long long>(first->outstanding), static_cast<long long>(last.outstanding),
              static_cast<unsigned long long>(last.system_allocations - first->system_allocations));
  return 0;
}
