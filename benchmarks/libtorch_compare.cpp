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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "forge/forge.h"

namespace {

double median_seconds(int repeats, const std::function<void()>& run) {
  // A pause first: after a call OpenBLAS's workers spin for 2^28 cycles and
  // libgomp's for a while, and a spinning worker takes a core from whatever
  // is timed next (forge's a*b+c right after libtorch's matmul ran at half
  // speed). Each block of runs then starts with the machine to itself.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
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

// What a row is read against (docs/BENCHMARKS.md, "CPU kernels at the
// machine's limit"): at least libtorch's faster column; a rate in bytes per
// second; 70% of the copy bandwidth of this run and libtorch; a step time.
enum class Target { none, libtorch, rate, copy_and_libtorch, at_most };

struct Workload {
  std::string name;
  Unit unit;
  double work;  // bytes or flops per run, or ops per run for a chain
  std::function<void()> forge, torch, torch_out;
  Target target = Target::none;
  double bound = 0;  // the rate (bytes/s), the copy fraction, or the step (s)
};

// The copy row's forge rate, for the reductions' target.
double g_copy_rate = 0;

// The targets of the CPU-kernel work, by workload.
void assign_targets(std::vector<Workload>& rows) {
  for (Workload& w : rows) {
    const auto has = [&](const char* part) { return w.name.find(part) != std::string::npos; };
    if (has("conv2d")) {
      w.target = Target::libtorch;
    } else if (has("fwd+bwd [")) {
      w.target = Target::rate;
      w.bound = 50e9;
    } else if (has(" all [") || has(" dim -1 [")) {
      w.target = Target::copy_and_libtorch;
      w.bound = 0.7;
    } else if (has("MLP")) {
      w.target = Target::at_most;
      w.bound = 1.2e-3;
    } else if (has("f32 1M") || has("bias add") || has("softmax [") || has("layer_norm [") || has("matmul")) {
      w.target = Target::libtorch;
    }
  }
}

std::string verdict(const Workload& w, double f, double t, double t_out) {
  const double best = w.torch_out ? std::min(t, t_out) : t;
  const double rate = w.work / f;
  const auto said = [](const std::string& what, bool met) { return "  " + what + ": " + (met ? "met" : "NOT met"); };
  char text[64];
  switch (w.target) {
    case Target::none:
      return "";
    case Target::libtorch:
      return said(">= libtorch", best >= f);
    case Target::rate:
      std::snprintf(text, sizeof text, ">= %.0f GB/s", w.bound * 1e-9);
      return said(text, rate >= w.bound);
    case Target::copy_and_libtorch:
      std::snprintf(text, sizeof text, ">= %.0f%% of copy (%.0f GB/s), >= libtorch", 100 * w.bound, g_copy_rate * 1e-9);
      return said(text, g_copy_rate > 0 && rate >= w.bound * g_copy_rate && best >= f);
    case Target::at_most:
      std::snprintf(text, sizeof text, "<= %.1f ms", w.bound * 1e3);
      return said(text, f <= w.bound);
  }
  return "";
}

struct Options {
  int threads = 2;
  int repeats = 15;
  std::string filter;
};

void print_header(const Options& o) {
  std::printf("forge vs libtorch %s, %d thread(s), median of %d runs, GLIBC_TUNABLES=%s\n", TORCH_VERSION, o.threads,
              o.repeats, std::getenv("GLIBC_TUNABLES") ? std::getenv("GLIBC_TUNABLES") : "(unset)");
  std::printf("%-44s %11s %11s %11s %8s %8s %14s\n", "workload", "forge", "libtorch", "lt out", "vs lt", "vs out",
              "forge rate");
}

void run_row(const Options& o, const Workload& w) {
  if (!o.filter.empty() && w.name.find(o.filter) == std::string::npos) return;
  const double f = median_seconds(o.repeats, w.forge);
  const double t = median_seconds(o.repeats, w.torch);
  const double t_out = w.torch_out ? median_seconds(o.repeats, w.torch_out) : 0.0;
  // Times in ms, or ns per op for chains.
  const double scale = w.unit == Unit::chain ? 1e9 / w.work : 1e3;
  char rate[32];
  if (w.unit == Unit::bytes)
    std::snprintf(rate, sizeof rate, "%.1f GB/s", w.work / f * 1e-9);
  else if (w.unit == Unit::flops)
    std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", w.work / f * 1e-9);
  else
    std::snprintf(rate, sizeof rate, "ns/op");
  if (w.name.rfind("copy", 0) == 0) g_copy_rate = w.work / f;
  const std::string target = verdict(w, f, t, t_out);
  if (w.torch_out)
    std::printf("%-44s %11.4f %11.4f %11.4f %7.2fx %7.2fx %14s%s\n", w.name.c_str(), f * scale, t * scale,
                t_out * scale, t / f, t_out / f, rate, target.c_str());
  else
    std::printf("%-44s %11.4f %11.4f %11s %7.2fx %8s %14s%s\n", w.name.c_str(), f * scale, t * scale, "-", t / f, "-",
                rate, target.c_str());
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

// ---- convolution ----

// One conv2d layer, bias-free: x [n, c, hw, hw], weight [o, c, k, k].
struct ConvShape {
  std::int64_t n, c, hw, o, k, stride, pad;
  bool backward;    // forward and backward through autograd (dx and dW)
  bool input_grad;  // false for a first layer, whose input needs no gradient
};

std::string conv_name(const ConvShape& s) {
  char text[96];
  std::snprintf(text, sizeof text, "conv2d%s [%lld,%lld,%lld,%lld] %lldx%lldx%lld", s.backward ? " fwd+bwd" : "",
                static_cast<long long>(s.n), static_cast<long long>(s.c), static_cast<long long>(s.hw),
                static_cast<long long>(s.hw), static_cast<long long>(s.o), static_cast<long long>(s.k),
                static_cast<long long>(s.k));
  std::string name = text;
  if (s.stride != 1) name += " s" + std::to_string(s.stride);
  if (s.pad != 0) name += " pad " + std::to_string(s.pad);
  return name;
}

// ResNet-like layers (3x3 at 64-256 channels, the 1x1 layers around them, a
// strided one) at batches 8 and 32, and the Fashion-MNIST example's two
// layers at its batch of 64; forward alone and forward + backward.
void add_conv_rows(forge::ExecContext& ctx, std::vector<Workload>& rows) {
  const ConvShape shapes[] = {
      {32, 64, 56, 64, 3, 1, 1, false, true},   {8, 64, 56, 64, 3, 1, 1, false, true},
      {32, 128, 28, 128, 3, 1, 1, false, true}, {32, 256, 14, 256, 3, 1, 1, false, true},
      {32, 64, 56, 128, 3, 2, 1, false, true},  {8, 256, 56, 64, 1, 1, 0, false, true},
      {8, 64, 56, 256, 1, 1, 0, false, true},   {32, 1024, 14, 256, 1, 1, 0, false, true},
      {64, 1, 28, 32, 3, 1, 1, false, false},   {64, 32, 14, 64, 3, 1, 1, false, true},
      {8, 64, 56, 64, 3, 1, 1, true, true},     {8, 128, 28, 128, 3, 1, 1, true, true},
      {8, 256, 56, 64, 1, 1, 0, true, true},    {64, 1, 28, 32, 3, 1, 1, true, false},
      {64, 32, 14, 64, 3, 1, 1, true, true},
  };
  for (const ConvShape& s : shapes) {
    const std::int64_t out_hw = (s.hw + 2 * s.pad - s.k) / s.stride + 1;
    const double forward = 2.0 * s.n * s.o * out_hw * out_hw * s.c * s.k * s.k;
    // The backward adds the dW product, and the dx product when x needs it.
    const double flops = s.backward ? forward * (s.input_grad ? 3 : 2) : forward;
    forge::Conv2dOptions opts;
    opts.stride = {s.stride, s.stride};
    opts.padding = {s.pad, s.pad};
    forge::Tensor x = ctx.randn({s.n, s.c, s.hw, s.hw}), w = ctx.randn({s.o, s.c, s.k, s.k});
    torch::Tensor tx = torch::randn({s.n, s.c, s.hw, s.hw}), tw = torch::randn({s.o, s.c, s.k, s.k});
    if (!s.backward) {
      auto out = torch::empty({s.n, s.o, out_hw, out_hw});
      rows.push_back(
          {conv_name(s), Unit::flops, flops, [=] { (void)forge::conv2d(x, w, forge::Tensor(), opts); },
           [=] { (void)torch::conv2d(tx, tw, {}, s.stride, s.pad); },
           [=]() mutable {
             at::convolution_out(out, tx, tw, {}, {s.stride, s.stride}, {s.pad, s.pad}, {1, 1}, false, {0, 0}, 1);
           }});
      continue;
    }
    w.requires_grad_();
    tw.requires_grad_();
    if (s.input_grad) {
      x.requires_grad_();
      tx.requires_grad_();
    }
    const forge::Tensor g = ctx.randn({s.n, s.o, out_hw, out_hw});
    const torch::Tensor tg = torch::randn({s.n, s.o, out_hw, out_hw});
    rows.push_back({conv_name(s),
                    Unit::flops,
                    flops,
                    [=]() mutable {
                      forge::conv2d(x, w, forge::Tensor(), opts).backward(g);
                      for (forge::Tensor t : {x, w}) t.zero_grad();
                    },
                    [=]() mutable {
                      torch::conv2d(tx, tw, {}, s.stride, s.pad).backward(tg);
                      for (torch::Tensor t : {tx, tw}) t.mutable_grad().reset();
                    },
                    {}});
  }
}

// ---- training: autograd and an optimizer ----

constexpr int kGradChain = 1000;
constexpr std::int64_t kBatch = 128;

// The MLP 784-512-512-10 (ReLU, cross-entropy) with Adam, in forge.
struct ForgeMlp {
  std::vector<forge::Tensor> params;
  forge::optim::Adam adam;
  forge::Tensor x, y;
  explicit ForgeMlp(forge::ExecContext& ctx)
      : params(make_params(ctx)),
        adam(params, {.lr = 1e-3}),
        x(ctx.randn({kBatch, 784})),
        y(ctx.from_vector(labels())) {}
  static std::vector<std::int64_t> labels() {
    std::vector<std::int64_t> v(kBatch);
    for (std::int64_t i = 0; i < kBatch; ++i) v[static_cast<std::size_t>(i)] = (i * 7) % 10;
    return v;
  }
  static std::vector<forge::Tensor> make_params(forge::ExecContext& ctx) {
    std::vector<forge::Tensor> p;
    for (auto [out, in] : {std::pair<std::int64_t, std::int64_t>{512, 784}, {512, 512}, {10, 512}}) {
      p.push_back((ctx.randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in)))).requires_grad_());
      p.push_back(ctx.zeros({out}).requires_grad_());
    }
    return p;
  }
  forge::Tensor loss() const {
    forge::Tensor h = forge::relu(forge::linear(x, params[0], params[1]));
    h = forge::relu(forge::linear(h, params[2], params[3]));
    return forge::cross_entropy(forge::linear(h, params[4], params[5]), y);
  }
  void step() {
    loss().backward();
    adam.step();
    adam.zero_grad();
  }
};

void add_training_rows(std::vector<Workload>& rows, forge::ExecContext& ctx) {
  {
    forge::Tensor x = ctx.full({64}, 1.0).requires_grad_();
    const forge::Tensor c = ctx.full({64}, 1.0001);
    torch::Tensor tx = torch::full({64}, 1.0).requires_grad_();
    const torch::Tensor tc = torch::full({64}, 1.0001);
    rows.push_back({"grad chain 1000 x 64 f32 fwd+bwd",
                    Unit::chain,
                    kGradChain,
                    [=]() mutable {
                      forge::Tensor h = x;
                      for (int i = 0; i < kGradChain; ++i) h = i % 2 ? h * c : h + c;
                      h.sum().backward();
                      x.zero_grad();
                    },
                    [=]() mutable {
                      torch::Tensor h = tx;
                      for (int i = 0; i < kGradChain; ++i) h = i % 2 ? h * tc : h + tc;
                      h.sum().backward();
                      tx.mutable_grad().reset();
                    },
                    {}});
  }
  {
    auto mlp = std::make_shared<ForgeMlp>(ctx);
    auto model = torch::nn::Sequential(torch::nn::Linear(784, 512), torch::nn::ReLU(), torch::nn::Linear(512, 512),
                                       torch::nn::ReLU(), torch::nn::Linear(512, 10));
    auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
    const torch::Tensor tx = torch::randn({kBatch, 784});
    const torch::Tensor ty = torch::tensor(ForgeMlp::labels());
    const double flops = 3.0 * 2 * kBatch * (784 * 512 + 512 * 512 + 512 * 10);
    rows.push_back({"MLP 784-512-512-10 b128 step (Adam)",
                    Unit::flops,
                    flops,
                    [=] { mlp->step(); },
                    [=]() mutable {
                      adam->zero_grad();
                      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(tx), ty);
                      loss.backward();
                      adam->step();
                    },
                    {}});
  }
}

// The pool's peak live bytes during one training step, beside the bytes the
// VJPs must keep (the saved activations; the batch itself is held between
// steps) and the parameter gradients the step produces: the excess is waste.
void report_mlp_memory(int threads) {
  forge::ExecContext ctx({.threads = threads, .seed = 0});  // its own pool: only this step's bytes
  ForgeMlp mlp(ctx);
  mlp.step();  // warm
  forge::BufferPool& pool = ctx.runtime().pool();
  const std::size_t before = pool.live_bytes();
  const std::size_t saved_window = pool.open_peak_window();
  mlp.step();
  const std::size_t peak = pool.close_peak_window(saved_window);
  const double activations = 4.0 * kBatch * (512 + 512 + 10);  // the two ReLU outputs and the logits
  const double grads = 4.0 * (512 * 785 + 512 * 513 + 10 * 513);
  const double transient = static_cast<double>(peak - before);
  std::printf(
      "\nMLP step memory (forge pool): peak %.2f MB above the %.2f MB held between steps; saved activations "
      "%.2f MB + parameter gradients %.2f MB = %.2f MB; peak / needed = %.2f\n",
      transient / 1e6, static_cast<double>(before) / 1e6, activations / 1e6, grads / 1e6, (activations + grads) / 1e6,
      transient / (activations + grads));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0)
      o.threads = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--repeats") == 0)
      o.repeats = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--filter") == 0)
      o.filter = argv[i + 1];
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
    rows.push_back({"matmul f32 " + std::to_string(n), Unit::flops, 2.0 * n * n * n, [=] { (void)forge::matmul(a, b); },
                    [=] { (void)torch::matmul(ta, tb); }, [=]() mutable { torch::mm_out(tc, ta, tb); }});
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
    // Reductions against the copy bandwidth of the same run (bytes read and
    // written), over all of a [4096, 4096] f32 tensor and over its last dim.
    const forge::Tensor x = ctx.randn({4096, 4096});
    const torch::Tensor tx = torch::randn({4096, 4096});
    const double bytes = 4.0 * 4096 * 4096;
    auto copy_out = torch::empty({4096, 4096});
    rows.push_back({"copy [4096,4096] (read+write)", Unit::bytes, 2 * bytes, [=] { (void)x.clone(); },
                    [=] { (void)tx.clone(); }, [=]() mutable { copy_out.copy_(tx); }});
    const auto reduction = [&](const std::string& name, auto forge_all, auto torch_all, auto forge_row,
                               auto torch_row) {
      rows.push_back({name + " all [4096,4096]",
                      Unit::bytes,
                      bytes,
                      [=] { (void)forge_all(x); },
                      [=] { (void)torch_all(tx); },
                      {}});
      rows.push_back({name + " dim -1 [4096,4096]",
                      Unit::bytes,
                      bytes,
                      [=] { (void)forge_row(x); },
                      [=] { (void)torch_row(tx); },
                      {}});
    };
    reduction(
        "sum", [](const forge::Tensor& t) { return forge::sum(t); }, [](const torch::Tensor& t) { return t.sum(); },
        [](const forge::Tensor& t) { return forge::sum(t, {-1}); }, [](const torch::Tensor& t) { return t.sum(-1); });
    reduction(
        "mean", [](const forge::Tensor& t) { return forge::mean(t); }, [](const torch::Tensor& t) { return t.mean(); },
        [](const forge::Tensor& t) { return forge::mean(t, {-1}); }, [](const torch::Tensor& t) { return t.mean(-1); });
    reduction(
        "max", [](const forge::Tensor& t) { return forge::amax(t); }, [](const torch::Tensor& t) { return t.amax(); },
        [](const forge::Tensor& t) { return forge::amax(t, {-1}); }, [](const torch::Tensor& t) { return t.amax(-1); });
    reduction(
        "argmax", [](const forge::Tensor& t) { return forge::argmax(t); },
        [](const torch::Tensor& t) { return t.argmax(); }, [](const forge::Tensor& t) { return forge::argmax(t, -1); },
        [](const torch::Tensor& t) { return t.argmax(-1); });
    reduction(
        "var", [](const forge::Tensor& t) { return forge::var(t); }, [](const torch::Tensor& t) { return t.var(); },
        [](const forge::Tensor& t) { return forge::var(t, {-1}); }, [](const torch::Tensor& t) { return t.var(-1); });
    reduction(
        "norm", [](const forge::Tensor& t) { return forge::norm(t); }, [](const torch::Tensor& t) { return t.norm(); },
        [](const forge::Tensor& t) { return forge::norm(t, 2.0, {-1}); },
        [](const torch::Tensor& t) { return t.norm(2, -1); });
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
    // Forward and backward through autograd: logical bytes are x read and y
    // written, then y (or x) and the gradient read and dx written: 20 per
    // element (the parameters' few KB aside).
    const forge::Tensor x = ctx.randn({4096, 1024}).requires_grad_(), g = ctx.randn({4096, 1024});
    const forge::Tensor w = ctx.randn({1024}).requires_grad_(), b = ctx.randn({1024}).requires_grad_();
    const torch::Tensor tx = torch::randn({4096, 1024}).requires_grad_(), tg = torch::randn({4096, 1024});
    const torch::Tensor tw = torch::randn({1024}).requires_grad_(), tb = torch::randn({1024}).requires_grad_();
    const double bytes = 20.0 * 4096 * 1024;
    const auto row = [&](const std::string& name, auto forge_op, auto torch_op) {
      rows.push_back({name + " fwd+bwd [4096,1024]",
                      Unit::bytes,
                      bytes,
                      [=]() mutable {
                        forge_op(x, w, b).backward(g);
                        for (forge::Tensor t : {x, w, b}) t.zero_grad();
                      },
                      [=]() mutable {
                        torch_op(tx, tw, tb).backward(tg);
                        for (torch::Tensor t : {tx, tw, tb}) t.mutable_grad().reset();
                      },
                      {}});
    };
    using FT = const forge::Tensor&;
    using TT = const torch::Tensor&;
    row(
        "softmax", [](FT t, FT, FT) { return forge::softmax(t, 1); },
        [](TT t, TT, TT) { return torch::softmax(t, 1); });
    row(
        "log_softmax", [](FT t, FT, FT) { return forge::log_softmax(t, 1); },
        [](TT t, TT, TT) { return torch::log_softmax(t, 1); });
    row(
        "layer_norm", [](FT t, FT w, FT b) { return forge::layer_norm(t, {1024}, w, b); },
        [](TT t, TT w, TT b) { return torch::layer_norm(t, {1024}, w, b); });
    row(
        "rms_norm", [](FT t, FT w, FT) { return forge::rms_norm(t, {1024}, w); },
        [](TT t, TT w, TT) { return t * torch::rsqrt(t.pow(2).mean(-1, true) + 1e-5) * w; });
  }
  add_conv_rows(ctx, rows);
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

  add_training_rows(rows, ctx);
  assign_targets(rows);
  for (const Workload& w : rows) run_row(o, w);
  if (o.filter.empty() || std::string("MLP").find(o.filter) != std::string::npos ||
      o.filter.find("MLP") != std::string::npos)
    report_mlp_memory(o.threads);
  return 0;
}
