// forge's matmul beside the best BLAS this machine has, called directly in
// the same process with the same thread count: OpenBLAS (Debian's pthread
// build) and BLIS, each loaded with dlopen so that both can be in one run
// and neither is a dependency. Every row checks forge's result against the
// BLAS's (max relative difference) and says whether the target is met:
// forge >= 0.95x the faster BLAS, and for the flat products (m <= 16) that
// stream their weights, >= 0.9x the read bandwidth measured in the same run.
//
// OpenBLAS picks its kernels from the CPU when it loads, unless
// OPENBLAS_CORETYPE names one; scripts/bench-libtorch runs this with that
// variable (and OPENBLAS_L2_SIZE) unset, so that OpenBLAS uses its AVX-512
// kernels. The header line prints the core it chose. The bf16 and int8 rows
// set forge's products in those types beside its own f32 rate.
//
//   build/release/benchmarks/gemm_compare [--threads 2] [--repeats 15] [--filter text]
//                                         [--blas openblas,blis]

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "forge/forge.h"
#include "median.h"

namespace {

// cblas_sgemm's row-major, no-transpose / transpose enum values.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);

struct Blas {
  std::string name;
  SgemmFn sgemm = nullptr;
};

// OpenBLAS and BLIS both export cblas_sgemm; RTLD_LOCAL keeps them apart.
Blas load_openblas(int threads) {
  void* h = dlopen("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) return {};
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"))) set(threads);
  std::string name = "OpenBLAS";
  if (auto core = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"))) name += std::string(" ") + core();
  return {name, reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"))};
}

Blas load_blis(int threads) {
  void* h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!h) return {};
  if (auto set = reinterpret_cast<void (*)(long)>(dlsym(h, "bli_thread_set_num_threads"))) set(threads);
  std::string name = "BLIS";
  if (auto arch = reinterpret_cast<int (*)()>(dlsym(h, "bli_arch_query_id"))) {
    if (auto str = reinterpret_cast<const char* (*)(int)>(dlsym(h, "bli_arch_string")))
      name += std::string(" ") + str(arch());
  }
  return {name, reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"))};
}

// Medians of `repeats` timed runs of each callable (after one warm-up run),
// one callable after another with a pause between them: OpenBLAS's workers
// spin for a while after a call (2^28 cycles by default) and TBB's briefly,
// and a spinning worker would take a core from whatever runs next.
std::vector<double> medians(int repeats, const std::vector<std::function<void()>>& runs) {
  std::vector<double> out;
  for (const auto& run : runs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    run();
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      run();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    out.push_back(median(times));
  }
  return out;
}

// `threads` threads reading a 64 MiB buffer, each its own share: the bound
// for the flat products below, whose weights are the same 64 MiB (and of
// which a 32 MiB L3 can keep part between runs, for both). Timed in turns
// beside the product it bounds.
class Reader {
 public:
  explicit Reader(int threads)
      : threads_(threads), data_(std::size_t{16} << 20, 1.0f), sinks_(static_cast<std::size_t>(threads)) {}
  double bytes() const { return static_cast<double>(data_.size() * sizeof(float)); }
  void operator()() {
    std::vector<std::thread> pool;
    const std::size_t share = data_.size() / static_cast<std::size_t>(threads_);
    for (int t = 0; t < threads_; ++t)
      pool.emplace_back([this, t, share] {
        using V = float __attribute__((vector_size(64)));
        const float* p = data_.data() + share * static_cast<std::size_t>(t);
        V acc[4] = {};  // independent sums, so that loads, not adds, bound it
        for (std::size_t i = 0; i + 64 <= share; i += 64)
          for (int l = 0; l < 4; ++l) {
            V v;
            std::memcpy(&v, p + i + 16 * l, sizeof v);
            acc[l] += v;
          }
        const V sum = acc[0] + acc[1] + acc[2] + acc[3];
        sinks_[static_cast<std::size_t>(t)] = sum[0] + sum[15];
      });
    for (std::thread& th : pool) th.join();
  }

 private:
  int threads_;
  std::vector<float> data_;
  std::vector<float> sinks_;
};

struct Options {
  int threads = 2;
  int repeats = 15;
  std::string filter;
  std::string blas = "openblas,blis";  // which libraries to load
};

// C [m, n] = A B with A [m, k] (or stored [k, m] when ta) and B [k, n] (or
// stored [n, k] when tb): forge::matmul on views, the BLAS through its
// transpose flags.
void run_row(const Options& o, forge::ExecContext& ctx, const std::vector<Blas>& blas, Reader& reader, std::int64_t m,
             std::int64_t n, std::int64_t k, bool ta, bool tb) {
  std::string name =
      std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " + (ta ? "T" : "N") + (tb ? "T" : "N");
  if (!o.filter.empty() && name.find(o.filter) == std::string::npos) return;
  const forge::Tensor a = ctx.randn(ta ? forge::Shape{k, m} : forge::Shape{m, k});
  const forge::Tensor b = ctx.randn(tb ? forge::Shape{n, k} : forge::Shape{k, n});
  const forge::Tensor av = ta ? a.t() : a, bv = tb ? b.t() : b;
  forge::Tensor out;
  std::vector<std::function<void()>> runs{[&] { out = forge::matmul(av, bv); }};
  std::vector<std::vector<float>> results(blas.size(), std::vector<float>(static_cast<std::size_t>(m * n)));
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  for (std::size_t l = 0; l < blas.size(); ++l)
    runs.push_back([&, l] {
      blas[l].sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(k), 1.0f, pa, static_cast<int>(ta ? m : k), pb, static_cast<int>(tb ? k : n), 0.0f,
                    results[l].data(), static_cast<int>(n));
    });
  const bool flat = m <= 16;
  if (flat) runs.push_back([&] { reader(); });
  const std::vector<double> t = medians(o.repeats, runs);
  const double bandwidth = flat ? reader.bytes() / t.back() : 0.0;
  const std::vector<float> got = out.to_vector<float>();
  const double f = t[0];
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);

  std::printf("%-20s forge %8.3f ms %6.1f GFLOP/s", name.c_str(), f * 1e3, flops / f * 1e-9);
  const double weight_rate = 4.0 * static_cast<double>(k * n) / f;
  if (flat)
    std::printf(" %5.1f GB/s of B, %.2fx the read rate (%.1f GB/s)", weight_rate * 1e-9, weight_rate / bandwidth,
                bandwidth * 1e-9);
  double best = 0;
  for (std::size_t l = 0; l < blas.size(); ++l) {
    const std::vector<float>& c = results[l];
    double worst = 0;
    for (std::size_t i = 0; i < c.size(); ++i)
      worst = std::max(worst, std::abs(double(got[i]) - c[i]) / (1.0 + std::abs(double(c[i]))));
    std::printf(" | %s %8.3f ms %5.2fx diff %.0e", blas[l].name.c_str(), t[l + 1] * 1e3, t[l + 1] / f, worst);
    if (worst > 1e-3 * std::sqrt(static_cast<double>(k))) std::printf(" RESULTS DIFFER");
    best = best == 0 ? t[l + 1] : std::min(best, t[l + 1]);
  }
  if (best > 0) std::printf(" | >= 0.95x best BLAS: %s", best / f >= 0.95 ? "met" : "NOT met");
  // A product this flat is bound by reading B: the target is that rate.
  if (flat) std::printf(" | >= 0.9x read: %s", weight_rate / bandwidth >= 0.9 ? "met" : "NOT met");
  std::printf("\n");
}

// forge's s^3 product in bf16 (f32 out) or int8 (i8 x i8, i32 out) beside
// its f32 product of the same values; an int8 result is checked against the
// f32 one (exact integers in f32 up to 2^24, within f32 rounding beyond).
void narrow_row(const Options& o, forge::ExecContext& ctx, std::int64_t s, forge::DType dtype, double target) {
  const std::string name = std::to_string(s) + "^3 " + std::string(forge::dtype_name(dtype));
  if (!o.filter.empty() && name.find(o.filter) == std::string::npos) return;
  const bool int8 = dtype == forge::DType::i8;
  const forge::Tensor a = int8 ? ctx.randint(-128, 128, {s, s}).to(forge::DType::f32) : ctx.randn({s, s});
  const forge::Tensor b = int8 ? ctx.randint(-128, 128, {s, s}).to(forge::DType::f32) : ctx.randn({s, s});
  const forge::Tensor an = a.to(dtype), bn = b.to(dtype);
  forge::Tensor out, out_n;
  const std::vector<double> t =
      medians(o.repeats, {[&] { out = forge::matmul(a, b); }, [&] { out_n = forge::matmul(an, bn); }});
  const double flops = 2.0 * static_cast<double>(s * s * s);
  const char* unit = int8 ? "GOP/s  " : "GFLOP/s";
  std::printf("%-20s forge %8.3f ms %6.1f %s | f32 %8.3f ms %6.1f GFLOP/s | %s / f32 rate %.2fx | >= %.1fx: %s",
              name.c_str(), t[1] * 1e3, flops / t[1] * 1e-9, unit, t[0] * 1e3, flops / t[0] * 1e-9,
              std::string(forge::dtype_name(dtype)).c_str(), t[0] / t[1], target,
              t[0] / t[1] >= target ? "met" : "NOT met");
  if (int8) {
    const std::vector<float> f = out.to_vector<float>();
    const std::vector<std::int32_t> q = out_n.to_vector<std::int32_t>();
    double worst = 0;
    for (std::size_t i = 0; i < q.size(); ++i)
      worst = std::max(worst, std::abs(double(q[i]) - f[i]) / (1.0 + std::abs(double(f[i]))));
    std::printf(" | diff from f32 %.0e%s", worst, worst > 1e-4 ? " RESULTS DIFFER" : "");
  }
  std::printf("\n");
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
    else if (std::strcmp(argv[i], "--blas") == 0)
      o.blas = argv[i + 1];
  }
  std::vector<Blas> blas;
  if (o.blas.find("openblas") != std::string::npos) blas.push_back(load_openblas(o.threads));
  if (o.blas.find("blis") != std::string::npos) blas.push_back(load_blis(o.threads));
  std::erase_if(blas, [](const Blas& b) { return b.sgemm == nullptr; });
  forge::ExecContext ctx({.threads = o.threads, .seed = 0});
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("f32 GEMM, %d thread(s), median of %d runs; OPENBLAS_CORETYPE=%s; ratio = BLAS time / forge time\n",
              o.threads, o.repeats, coretype ? coretype : "(unset)");
  if (blas.empty()) std::printf("(no BLAS found: install libopenblas0-pthread or libblis4)\n");
  Reader reader(o.threads);

  for (const std::int64_t s : {256, 512, 1024, 2048, 4096}) run_row(o, ctx, blas, reader, s, s, s, false, false);
  // Backward's layouts: dX = dY W (NN above), dW = dY^T X (TN), and the
  // forward x W^T (NT).
  for (const std::int64_t s : {512, 2048}) {
    run_row(o, ctx, blas, reader, s, s, s, false, true);
    run_row(o, ctx, blas, reader, s, s, s, true, false);
  }
  // Decoding and small-batch shapes: weights [4096, 4096] read once.
  for (const std::int64_t m : {1, 4, 16}) {
    run_row(o, ctx, blas, reader, m, 4096, 4096, false, true);
    run_row(o, ctx, blas, reader, m, 4096, 4096, false, false);
  }
  // bf16 (f32 accumulation) and int8 (i32 accumulation): forge's rate
  // against its own f32 rate on the same values, in turns; the targets are
  // >= 1.8x and >= 3x. No BLAS here has either product.
  for (const std::int64_t s : {512, 1024, 2048}) narrow_row(o, ctx, s, forge::DType::bf16, 1.8);
  for (const std::int64_t s : {512, 1024, 2048}) narrow_row(o, ctx, s, forge::DType::i8, 3.0);
  // The Fashion-MNIST MLP's layers (batch 128): forward, dX and dW.
  run_row(o, ctx, blas, reader, 128, 512, 784, false, true);
  run_row(o, ctx, blas, reader, 128, 784, 512, false, false);
  run_row(o, ctx, blas, reader, 512, 784, 128, true, false);
  run_row(o, ctx, blas, reader, 128, 512, 512, false, true);
  return 0;
}
