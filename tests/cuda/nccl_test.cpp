// The NCCL engine (src/distributed/nccl_comm.cpp) through ProcessGroup, in a
// group of one on cuda:0 (a process started without mpirun): every
// collective runs through NCCL on the device and leaves the values a group
// of one must, and what NCCL cannot do is refused before anything is queued.
// Built only where CMake found NCCL (FORGE_TEST_NCCL, tests/CMakeLists.txt),
// so that a build without it has no cases here rather than skipped ones.

#ifdef FORGE_TEST_NCCL

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_support.h"
#include "forge/distributed/process_group.h"
#include "forge/forge.h"
#include "support.h"

namespace {

namespace dist = forge::dist;
using forge::Device;
using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge_test::TestContext;

// Exact in bf16 and f16, so that every dtype gives them back unchanged.
const std::vector<float> kValues = {1.5f, -2.0f, 3.25f, 0.5f, -0.75f, 8.0f};

dist::ProcessGroupOptions nccl_options() { return {.backend = dist::Backend::nccl}; }

Tensor device_values(TestContext& ctx, DType dtype, const Shape& shape = {6}) {
  return ctx.from_vector(kValues, shape).to(dtype);
}

}  // namespace

TEST_CASE("nccl: a group of one on cuda:0 is an NCCL group of rank 0 and size 1", "[cuda][nccl]") {
  REQUIRE(dist::available(dist::Backend::nccl));
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  CHECK(group.backend() == dist::Backend::nccl);
  CHECK(group.rank() == 0);
  CHECK(group.size() == 1);
  CHECK(group.is_main());
  CHECK(&group.context() == &ctx);
}

TEST_CASE("nccl: all_reduce of a group of one gives f32 and bf16 device values back for sum, mean, max and min",
          "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const dist::ReduceOp op :
         {dist::ReduceOp::sum, dist::ReduceOp::mean, dist::ReduceOp::max, dist::ReduceOp::min}) {
      INFO(forge::dtype_name(dtype) << " " << dist::to_string(op));
      Tensor t = device_values(ctx, dtype);
      group.all_reduce(t, op);
      CHECK(t.device() == Device::cuda(0));
      CHECK(t.dtype() == dtype);
      CHECK(t.to_vector<float>() == kValues);
    }
  }
}

TEST_CASE("nccl: all_reduce sum takes every dtype NCCL reduces, and a strided view", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  for (const DType dtype : {DType::f64, DType::f16, DType::i32, DType::i64, DType::u8, DType::i8}) {
    INFO(forge::dtype_name(dtype));
    Tensor t = ctx.from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}).to(dtype);
    group.all_reduce(t);
    CHECK(t.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2, 3, 4, 5, 6});
  }
  // A column of a [3, 2] tensor: staged through a packed copy and written back.
  Tensor m = device_values(ctx, DType::f32, {3, 2});
  Tensor column = m.select(1, 1);
  REQUIRE_FALSE(column.is_contiguous());
  group.all_reduce(column, dist::ReduceOp::max);
  CHECK(column.to_vector<float>() == std::vector<float>{-2.0f, 0.5f, 8.0f});
  CHECK(m.to_vector<float>() == kValues);
}

TEST_CASE("nccl: broadcast from rank 0 keeps f32, bf16 and bool values", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  for (const DType dtype : {DType::f32, DType::bf16}) {
    INFO(forge::dtype_name(dtype));
    Tensor t = device_values(ctx, dtype, {2, 3});
    group.broadcast(t, 0);
    CHECK(t.shape() == Shape{2, 3});
    CHECK(t.to_vector<float>() == kValues);
  }
  Tensor flags = ctx.from_vector<bool>({true, false, true});
  group.broadcast(flags);
  CHECK(flags.to_vector<bool>() == std::vector<bool>{true, false, true});
}

TEST_CASE("nccl: all_gather of a group of one returns [1, ...] and fills an output tensor", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  for (const DType dtype : {DType::f32, DType::bf16}) {
    INFO(forge::dtype_name(dtype));
    const Tensor in = device_values(ctx, dtype, {2, 3});
    const Tensor gathered = group.all_gather(in);
    CHECK(gathered.shape() == Shape{1, 2, 3});
    CHECK(gathered.dtype() == dtype);
    CHECK(gathered.device() == Device::cuda(0));
    CHECK(gathered.to_vector<float>() == kValues);

    // Into zeros: the values must have moved through NCCL.
    Tensor out = ctx.zeros({6}, dtype);
    group.all_gather(out, in);
    CHECK(out.to_vector<float>() == kValues);
  }
  const Tensor flags = ctx.from_vector<bool>({false, true});
  CHECK(group.all_gather(flags).to_vector<bool>() == std::vector<bool>{false, true});
}

TEST_CASE("nccl: reduce_scatter of a group of one keeps every element, into a new or a given tensor", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  for (const DType dtype : {DType::f32, DType::bf16}) {
    INFO(forge::dtype_name(dtype));
    const Tensor in = device_values(ctx, dtype, {3, 2});
    const Tensor scattered = group.reduce_scatter(in);
    CHECK(scattered.shape() == Shape{3, 2});
    CHECK(scattered.to_vector<float>() == kValues);

    Tensor out = ctx.zeros({6}, dtype);
    group.reduce_scatter(out, in, dist::ReduceOp::mean);
    CHECK(out.to_vector<float>() == kValues);
  }
}

TEST_CASE("nccl: barrier returns, and collectives run after it", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  group.barrier();
  group.barrier();
  Tensor t = device_values(ctx, DType::f32);
  group.all_reduce(t);
  CHECK(t.to_vector<float>() == kValues);
}

TEST_CASE("nccl: async collectives complete when waited, in any order", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  Tensor a = device_values(ctx, DType::f32);
  Tensor b = device_values(ctx, DType::bf16);
  const Tensor c = device_values(ctx, DType::f32);
  Tensor out = ctx.zeros({6});
  dist::Work first = group.all_reduce_async(a, dist::ReduceOp::sum);
  dist::Work second = group.broadcast_async(b, 0);
  dist::Work third = group.all_gather_async(out, c);
  REQUIRE(first.defined());
  third.wait();
  second.wait();
  first.wait();
  CHECK(first.is_completed());
  CHECK(second.is_completed());
  CHECK(third.is_completed());
  first.wait();  // a second wait returns at once
  CHECK(a.to_vector<float>() == kValues);
  CHECK(b.to_vector<float>() == kValues);
  CHECK(out.to_vector<float>() == kValues);
}

TEST_CASE("nccl: collectives queue on the current stream under a StreamGuard", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  const forge::Stream side = ctx.new_stream();
  {
    const forge::StreamGuard guard(side);
    Tensor t = device_values(ctx, DType::f32);
    Tensor out = ctx.zeros({6});
    group.all_gather(out, t);
    CHECK(out.to_vector<float>() == kValues);
  }
  side.synchronize();
}

TEST_CASE("nccl: a host tensor on an NCCL group is refused as a device error", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  Tensor host = ctx.from_vector(kValues).cpu();
  REQUIRE(host.device() == Device::cpu());
  FORGE_REQUIRE_ERROR(device, "all_reduce", group.all_reduce(host));
  CHECK(host.to_vector<float>() == kValues);
}

TEST_CASE("nccl: reductions NCCL cannot do are refused as dtype errors", "[cuda][nccl]") {
  TestContext ctx(forge_test::cuda_options());
  dist::ProcessGroup group(ctx, nccl_options());
  Tensor flags = ctx.from_vector<bool>({true, false});
  const std::string no_bool = FORGE_REQUIRE_ERROR(dtype, "all_reduce", group.all_reduce(flags));
  CHECK(no_bool.find("NCCL has no reduction for bool") != std::string::npos);
  Tensor ints = ctx.from_vector<std::int32_t>({1, 2});
  const std::string no_mean = FORGE_REQUIRE_ERROR(dtype, "all_reduce", group.all_reduce(ints, dist::ReduceOp::mean));
  CHECK(no_mean.find("mean needs a floating dtype") != std::string::npos);
  // The group is still usable.
  group.all_reduce(ints, dist::ReduceOp::max);
  CHECK(ints.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2});
}

TEST_CASE("nccl: an NCCL group on a CPU context is refused as a device error", "[cuda][nccl]") {
  TestContext cpu;
  FORGE_REQUIRE_ERROR(device, "ProcessGroup", dist::ProcessGroup(cpu, nccl_options()));
}

#endif  // FORGE_TEST_NCCL
