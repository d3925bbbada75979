// Distributed figures (docs/BENCHMARKS.md, "Distributed"), run under mpirun
// by scripts/bench-dist; rank 0 prints.
//
//   allreduce: forge's all_reduce (sum, f32, blocking) by message size,
//              beside MPI_Allreduce called directly on the same buffer, as
//              algorithm bandwidth (bytes / time) and bus bandwidth
//              (algbw * 2 (n - 1) / n, the bytes each rank moves).
//   step:      the training step of the MLP (784-512-512-10, Adam, global
//              batch 128) or the Fashion-MNIST CNN (global batch 64): forward,
//              backward (gradients averaged by DataParallel when there is
//              more than one rank), optimizer step. Each rank runs
//              batch / ranks rows with --threads threads. --local skips
//              DataParallel: each rank trains alone, at the same time as
//              the others, which is the floor that sharing the machine sets.
//
//   mpirun -np 2 --allow-run-as-root --oversubscribe build/release/benchmarks/dist_compare allreduce
//   mpirun -np 2 ... dist_compare step --model mlp --threads 1

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../examples/fashion_mnist_model.h"
#include "forge/forge.h"
#include "median.h"

using namespace forge;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int allreduce(int repeats) {
  ExecContext ctx({.threads = 1});
  dist::ProcessGroup group(ctx);
  const int n = group.size();
  if (group.is_main())
    std::printf("all_reduce sum f32, %d ranks, median of %d\n%10s %12s %12s %12s %12s %8s\n", n, repeats, "bytes",
                "forge us", "forge GB/s", "MPI us", "MPI GB/s", "ratio");
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  for (std::int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
    const std::int64_t count = bytes / 4;
    Tensor t = ctx.ones({count});
    std::vector<double> forge_s, mpi_s;
    const int reps = bytes >= (16 << 20) ? std::max(5, repeats / 4) : repeats;
    for (int i = 0; i < reps + 2; ++i) {
      group.barrier();
      auto start = Clock::now();
      group.all_reduce(t);
      if (i >= 2) forge_s.push_back(seconds_since(start));
      MPI_Barrier(comm);
      start = Clock::now();
      MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
      if (i >= 2) mpi_s.push_back(seconds_since(start));
      t.fill_(1.0);
    }
    // Every rank's maximum, so that rank 0 reports the slowest.
    double f = median(forge_s), m = median(mpi_s);
    MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_DOUBLE, MPI_MAX, comm);
    MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, comm);
    const double bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    if (group.is_main())
      std::printf("%10lld %12.1f %12.2f %12.1f %12.2f %8.2f\n", static_cast<long long>(bytes), f * 1e6,
                  bus * static_cast<double>(bytes) / f / 1e9, m * 1e6, bus * static_cast<double>(bytes) / m / 1e9,
                  m / f);
  }
  MPI_Comm_free(&comm);
  return 0;
}

std::shared_ptr<nn::Module> make_model(ExecContext& ctx, const std::string& model) {
  if (model == "cnn") return std::make_shared<fashion_mnist::Cnn>(ctx);
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->push_back(std::make_shared<nn::Linear>(ctx, 784, 512));
  mlp->push_back(std::make_shared<nn::ReLU>());
  mlp->push_back(std::make_shared<nn::Linear>(ctx, 512, 512));
  mlp->push_back(std::make_shared<nn::ReLU>());
  mlp->push_back(std::make_shared<nn::Linear>(ctx, 512, 10));
  return mlp;
}

int step(const std::string& model_name, int threads, int steps, std::int64_t global, double bucket_mb, bool local) {
  ExecContext ctx({.threads = threads, .seed = 1});
  dist::ProcessGroup group(ctx);
  if (global <= 0) global = model_name == "cnn" ? 64 : 128;
  const std::int64_t rows = global / group.size();
  auto model = make_model(ctx, model_name);
  std::optional<dist::DataParallel> ddp;
  if (group.size() > 1 && !local) ddp.emplace(model, group, dist::DataParallelOptions{.bucket_cap_mb = bucket_mb});
  optim::Adam adam(model->parameters(), {.lr = 1e-3});
  Tensor x = model_name == "cnn" ? ctx.randn({rows, 1, 28, 28}) : ctx.randn({rows, 784});
  Tensor y = ctx.from_vector(std::vector<std::int64_t>(static_cast<std::size_t>(rows), 3));
  std::vector<double> times;
  for (int i = 0; i < steps + 5; ++i) {
    group.barrier();
    const auto start = Clock::now();
    {
      auto scope = ctx.open_exec_scope(ScopePolicy::release);
      Tensor loss = cross_entropy(ddp ? (*ddp)(x) : model->forward(x), y);
      loss.backward();
      adam.step();
      adam.zero_grad();
    }
    if (i >= 5) times.push_back(seconds_since(start));
  }
  // Each step's time is its slowest rank's (a synchronous step ends when
  // the last rank's does; --local included, so that the floor compares).
  MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double ms = median(times) * 1e3;
  if (group.is_main()) {
    std::printf("step %s: global batch %lld, %d rank(s) x %d thread(s)%s: %.3f ms (median of %d)", model_name.c_str(),
                static_cast<long long>(global), group.size(), ctx.threads(),
                local && group.size() > 1 ? ", no reduction (each rank alone)" : "", ms, steps);
    if (ddp)
      std::printf("; %lld bucket(s) of <= %g MiB, %.3f ms waiting for reductions per step",
                  static_cast<long long>(ddp->stats().buckets), ddp->options().bucket_cap_mb,
                  ddp->stats().wait_ms / static_cast<double>(ddp->stats().reductions));
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  std::string model = "mlp";
  int threads = 1, steps = 50, repeats = 40;
  std::int64_t global = 0;
  double bucket_mb = 25;
  bool local = false;
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--local") {
      local = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) break;
    if (flag == "--model")
      model = argv[i + 1];
    else if (flag == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (flag == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (flag == "--repeats")
      repeats = std::atoi(argv[i + 1]);
    else if (flag == "--batch")
      global = std::atoll(argv[i + 1]);
    else if (flag == "--bucket-mb")
      bucket_mb = std::atof(argv[i + 1]);
  }
  if (what == "allreduce") return allreduce(repeats);
  if (what == "step" && (model == "mlp" || model == "cnn"))
    return step(model, threads, steps, global, bucket_mb, local);
  std::fprintf(stderr,
               "usage: dist_compare allreduce [--repeats N]\n"
               "       dist_compare step --model mlp|cnn [--threads N] [--steps N] [--batch GLOBAL] [--bucket-mb X]\n"
               "         [--local: ranks train alone, no DataParallel: the floor set by sharing the machine]\n");
  return 2;
}
