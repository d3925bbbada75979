// The GPU rows of docs/BENCHMARKS.md: forge's CUDA kernels against the raw
// library call or copy that bounds them, in one process. Each row is the
// median of --repeats timed runs (cudaEvent timing on the stream the kernel
// runs on, after a warm-up run):
//   gemm     4096^3 bf16 and f32 through the linalg table's matmul vs
//            cublasGemmEx (ratio forge/cuBLAS throughput, target >= 95%)
//   add      256 M f32 elements through forge::add vs cudaMemcpy device to
//            device (ratio of bytes moved per second, target >= 80%)
//   pool     one cached acquire + release of the device pool (target <= 1 us)
//   mlp      an MLP training step (784-512-128-10, batch 256, AdamW): its
//            time, and the pool's system allocations over steps 2..N (target 0)
// Exits 0 printing "no CUDA device" where there is none. A row whose forge
// side cannot run yet (a kernel not in the CUDA table, no CUDA context in
// this build) prints why and the others still run.
//
//   build/release/benchmarks/cuda_bench [--repeats 10] [--steps 50]

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/gemm_options.h"
#include "backend/device_runtime.h"
#include "backend/kernels.h"
#include "forge/forge.h"
#include "median.h"

namespace {

int repeats = 10;
int steps = 50;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median milliseconds of fn() on `stream`, after one warm-up run.
double time_ms(cudaStream_t stream, const std::function<void()>& fn) {
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  fn();
  cuda_ok(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    cuda_ok(cudaEventRecord(start, stream), "cudaEventRecord");
    fn();
    cuda_ok(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(ms);
}

void row(const char* name, const char* what, double value, const char* unit, const char* against = nullptr,
         double ref = 0, const char* target = nullptr) {
  std::printf("%-28s %-34s %12.3f %-6s", name, what, value, unit);
  if (against) std::printf("  vs %s %.3f  ratio %.1f%%", against, ref, 100.0 * ref / value);
  if (target) std::printf("  (target %s)", target);
  std::printf("\n");
}

void skipped(const char* name, const std::string& why) { std::printf("%-28s skipped: %s\n", name, why.c_str()); }

// ---- GEMM: forge's linalg kernel vs cublasGemmEx ----

void gemm_rows(forge::detail::DeviceRuntime& dev, forge::DType dtype) {
  constexpr std::int64_t n = 4096;
  const char* name = dtype == forge::DType::bf16 ? "gemm 4096^3 bf16" : "gemm 4096^3 f32";
  const std::size_t bytes = static_cast<std::size_t>(n * n) * forge::dtype_size(dtype);
  forge::Ref<forge::Buffer> a = dev.pool().acquire(bytes, "bench"), b = dev.pool().acquire(bytes, "bench"),
                            c = dev.pool().acquire(bytes, "bench");
  cudaStream_t stream = forge::cuda::stream_of(dev);
  cuda_ok(cudaMemsetAsync(a->data(), 0, bytes, stream), "memset");
  cuda_ok(cudaMemsetAsync(b->data(), 0, bytes, stream), "memset");

  // cuBLAS: row-major C = A B as column-major C^T = B^T A^T.
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return skipped(name, "cublasCreate failed");
  cublasSetStream(h, stream);
  const cudaDataType t = dtype == forge::DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const float one = 1, zero = 0;
  const double raw = time_ms(stream, [&] {
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b->data(), t, n, a->data(), t, n, &zero, c->data(), t, n,
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cublasDestroy(h);

  const auto& entry = dev.kernels().linalg.matmul;
  if (!entry.supports(dtype)) return skipped(name, "no CUDA matmul kernel for this dtype in this build");
  forge::backend::MatmulProblem p;
  p.dtype = dtype;
  p.m = p.n = p.k = n;
  p.a = {a->data(), {}, n, 1};
  p.b = {b->data(), {}, n, 1};
  p.c = {c->data(), {}, n, 1};
  const double ours = time_ms(stream, [&] { entry.fn(dev, p); });
  const double tflops = 2.0 * n * n * n / (ours * 1e-3) / 1e12;
  row(name, "forge matmul (ms)", ours, "ms", "cuBLAS", raw, ">= 95%");
  std::printf("%-28s %-34s %12.1f TFLOP/s\n", "", "forge matmul throughput", tflops);
}

// ---- elementwise add vs device-to-device copy ----

void add_row(forge::ExecContext& ctx, forge::detail::DeviceRuntime& dev) {
  const char* name = "add 256M f32";
  constexpr std::int64_t n = std::int64_t{256} << 20;
  const std::size_t bytes = static_cast<std::size_t>(n) * 4;
  cudaStream_t stream = forge::cuda::stream_of(dev);
  forge::Ref<forge::Buffer> src = dev.pool().acquire(bytes, "bench"), dst = dev.pool().acquire(bytes, "bench");
  const double copy_ms =
      time_ms(stream, [&] { cudaMemcpyAsync(dst->data(), src->data(), bytes, cudaMemcpyDeviceToDevice, stream); });
  const double copy_gbs = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;  // read + write
  try {
    forge::Tensor x = ctx.zeros({n});
    forge::Tensor y = ctx.zeros({n});
    const double add_ms = time_ms(stream, [&] { forge::Tensor z = forge::add(x, y); });
    const double add_gbs = 3.0 * bytes / (add_ms * 1e-3) / 1e9;  // two reads + one write
    std::printf("%-28s %-34s %12.1f GB/s  vs cudaMemcpy D2D %.1f GB/s  ratio %.1f%%  (target >= 80%%)\n", name,
                "forge::add bandwidth", add_gbs, copy_gbs, 100.0 * add_gbs / copy_gbs);
  } catch (const forge::Error& e) {
    skipped(name, e.what());
  }
}

// ---- pool acquire + release ----

void pool_row(forge::detail::DeviceRuntime& dev) {
  constexpr int kIterations = 100000;
  { forge::Ref<forge::Buffer> warm = dev.pool().acquire(1 << 20, "bench"); }
  std::vector<double> ns;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kIterations; ++i) forge::Ref<forge::Buffer> b = dev.pool().acquire(1 << 20, "bench");
    const auto end = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(end - start).count() / kIterations);
  }
  row("pool acquire+release 1MiB", "cached block, host time", median(ns), "ns", nullptr, 0, "<= 1000 ns");
}

// ---- MLP training step ----

void mlp_rows(forge::ExecContext& ctx, forge::detail::DeviceRuntime& dev) {
  namespace nn = forge::nn;
  try {
    auto net = std::make_shared<nn::Sequential>();
    net->push_back(std::make_shared<nn::Linear>(ctx, 784, 512));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(ctx, 512, 128));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(ctx, 128, 10));
    forge::optim::AdamW opt(net->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
    forge::Tensor input = ctx.randn({256, 784});
    forge::Tensor target = ctx.zeros({256}, forge::DType::i64);
    cudaStream_t stream = forge::cuda::stream_of(dev);
    std::vector<double> ms;
    std::uint64_t allocations_after_first = 0;
    for (int s = 0; s < steps; ++s) {
      if (s == 1) allocations_after_first = ctx.stats(forge::Device::cuda(0)).system_allocations;
      const auto start = std::chrono::steady_clock::now();
      {
        auto scope = ctx.open_exec_scope();
        forge::Tensor loss = forge::cross_entropy(net->forward(input), target);
        loss.backward();
        opt.step();
        opt.zero_grad();
      }
      cuda_ok(cudaStreamSynchronize(stream), "step");
      if (s > 0)
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    const std::uint64_t allocations = ctx.stats(forge::Device::cuda(0)).system_allocations - allocations_after_first;
    row("mlp train step", "784-512-128-10, batch 256, AdamW", median(ms), "ms");
    std::printf("%-28s %-34s %12llu calls  (target 0)\n", "mlp cudaMalloc per step",
                "steps 2..N, pool system_allocations", static_cast<unsigned long long>(allocations));
  } catch (const forge::Error& e) {
    skipped("mlp train step", e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::max(3, std::atoi(argv[i + 1]));
  }
  if (!forge::cuda_built() || forge::cuda_device_count() == 0) {
    std::printf("cuda_bench: no CUDA device\n");
    return 0;
  }
  std::printf("cuda_bench: median of %d repeats (cudaEvent timing), %d MLP steps\n", repeats, steps);
  std::unique_ptr<forge::ExecContext> ctx;
  try {
    ctx = std::make_unique<forge::ExecContext>(forge::ExecContextOptions{.device = forge::Device::cuda(0)});
  } catch (const forge::Error& e) {
    std::printf("cuda_bench: no CUDA ExecContext in this build: %s\n", e.what());
    return 0;
  }
  forge::detail::DeviceRuntime& dev = ctx->runtime().device_runtime(forge::Device::cuda(0), "cuda_bench");
  forge::cuda::set_allow_tf32(false);
  gemm_rows(dev, forge::DType::bf16);
  gemm_rows(dev, forge::DType::f32);
  add_row(*ctx, dev);
  pool_row(dev);
  mlp_rows(*ctx, dev);
  return 0;
}
