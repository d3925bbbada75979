// One training configuration per process, forge or libtorch, so that each
// process's peak RSS is its own: the CNN (conv 1->32 3x3, ReLU, max pool 2,
// conv 32->64 3x3, ReLU, max pool 2, linear 3136->128, ReLU, linear 128->10)
// or the MLP (784-512-512-10, ReLU), cross-entropy, AdamW, on batches of
// Fashion-MNIST-shaped inputs. Prints the median ms per training step
// (forward, backward, AdamW) over the timed steps and the process's peak RSS
// after an epoch's worth of steps (60,000 samples).
//
//   build/release/benchmarks/train_compare --framework forge|torch --model cnn|mlp --batch 64 [--threads 2]
//   scripts/bench-training   (every configuration, a table)

#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "process_memory.h"

namespace {

constexpr std::int64_t kEpochSamples = 60000;

struct Options {
  std::string framework = "forge", model = "cnn";
  std::int64_t batch = 64;
  int threads = 2;
};

// ---- forge: nn modules, layer for layer the libtorch model below ----

std::shared_ptr<forge::nn::Sequential> forge_model(forge::ExecContext& ctx, const std::string& model) {
  namespace nn = forge::nn;
  auto net = std::make_shared<nn::Sequential>();
  const auto add = [&](std::shared_ptr<nn::Module> m) { net->push_back(std::move(m)); };
  if (model == "cnn") {
    add(std::make_shared<nn::Conv2d>(ctx, 1, 32, 3, nn::Conv2dOptions{.padding = 1}));
    add(std::make_shared<nn::ReLU>());
    add(std::make_shared<nn::MaxPool2d>(2));
    add(std::make_shared<nn::Conv2d>(ctx, 32, 64, 3, nn::Conv2dOptions{.padding = 1}));
    add(std::make_shared<nn::ReLU>());
    add(std::make_shared<nn::MaxPool2d>(2));
    add(std::make_shared<nn::Flatten>());
    add(std::make_shared<nn::Linear>(ctx, 3136, 128));
    add(std::make_shared<nn::ReLU>());
    add(std::make_shared<nn::Linear>(ctx, 128, 10));
  } else {
    add(std::make_shared<nn::Flatten>());
    add(std::make_shared<nn::Linear>(ctx, 784, 512));
    add(std::make_shared<nn::ReLU>());
    add(std::make_shared<nn::Linear>(ctx, 512, 512));
    add(std::make_shared<nn::ReLU>());
    add(std::make_shared<nn::Linear>(ctx, 512, 10));
  }
  return net;
}

std::vector<double> run_forge(const Options& o, int steps) {
  forge::ExecContext ctx({.threads = o.threads, .seed = 0});
  const auto model = forge_model(ctx, o.model);
  forge::optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  const forge::Tensor x = ctx.randn({o.batch, 1, 28, 28});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(o.batch));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const forge::Tensor y = ctx.from_vector(labels);
  std::vector<double> ms;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      auto scope = ctx.open_exec_scope();
      forge::cross_entropy(model->forward(x), y).backward();
      opt.step();
      opt.zero_grad();
    }
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

// ---- libtorch: the C++ frontend's modules ----

std::vector<double> run_torch(const Options& o, int steps) {
  torch::manual_seed(0);
  torch::nn::Sequential model;
  if (o.model == "cnn") {
    model = torch::nn::Sequential(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)), torch::nn::ReLU(), torch::nn::MaxPool2d(2),
        torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)), torch::nn::ReLU(), torch::nn::MaxPool2d(2),
        torch::nn::Flatten(), torch::nn::Linear(3136, 128), torch::nn::ReLU(), torch::nn::Linear(128, 10));
  } else {
    model = torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 512), torch::nn::ReLU(),
                                  torch::nn::Linear(512, 512), torch::nn::ReLU(), torch::nn::Linear(512, 10));
  }
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  const torch::Tensor x = torch::randn({o.batch, 1, 28, 28});
  const torch::Tensor y = torch::arange(o.batch) % 10;
  std::vector<double> ms;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    opt.step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--framework") == 0)
      o.framework = argv[i + 1];
    else if (std::strcmp(argv[i], "--model") == 0)
      o.model = argv[i + 1];
    else if (std::strcmp(argv[i], "--batch") == 0)
      o.batch = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--threads") == 0)
      o.threads = std::atoi(argv[i + 1]);
  }
  const double startup_rss = current_rss_mb();
  at::set_num_threads(o.threads);
  if (auto* set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(o.threads);
  const int steps = static_cast<int>(std::max<std::int64_t>(kEpochSamples / o.batch, 20));
  std::vector<double> ms = o.framework == "torch" ? run_torch(o, steps) : run_forge(o, steps);
  ms.erase(ms.begin(), ms.begin() + 5);  // warm-up
  // Both frameworks are linked into this binary, so the peak is also reported above the RSS at startup.
  const double peak = peak_rss_mb();
  std::printf(
      "%-6s %-4s batch %4lld  %d threads  %8.3f ms/step (median of %zu)  peak RSS %7.1f MB (%6.1f MB above startup)\n",
      o.framework.c_str(), o.model.c_str(), static_cast<long long>(o.batch), o.threads, median(ms), ms.size(), peak,
      peak - startup_rss);
  return 0;
}
