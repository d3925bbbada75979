// forge beside libtorch (the anchor: Debian's libtorch 1.13) in one process,
// with the same thread count. Each workload runs a warm-up, then `repeats`
// timed runs; the table shows medians. libtorch runs as users get it: its
// default environment and allocator, with its two thread pools (OpenMP for
// ATen, OpenBLAS for GEMM) set to the same thread count as forge's context.
// "libtorch out" is libtorch writing into a preallocated output (at::add_out,
// at::mm_out, ...), which removes its page-fault cost for fresh outputs.
// forge's outputs come from its context's pool, so they are warm after the
// warm-up run.
//
//   scripts/bench-libtorch            (configures, builds, runs twice: see docs/BENCHMARKS.md)
//   build/release/benchmarks/libtorch_compare [--threads 2] [--repeats 15] [--filter text]

#include <dlfcn.h>
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
  run();  // warm-up: first-touch of forge's pool blocks and libtorch's caches
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[static_cast<std::size_t>(repeats / 2)];
}

// How a row's work is counted: logical bytes (inputs read once, output
// written once), floating-point operations, or per op of a chain.
enum class Unit { bytes, flops, chain };

struct Workload {
  std::string name;
  Unit unit;
  double work;  // bytes or flops per run, or ops per run for a chain
  std::function<void()> forge, torch, torch_out;
};

struct Options {
  int threads = 2;
  int repeats = 15;
  std::string filter;
};

void print_header(const Options& o) {
  std::printf("forge vs libtorch %s, %d thread(s), median of %d runs, GLIBC_TUNABLES=%s\n", TORCH_VERSION, o.threads,
              o.repeats, std::getenv("GLIBC_TUNABLES") ? std::getenv("GLIBC_TUNABLES") : "(unset)");
  std::printf("%-36s %11s %11s %11s %8s %8s %14s\n", "workload", "forge", "libtorch", "lt out", "vs lt",
              "vs out", "forge rate");
}

void run_row(const Options& o, const Workload& w) {
  if (!o.filter.empty() && w.name.find(o.filter) == std::string::npos) return;
  const double f = median_seconds(o.repeats, w.forge);
  const double t = median_seconds(o.repeats, w.torch);
  const double t_out = median_seconds(o.repeats, w.torch_out);
  // Times in ms, or ns per op for chains.
  const double scale = w.unit == Unit::chain ? 1e9 / w.work : 1e3;
  char rate[32];
  if (w.unit == Unit::bytes) std::snprintf(rate, sizeof rate, "%.1f GB/s", w.work / f * 1e-9);
  else if (w.unit == Unit::flops) std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", w.work / f * 1e-9);
  else std::snprintf(rate, sizeof rate, "ns/op");
  std::printf("%-36s %11.4f %11.4f %11.4f %7.2fx %7.2fx %14s\n", w.name.c_str(), f * scale, t * scale, t_out * scale,
              t / f, t_out / f, rate);
  std::fflush(stdout);
}

// libtorch 1.13 reaches OpenBLAS through libblas.so.3; its thread pool is
// separate from ATen's OpenMP pool and is sized by this call when present.
bool set_openblas_threads(int threads) {
  using SetThreads = void (*)(int);
  auto* set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set == nullptr) return false;
  set(threads);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) o.threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--repeats") == 0) o.repeats = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--filter") == 0) o.filter = argv[i + 1];
  }
  at::set_num_threads(o.threads);
  const bool openblas = set_openblas_threads(o.threads);
  torch::manual_seed(0);
  forge::ExecContext ctx({.threads = o.threads, .seed = 0});
  print_header(o);
  if (!openblas) std::printf("(libtorch's BLAS is not OpenBLAS here: its GEMM thread count is its own)\n");

  std::vector<Workload> rows;

  for (const std::int64_t n : {256, 1024, 2048}) {
    const forge::Tensor a = ctx.randn({n, n}), b = ctx.randn({n, n});
    const torch::Tensor ta = torch::randn({n, n}), tb = torch::randn({n, n});
    auto tc = torch::empty({n, n});
    rows.push_back({"matmul f32 " + std::to_string(n), Unit::flops, 2.0 * n * n * n,
                    [=] { (void)forge::matmul(a, b); }, [=] { (void)torch::matmul(ta, tb); },
                    [=]() mutable { torch::mm_out(tc, ta, tb); }});
  }

  for (const std::int64_t n : {std::int64_t{1} << 20, std::int64_t{1} << 24}) {
    const std::string size = n == (1 << 20) ? "1M" : "16M";
    const forge::Tensor a = ctx.randn({n}), b = ctx.randn({n}), c = ctx.randn({n});
    const torch::Tensor ta = torch::randn({n}), tb = torch::randn({n}), tc = torch::randn({n});
    auto out = torch::empty({n}), tmp = torch::empty({n});
    const double f32 = 4.0 * static_cast<double>(n);
    rows.push_back({"a+b f32 " + size, Unit::bytes, 3 * f32, [=] { (void)(a + b); }, [=] { (void)(ta + tb); },
                    [=]() mutable { torch::add_out(out, ta, tb); }});
    rows.push_back({"a*b+c f32 " + size, Unit::bytes, 4 * f32, [=] { (void)(a * b + c); },
                    [=] { (void)(ta * tb + tc); },
                    [=]() mutable {
                      torch::mul_out(tmp, ta, tb);
                      torch::add_out(out, tmp, tc);
                    }});
    rows.push_back({"gelu f32 " + size, Unit::bytes, 2 * f32, [=] { (void)forge::gelu(a); },
                    [=] { (void)torch::gelu(ta); }, [=]() mutable { torch::gelu_out(out, ta); }});
  }

  {
    const forge::Tensor x = ctx.randn({4096, 1024}), bias = ctx.randn({1024});
    const torch::Tensor tx = torch::randn({4096, 1024}), tbias = torch::randn({1024});
    auto out = torch::empty({4096, 1024});
    rows.push_back({"bias add [4096,1024]+[1024]", Unit::bytes, 4.0 * (2 * 4096 * 1024 + 1024),
                    [=] { (void)(x + bias); }, [=] { (void)(tx + tbias); },
                    [=]() mutable { torch::add_out(out, tx, tbias); }});
  }
  {
    const std::int64_t n = std::int64_t{1} << 24;
    const forge::Tensor x = ctx.randn({n});
    const torch::Tensor tx = torch::randn({n});
    auto out = torch::empty({});
    rows.push_back({"sum f32 16M", Unit::bytes, 4.0 * static_cast<double>(n), [=] { (void)forge::sum(x); },
                    [=] { (void)torch::sum(tx); }, [=]() mutable { torch::sum_out(out, tx); }});
  }
  {
    const forge::Tensor x = ctx.randn({4096, 1024}), w = ctx.randn({1024}), b = ctx.randn({1024});
    const torch::Tensor tx = torch::randn({4096, 1024}), tw = torch::randn({1024}), tb = torch::randn({1024});
    auto out = torch::empty({4096, 1024}), mean = torch::empty({4096, 1}), rstd = torch::empty({4096, 1});
    const double bytes = 4.0 * 2 * 4096 * 1024;
    rows.push_back({"softmax [4096,1024] dim 1", Unit::bytes, bytes, [=] { (void)forge::softmax(x, 1); },
                    [=] { (void)torch::softmax(tx, 1); }, [=]() mutable { torch::softmax_out(out, tx, 1); }});
    rows.push_back({"layer_norm [4096,1024]", Unit::bytes, bytes, [=] { (void)forge::layer_norm(x, {1024}, w, b); },
                    [=] { (void)torch::layer_norm(tx, {1024}, tw, tb); },
                    [=]() mutable { at::native_layer_norm_out(out, mean, rstd, tx, {1024}, tw, tb, 1e-5); }});
  }
  {
    const forge::Tensor x = ctx.randn({32, 64, 56, 56}), w = ctx.randn({64, 64, 3, 3});
    const torch::Tensor tx = torch::randn({32, 64, 56, 56}), tw = torch::randn({64, 64, 3, 3});
    auto out = torch::empty({32, 64, 56, 56});
    const double flops = 2.0 * 32 * 64 * 56 * 56 * 64 * 9;
    forge::Conv2dOptions opts;
    opts.padding = {1, 1};
    rows.push_back({"conv2d [32,64,56,56] 64x3x3 pad 1", Unit::flops, flops,
                    [=] { (void)forge::conv2d(x, w, forge::Tensor(), opts); },
                    [=] { (void)torch::conv2d(tx, tw, {}, 1, 1); },
                    [=]() mutable { at::convolution_out(out, tx, tw, {}, {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1); }});
  }
  {
    constexpr int kChain = 1000;
    const forge::Tensor c = ctx.full({64}, 1e-3);
    const torch::Tensor tc = torch::full({64}, 1e-3);
    auto tx = torch::zeros({64});
    rows.push_back({"add chain 1000 x 64 f32", Unit::chain, kChain,
                    [=, &ctx] {
                      forge::Tensor x = ctx.zeros({64});
                      for (int i = 0; i < kChain; ++i) x = forge::add(x, c);
                    },
                    [=] {
                      torch::Tensor x = torch::zeros({64});
                      for (int i = 0; i < kChain; ++i) x = torch::add(x, tc);
                    },
                    [=]() mutable {
                      for (int i = 0; i < kChain; ++i) torch::add_out(tx, tx, tc);
                    }});
  }

  for (const Workload& w : rows) run_row(o, w);
  return 0;
}
