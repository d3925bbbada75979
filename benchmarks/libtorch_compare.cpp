// forge beside libtorch (the anchor: Debian's libtorch 1.13) in one process,
// with the same thread count. Each workload runs a warm-up, then `repeats`
// timed runs; the table shows medians and forge's speed-up (libtorch / forge).
//
//   cmake --preset release -DFORGE_BENCH_LIBTORCH=ON && cmake --build --preset release
//   build/release/benchmarks/libtorch_compare [--threads 2] [--repeats 15]

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "forge/forge.h"

namespace {

double median_seconds(int repeats, const std::function<void()>& run) {
  run();  // warm-up
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[static_cast<std::size_t>(repeats / 2)];
}

void row(const char* workload, const char* unit, double scale, double forge_s, double torch_s) {
  std::printf("%-34s %12.3f %12.3f %8.2fx   (%s)\n", workload, forge_s * scale, torch_s * scale, torch_s / forge_s,
              unit);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
  }
  at::set_num_threads(threads);
  forge::ExecContext ctx({.threads = threads});
  std::printf("forge vs libtorch %s, %d thread(s), median of %d runs\n", TORCH_VERSION, threads, repeats);
  std::printf("%-34s %12s %12s %9s\n", "workload", "forge", "libtorch", "speed-up");

  constexpr int kChain = 1000;
  {
    const forge::Tensor c = ctx.full({64}, 1e-3);
    const double f = median_seconds(repeats, [&] {
      forge::Tensor x = ctx.zeros({64});
      for (int i = 0; i < kChain; ++i) x = forge::add(x, c);
    });
    const torch::Tensor tc = torch::full({64}, 1e-3);
    const double t = median_seconds(repeats, [&] {
      torch::Tensor x = torch::zeros({64});
      for (int i = 0; i < kChain; ++i) x = torch::add(x, tc);
    });
    row("add chain, 1000 x 64 f32", "ns per op", 1e9 / kChain, f, t);
  }
  {
    const forge::Tensor c = ctx.full({64}, 1e-3);
    forge::Tensor x = ctx.zeros({64});
    const double f = median_seconds(repeats, [&] {
      for (int i = 0; i < kChain; ++i) forge::add_into(x, x, c);
    });
    const torch::Tensor tc = torch::full({64}, 1e-3);
    torch::Tensor tx = torch::zeros({64});
    const double t = median_seconds(repeats, [&] {
      for (int i = 0; i < kChain; ++i) torch::add_out(tx, tx, tc);
    });
    row("add into out, 1000 x 64 f32", "ns per op", 1e9 / kChain, f, t);
  }
  return 0;
}
