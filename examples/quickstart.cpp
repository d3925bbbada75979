// The usage example of README.md, compiled so that it stays true.
#include <forge/forge.h>

#include <iostream>

int main() {
  forge::ExecContext ctx;  // CPU, all hardware threads, seeded RNG
  forge::Tensor x = ctx.randn({4, 3});
  forge::Tensor b = ctx.ones({3});
  forge::Tensor y = forge::relu(x * x + b);  // broadcasting, outputs from the context's pool
  std::cout << y.t() << "\n";                // a view: no copy

  {
    auto scope = ctx.open_exec_scope();  // holds every output until it closes
    forge::Tensor h = y;
    for (int i = 0; i < 4; ++i) h = h + h;
    std::cout << "scope holds " << scope.stats().buffers << " buffers\n";
  }

  forge::Arena arena{ctx};  // lent memory for outputs only the call can size
  forge::Tensor positive = forge::masked_select(x, forge::relu(x).to(forge::DType::boolean), &arena);
  std::cout << positive.numel() << " positive values; pool: " << ctx.stats().system_allocations
            << " system allocations, " << ctx.stats().outstanding << " buffers outstanding\n";

  if (forge::cuda_device_count() > 0) {
    forge::ExecContext gpu({.device = forge::Device::cuda(0)});  // its tensors live on cuda:0
    forge::Tensor g = forge::relu(gpu.randn({2, 3}) + 1);        // computed on the GPU
    std::cout << "computed on " << g.device().str() << ", read back:\n" << g.cpu() << "\n";
    forge::Arena device_arena{gpu};  // stream-ordered device memory; a call returns once queued
    forge::Tensor kept = forge::masked_select(g, g > 1.0, &device_arena);
    device_arena.wait();  // its outputs are final once the stream has run the call
    std::cout << kept.numel() << " values above 1, in " << device_arena.describe().str() << " memory\n";
  }
}
