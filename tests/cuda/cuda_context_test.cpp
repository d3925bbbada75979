// CUDA contexts: what a context on cuda:0 makes and in which pool it counts
// it, its stream, and the errors for a device that is not there and for
// memory the device does not have.

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_support.h"
#include "forge/forge.h"
#include "support.h"

namespace {

using forge::Device;
using forge::DType;
using forge::Tensor;
using forge_test::TestContext;

// More bytes than any GPU has (an H200 has 141 GB).
constexpr std::int64_t kMoreThanAnyGpuBytes = std::int64_t{1} << 40;

}  // namespace

TEST_CASE("cuda: a context on cuda:0 makes its tensors there and counts them in the device pool", "[cuda]") {
  TestContext ctx(forge_test::cuda_options());
  CHECK(ctx.device() == Device::cuda(0));
  const forge::PoolStats before = ctx.stats(Device::cuda(0));
  {
    const std::vector<Tensor> made = {
        ctx.zeros({64, 64}),
        ctx.ones({3}, DType::i64),
        ctx.full({2, 2}, 2.5, DType::f64),
        ctx.arange(10),
        ctx.eye(3),
        ctx.randn({128}),
        ctx.rand({5}, DType::bf16),
        ctx.from_vector<std::int32_t>({7, -8, 9}),
    };
    for (const Tensor& t : made) CHECK(t.device() == Device::cuda(0));
    CHECK(made[0].to_vector<float>() == std::vector<float>(64 * 64, 0.0f));
    CHECK(made[1].to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1, 1});
    CHECK(made[2].to_vector<double>() == std::vector<double>(4, 2.5));
    CHECK(made[3].to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK(made[4].to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
    for (const float r : made[6].to_vector<float>()) CHECK((r >= 0 && r < 1));
    CHECK(made[7].to_vector<std::int32_t>() == std::vector<std::int32_t>{7, -8, 9});

    const forge::PoolStats during = ctx.stats(Device::cuda(0));
    CHECK(during.outstanding == before.outstanding + static_cast<std::int64_t>(made.size()));
    CHECK(during.system_allocations > before.system_allocations);
    CHECK(during.live_bytes >= 64 * 64 * sizeof(float));
    CHECK(ctx.stats().outstanding == 0);  // nothing of these lives in the host pool
  }
  // Released on the stream that made them: cached for it at once.
  const forge::PoolStats after = ctx.stats(Device::cuda(0));
  CHECK(after.outstanding == before.outstanding);
  CHECK(after.cached_bytes >= 64 * 64 * sizeof(float));
  CHECK(after.pending_blocks == 0);
  const std::uint64_t allocations = after.system_allocations;
  const Tensor again = ctx.zeros({64, 64});  // served from the cache
  CHECK(ctx.stats(Device::cuda(0)).system_allocations == allocations);
  CHECK(ctx.stats(Device::cuda(0)).hits > after.hits);
}

TEST_CASE("cuda: a device context's host tensors come from its host pool", "[cuda]") {
  TestContext ctx(forge_test::cuda_options());
  const Tensor d = ctx.arange(1000);
  const std::int64_t device_outstanding = ctx.stats(Device::cuda(0)).outstanding;
  {
    const Tensor h = d.cpu();
    CHECK(h.device() == Device::cpu());
    CHECK(ctx.stats().outstanding == 1);
    CHECK(ctx.stats(Device::cpu()).outstanding == 1);
    CHECK(ctx.stats(Device::cuda(0)).outstanding == device_outstanding);
  }
  CHECK(ctx.stats().outstanding == 0);
}

TEST_CASE("cuda: a context's stream is its device's, and synchronize waits for what was queued", "[cuda]") {
  TestContext ctx(forge_test::cuda_options());
  const forge::Stream stream = ctx.stream();
  CHECK(stream.device() == Device::cuda(0));
  CHECK(stream.native() != nullptr);
  const forge::Stream side = ctx.new_stream();
  CHECK(side != stream);
  CHECK(side.device() == Device::cuda(0));

  Tensor x = ctx.ones({1 << 20});
  for (int i = 0; i < 20; ++i) x = x * 1.5 - 0.25;
  ctx.synchronize();
  const float want = [] {
    float v = 1;
    for (int i = 0; i < 20; ++i) v = v * 1.5f - 0.25f;
    return v;
  }();
  CHECK(x.max().item<float>() == Approx(want).epsilon(1e-6));
  CHECK(x.min().item<float>() == Approx(want).epsilon(1e-6));
  {
    forge::StreamGuard guard(side);
    CHECK(ctx.stream() == side);
    const Tensor y = ctx.full({256}, 3.0);
    CHECK(y.sum().item<float>() == 768.0f);
  }
  CHECK(ctx.stream() == stream);
}

TEST_CASE("cuda: a context for an ordinal past cuda_device_count() is a device error naming it", "[cuda]") {
  const int count = forge::cuda_device_count();
  REQUIRE(count > 0);
  for (const int ordinal : {count, count + 3}) {
    const std::string message =
        FORGE_REQUIRE_ERROR(device, "ExecContext", forge::ExecContext ctx({.device = Device::cuda(ordinal)}));
    CHECK(message.find(Device::cuda(ordinal).str()) != std::string::npos);
    CHECK(message.find(std::to_string(count)) != std::string::npos);  // how many are visible
  }
  // Nothing was left current: a context made afterwards works.
  TestContext ctx(forge_test::cuda_options());
  CHECK(ctx.ones({2}).sum().item<float>() == 2.0f);
}

TEST_CASE("cuda: an allocation larger than the device is out_of_memory naming the device, and the context goes on",
          "[cuda]") {
  TestContext ctx(forge_test::cuda_options());
  const Tensor kept = ctx.ones({1024});  // live across the failure
  const forge::PoolStats before = ctx.stats(Device::cuda(0));
  const std::int64_t elements = kMoreThanAnyGpuBytes / static_cast<std::int64_t>(sizeof(float));
  const std::string message = FORGE_REQUIRE_ERROR(out_of_memory, "empty", (void)ctx.empty({elements}));
  CHECK(message.find("cuda:0") != std::string::npos);
  CHECK(message.find(std::to_string(kMoreThanAnyGpuBytes)) != std::string::npos);
  const forge::PoolStats after = ctx.stats(Device::cuda(0));
  CHECK(after.failed_allocations == before.failed_allocations + 1);
  CHECK(after.cache_flushes == before.cache_flushes + 1);  // it emptied its cache and tried again
  CHECK(after.outstanding == before.outstanding);
  // The same from an op whose output is too large, and nothing of it stays.
  const std::string from_op =
      FORGE_REQUIRE_ERROR(out_of_memory, "clone", (void)ctx.ones({1}).expand({elements}).clone());
  CHECK(from_op.find("cuda:0") != std::string::npos);
  CHECK(ctx.stats(Device::cuda(0)).outstanding == before.outstanding);
  // The device still serves the context.
  CHECK(kept.sum().item<float>() == 1024.0f);
  CHECK((ctx.arange(4) + 1).to_vector<float>() == std::vector<float>{1, 2, 3, 4});
}
