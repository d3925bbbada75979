// A context on a device (Note [A context computes on its device] in
// src/runtime/runtime.cpp), run over the emulated device: ops allocate from
// the device pool and compute with the host's kernels on its (host) memory,
// transfers go through the device runtime, streams through its driver. The
// same paths run on a GPU in tests/cuda/.

#include "backend/device_runtime.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/host_executor.h"
#include "forge/forge.h"
#include "memory/emulated_device.h"
#include "support.h"

using forge::Device;
using forge::DType;
using forge::ErrorCode;
using forge::Tensor;
using forge_test::TestContext;

namespace {

std::size_t g_capacity = SIZE_MAX;  // of the emulated devices made from now on

std::unique_ptr<forge::detail::DeviceRuntime> emulated_runtime(Device device, std::size_t max_cached_bytes) {
  FORGE_CHECK(device.index == 0, device, "ExecContext", "device ", device.str(),
              " requested, but 1 emulated device is visible");
  return std::make_unique<forge::detail::DeviceRuntime>(forge::backend::cpu_backend(), 1,
                                                        std::make_unique<forge::detail::EmulatedDevice>(g_capacity, 0),
                                                        forge::cpu::host_executor(1), max_cached_bytes);
}

forge::detail::EmulatedDevice& emulated_device(forge::ExecContext& ctx) {
  return static_cast<forge::detail::EmulatedDevice&>(*ctx.runtime().compute().streams());
}

// Contexts made on cuda:0 while it lives run on the emulated device.
struct EmulatedCuda {
  EmulatedCuda() { forge::detail::set_accelerator_factory_for_testing(&emulated_runtime); }
  ~EmulatedCuda() { forge::detail::set_accelerator_factory_for_testing(nullptr); }
};

forge::ExecContextOptions on_device() { return {.device = Device::cuda(0), .threads = 1}; }

}  // namespace

TEST_CASE("device runtime: a context on a device allocates and computes there, leaving the host pool idle",
          "[device]") {
  EmulatedCuda emulated;
  TestContext ctx(on_device());
  CHECK(ctx.device() == Device::cuda(0));
  const Tensor a = ctx.arange(6).reshape({2, 3});
  const Tensor b = ctx.full({3}, 2.0);
  const Tensor c = a * b + 1;
  CHECK(c.device() == Device::cuda(0));
  CHECK(c.to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9, 11});
  CHECK(ctx.stats().acquires == 0);  // the host pool
  const forge::PoolStats dev = ctx.stats(Device::cuda(0));
  CHECK(dev.outstanding == 3);
  CHECK(dev.acquires >= 4);
  CHECK_THROWS_AS(ctx.stats(Device::cuda(1)), forge::Error);
}

TEST_CASE("device runtime: to, cpu and cuda move every dtype both ways, strided sources included", "[device]") {
  EmulatedCuda emulated;
  TestContext ctx(on_device());
  for (DType dtype : forge_test::kAllDTypes) {
    CAPTURE(forge::dtype_name(dtype));
    const Tensor d = ctx.arange(12).reshape({3, 4}).to(dtype);
    const Tensor h = d.cpu();
    CHECK(h.device() == Device::cpu());
    CHECK(h.dtype() == dtype);
    CHECK(h.to_vector<double>() == d.to_vector<double>());
    const Tensor back = h.cuda(0);
    CHECK(back.device() == Device::cuda(0));
    CHECK(back.to_vector<double>() == d.to_vector<double>());
    // A transposed view is packed on its own device first.
    const Tensor t = d.transpose(0, 1).to(Device::cpu(), /*non_blocking=*/true);
    ctx.synchronize();
    CHECK(t.shape() == forge::Shape{4, 3});
    CHECK(t.is_contiguous());
    CHECK(t.to_vector<double>() == d.transpose(0, 1).contiguous().to_vector<double>());
    CHECK(d.to(Device::cuda(0)).buffer() == d.buffer());  // already there: the same tensor
  }
  CHECK(ctx.stats().outstanding == 0);
}

TEST_CASE("device runtime: ops refuse a host tensor of a device context, naming the move", "[device]") {
  EmulatedCuda emulated;
  TestContext ctx(on_device());
  const Tensor d = ctx.ones({4});
  const Tensor h = d.cpu();
  try {
    (void)(h + d);
    FAIL("an op mixed the host and the device");
  } catch (const forge::Error& e) {
    CHECK(e.code() == ErrorCode::device);
    CHECK_THAT(e.what(), Catch::Contains("is on cpu, but its ExecContext computes on cuda:0"));
    CHECK_THAT(e.what(), Catch::Contains(".to(cuda:0)"));
  }
  CHECK_THROWS_AS(forge::relu(h), forge::Error);
  // Reading it is fine.
  CHECK(h.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK_THROWS_AS(h.sum(), forge::Error);
}

TEST_CASE("device runtime: a move to a device the context does not serve is refused", "[device]") {
  EmulatedCuda emulated;
  TestContext dev_ctx(on_device());
  TestContext host_ctx;
  const Tensor d = dev_ctx.ones({2});
  try {
    (void)d.to(Device::cuda(1));
    FAIL("moved to a device the context does not serve");
  } catch (const forge::Error& e) {
    CHECK(e.code() == ErrorCode::device);
    CHECK_THAT(e.what(), Catch::Contains("has no runtime for cuda:1"));
  }
  CHECK_THROWS_AS(host_ctx.ones({2}).cuda(0), forge::Error);
  CHECK_THROWS_AS(forge::ExecContext(forge::ExecContextOptions{.device = Device::cuda(1)}), forge::Error);
}

TEST_CASE("device runtime: from_vector uploads, copy_ moves its source, item reads back", "[device]") {
  EmulatedCuda emulated;
  TestContext ctx(on_device());
  const Tensor v = ctx.from_vector<std::int32_t>({3, 1, 4, 1, 5, 9}, {2, 3});
  CHECK(v.device() == Device::cuda(0));
  CHECK(v.to_vector<std::int32_t>() == std::vector<std::int32_t>{3, 1, 4, 1, 5, 9});
  Tensor dst = ctx.zeros({2, 3}, DType::f64);
  dst.copy_(v.cpu());  // a host source in the same context moves to the device
  CHECK(dst.to_vector<double>() == std::vector<double>{3, 1, 4, 1, 5, 9});
  CHECK(dst.sum().item<double>() == 23.0);
}

TEST_CASE("device runtime: a training loop keeps its graph and gradients on the device and stops allocating",
          "[device]") {
  EmulatedCuda emulated;
  TestContext ctx(on_device());
  ctx.manual_seed(5);
  const Tensor x = ctx.randn({32, 8});
  const Tensor y = ctx.from_vector<std::int64_t>(std::vector<std::int64_t>(32, 1));
  Tensor w1 = (ctx.randn({16, 8}) * 0.3).requires_grad_();
  Tensor b1 = ctx.zeros({16}).requires_grad_();
  Tensor w2 = (ctx.randn({2, 16}) * 0.3).requires_grad_();
  forge::optim::SGD sgd({w1, b1, w2}, {.lr = 0.1});
  forge::PoolStats warm;
  float first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    auto scope = ctx.open_exec_scope();
    Tensor loss = forge::cross_entropy(forge::linear(forge::relu(forge::linear(x, w1, b1)), w2), y);
    loss.backward();
    CHECK(w1.grad().device() == Device::cuda(0));
    sgd.step();
    sgd.zero_grad();
    (step == 0 ? first : last) = loss.item<float>();
    if (step == 1) warm = ctx.stats(Device::cuda(0));
  }
  CHECK(last < first);
  const forge::PoolStats s = ctx.stats(Device::cuda(0));
  CHECK(s.system_allocations == warm.system_allocations);
  CHECK(ctx.stats().system_allocations == 0);  // nothing on the host pool
}

TEST_CASE("device runtime: streams, guards and record_stream", "[device]") {
  EmulatedCuda emulated;
  TestContext ctx(on_device());
  const forge::Stream main = ctx.stream();
  CHECK(main.device() == Device::cuda(0));
  const forge::Stream side = ctx.new_stream();
  CHECK(side != main);
  Tensor a = ctx.ones({256});
  {
    forge::StreamGuard guard(side);
    CHECK(ctx.stream() == side);
    const Tensor b = ctx.zeros({256});
    CHECK(b.buffer()->stream() == side.native());
  }
  CHECK(ctx.stream() == main);
  CHECK(a.buffer()->stream() == main.native());
  a.record_stream(side);
  a = Tensor();
  CHECK(ctx.stats(Device::cuda(0)).pending_blocks == 1);
  side.synchronize();
  CHECK(side.query());
  (void)ctx.ones({256});  // collects the completed block
  CHECK(ctx.stats(Device::cuda(0)).pending_blocks == 0);
  // Events order one stream behind another.
  forge::detail::EmulatedDevice& dev = emulated_device(ctx);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  dev.enqueue(side.native(), [opened] { opened.wait(); });
  forge::Event held = side.record();
  CHECK_FALSE(held.query());
  main.wait(held);  // main's later work waits for side's
  std::atomic<bool> ran{false};
  dev.enqueue(main.native(), [&ran] { ran.store(true); });
  CHECK_FALSE(main.query());
  gate.set_value();
  held.synchronize();
  main.synchronize();
  CHECK(ran.load());
  CHECK(held.query());
  // A CPU context's stream is the host placeholder.
  TestContext host;
  CHECK(host.stream().native() == nullptr);
  host.synchronize();
  CHECK_THROWS_AS(host.new_stream(), forge::Error);
}

TEST_CASE("device runtime: a device arena call is deferred, and the arena held until the stream reaches it",
          "[device]") {
  EmulatedCuda emulated;
  TestContext ctx(on_device());
  forge::detail::EmulatedDevice& dev = emulated_device(ctx);
  forge::Arena arena(ctx);
  CHECK(arena.describe().str() == "cuda:0");
  const Tensor x = ctx.arange(10);
  const Tensor mask = x > 4.5;

  // Work queued ahead on the stream holds the call's event back.
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  dev.enqueue(ctx.stream().native(), [opened] { opened.wait(); });
  Tensor out = forge::masked_select(x, mask, &arena);
  CHECK(out.device() == Device::cuda(0));
  CHECK_FALSE(arena.ready());
  try {
    (void)forge::masked_select(x, mask, &arena);
    FAIL("a second call was accepted while the first was in flight");
  } catch (const forge::Error& e) {
    CHECK(e.code() == ErrorCode::contended);
    CHECK_THAT(e.what(), Catch::Contains("Arena::wait()"));
  }
  gate.set_value();
  arena.wait();
  CHECK(arena.ready());
  CHECK(out.to_vector<float>() == std::vector<float>{5, 6, 7, 8, 9});

  // Rewinds in stream order: a steady loop allocates one chunk.
  for (int i = 0; i < 5; ++i) {
    out = forge::masked_select(x, mask, &arena);
    arena.wait();
  }
  CHECK(out.to_vector<float>() == std::vector<float>{5, 6, 7, 8, 9});
  CHECK(arena.stats().system_allocations == 1);
  CHECK(arena.stats().calls == 6);
}

TEST_CASE("device runtime: a device arena the device cannot grow is out_of_memory naming it, with no host fallback",
          "[device]") {
  EmulatedCuda emulated;
  g_capacity = std::size_t{8} << 20;
  TestContext ctx(on_device());
  g_capacity = SIZE_MAX;
  const Tensor x = ctx.ones({1 << 20});  // 4 MiB of the 8
  forge::Arena arena(ctx);
  try {
    (void)forge::nonzero(x, &arena);  // 8 MiB of i64 indices
    FAIL("the arena grew past the device");
  } catch (const forge::Error& e) {
    CHECK(e.code() == ErrorCode::out_of_memory);
    CHECK_THAT(e.what(), Catch::Contains("cuda:0 refused them"));
  }
  CHECK(arena.ready());
  CHECK(arena.stats().system_allocations == 0);
  CHECK(ctx.stats().acquires == 0);  // nothing fell back to the host
}

TEST_CASE("device runtime: the TF32 switch is off by default and reads back what was set", "[device]") {
  CHECK_FALSE(forge::cuda_allow_tf32());
  forge::set_cuda_allow_tf32(true);
  CHECK(forge::cuda_allow_tf32());
  forge::set_cuda_allow_tf32(false);
  CHECK_FALSE(forge::cuda_allow_tf32());
}
