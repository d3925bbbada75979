// A tour of forge's memory model: the pool recycling buffers in a steady loop,
// views sharing a buffer, an exec scope holding a step's intermediates, and an
// arena receiving outputs whose size only the call knows. Prints the pool's
// stats after each part.
//
//   build/release/examples/memory_tour [--steps N] [--size N]

#include <forge/forge.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

namespace {

void print_stats(const char* title, const forge::PoolStats& s) {
  std::printf("  %-28s acquires %6llu  hits %6llu  misses %4llu  system allocs %4llu  frees %4llu\n", title,
              static_cast<unsigned long long>(s.acquires), static_cast<unsigned long long>(s.hits),
              static_cast<unsigned long long>(s.misses), static_cast<unsigned long long>(s.system_allocations),
              static_cast<unsigned long long>(s.system_frees));
  std::printf("  %-28s outstanding %3lld  live %9zu B  peak live %9zu B  cached %9zu B in %zu blocks\n", "",
              static_cast<long long>(s.outstanding), s.live_bytes, s.peak_live_bytes, s.cached_bytes, s.cached_blocks);
}

// A progress bar that redraws in place on a terminal, and prints once when logged.
void progress(const char* label, int done, int total) {
  static const bool terminal = isatty(fileno(stdout));
  if (!terminal && done != total) return;
  const int width = 30, filled = total ? done * width / total : width;
  std::printf("\r  %s [%s%s] %d/%d", label, std::string(static_cast<std::size_t>(filled), '#').c_str(),
              std::string(static_cast<std::size_t>(width - filled), '.').c_str(), done, total);
  if (done == total) std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 200;
  std::int64_t size = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0)
      steps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--size") == 0)
      size = std::atoll(argv[i + 1]);
  }
  if (steps <= 0 || size <= 0) {
    std::fprintf(stderr, "usage: memory_tour [--steps N>0] [--size N>0]\n");
    return 2;
  }

  forge::ExecContext ctx;
  std::printf("forge memory tour: %d threads, %d steps of [%lld, %lld] f32\n\n", ctx.threads(), steps,
              static_cast<long long>(size), static_cast<long long>(size));

  // 1. The pool: a steady loop gets the same blocks back, and allocates nothing after step 1.
  std::printf("1. BufferPool: y = relu(x * w + b) in a loop\n");
  const forge::Tensor x = ctx.randn({size, size});
  const forge::Tensor w = ctx.randn({size, size});
  const forge::Tensor b = ctx.randn({size});
  forge::Tensor y = forge::relu(x * w + b);
  // The first step also carries the previous y, so its working set is the steady one.
  ctx.replace(y, forge::relu(x * w + b));
  const auto after_first = ctx.stats();
  const auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step) {
    ctx.replace(y, forge::relu(x * w + b));
    if (step % 20 == 0 || step == steps) progress("steps", step, steps);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto after_loop = ctx.stats();
  print_stats("after the loop", after_loop);
  std::printf("  system allocations after the first step: %llu (%.3f ms per step)\n\n",
              static_cast<unsigned long long>(after_loop.system_allocations - after_first.system_allocations),
              ms / steps);

  // 2. Views share a buffer and outlive their parent.
  std::printf("2. Views\n");
  forge::Tensor column;
  {
    forge::Tensor m = ctx.arange(0, 12).reshape({3, 4});
    forge::Tensor t = m.t();
    column = t.select(0, 1);  // the second column of m
    std::printf("  m.t() shares m's buffer: %s; contiguous: %s\n", t.buffer() == m.buffer() ? "yes" : "no",
                t.is_contiguous() ? "yes" : "no");
  }
  std::cout << "  column 1 of m, alive after m and m.t() died:\n" << column << "\n\n";

  // 3. An exec scope holds a step's intermediates until it closes.
  std::printf("3. ExecScope: the same 16-op chain with and without a scope\n");
  const auto baseline = ctx.stats().outstanding;
  forge::Tensor h = ctx.randn({64, 64});
  std::int64_t unscoped_peak = 0;
  for (int i = 0; i < 16; ++i) {
    h = forge::relu(h + h);
    unscoped_peak = std::max(unscoped_peak, ctx.stats().outstanding - baseline);
  }
  std::printf("  without a scope: at most %lld buffer(s) outstanding\n", static_cast<long long>(unscoped_peak));
  {
    auto scope = ctx.open_exec_scope();
    forge::Tensor g = ctx.randn({64, 64});
    for (int i = 0; i < 16; ++i) g = forge::relu(g + g);
    const auto held = scope.stats();
    std::printf("  inside a scope: it holds %zu buffers, %zu bytes\n", held.buffers, held.bytes);
  }
  std::printf("  after the scope closed: %lld outstanding above the start\n\n",
              static_cast<long long>(ctx.stats().outstanding - baseline - 1));

  // 4. An arena receives outputs whose size only the call knows.
  std::printf("4. Arena: masked_select into a lent arena\n");
  forge::Arena arena{ctx};
  const forge::Tensor values = ctx.randn({size * size});
  for (int step = 0; step < steps; ++step) {
    // mask = values > 0
    const forge::Tensor mask = forge::relu(values).to(forge::DType::boolean);
    const forge::Tensor picked = forge::masked_select(values, mask, &arena);
    if (step + 1 == steps)
      std::printf(
          "  %lld of %lld values are positive; arena (%s): %llu system allocation(s) over %llu calls, "
          "capacity %zu B\n",
          static_cast<long long>(picked.numel()), static_cast<long long>(values.numel()),
          arena.describe().str().c_str(), static_cast<unsigned long long>(arena.stats().system_allocations),
          static_cast<unsigned long long>(arena.stats().calls), arena.stats().capacity_bytes);
  }
  print_stats("at the end", ctx.stats());
  return 0;
}
