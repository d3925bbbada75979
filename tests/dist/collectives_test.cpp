// The collectives against their definitions, on every rank (run under
// mpirun -np 2; correct for any size). Rank r's element i is a small integer
// function of (r, i), exact in every dtype, so each rank computes the
// expected result itself.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "dist_support.h"

using namespace forge;
using dist_test::options;

namespace {

double value(int rank, std::int64_t i) { return static_cast<double>((rank + 1) * (i % 5) - 2 * rank + (i % 3)); }

Tensor rank_tensor(ExecContext& ctx, int rank, const Shape& shape, DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(rank, static_cast<std::int64_t>(i));
  return ctx.from_vector(v, shape).to(dtype);
}

double expected(dist::ReduceOp op, int size, std::int64_t i) {
  double sum = 0, hi = value(0, i), lo = value(0, i);
  for (int r = 0; r < size; ++r) {
    sum += value(r, i);
    hi = std::max(hi, value(r, i));
    lo = std::min(lo, value(r, i));
  }
  switch (op) {
    case dist::ReduceOp::sum:
      return sum;
    case dist::ReduceOp::mean:
      return sum / size;
    case dist::ReduceOp::max:
      return hi;
    case dist::ReduceOp::min:
      return lo;
  }
  return 0;
}

}  // namespace

TEST_CASE("dist: the group is the job mpirun started", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options());
  CHECK(group.size() == dist_test::launched_size());
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) CHECK(group.rank() == std::atoi(r));
  CHECK(group.backend() == dist::Backend::mpi);
  CHECK(group.is_main() == (group.rank() == 0));
  CHECK((&dist::out0(group) == &std::cout) == group.is_main());
  // A second group of the same job: its own communicator, the same ranks.
  dist::ProcessGroup second(ctx, options());
  CHECK(second.rank() == group.rank());
}

TEST_CASE("dist: all_reduce of every dtype and op is its definition on every rank", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options());
  const int size = group.size();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8, DType::i8}) {
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::mean, dist::ReduceOp::max, dist::ReduceOp::min}) {
      INFO(dtype_name(dtype) << ' ' << dist::to_string(op));
      if (dtype == DType::u8 && op != dist::ReduceOp::max && op != dist::ReduceOp::min) continue;  // values < 0
      Tensor t = rank_tensor(ctx, group.rank(), {3, 7}, dtype);
      const std::uint32_t before = t.version();
      if (op == dist::ReduceOp::mean && !is_floating(dtype)) {
        try {
          group.all_reduce(t, op);
          FAIL("an integer mean was accepted");
        } catch (const Error& e) {
          CHECK(e.code() == ErrorCode::dtype);
          CHECK_THAT(e.what(), Catch::Contains("mean needs a floating dtype"));
        }
        continue;
      }
      group.all_reduce(t, op);
      CHECK(t.version() != before);
      const std::vector<double> got = t.to_vector<double>();
      for (std::int64_t i = 0; i < 21; ++i) {
        const double want = expected(op, size, i);
        if (dtype == DType::u8) continue;
        CHECK(got[static_cast<std::size_t>(i)] == Approx(want).margin(dtype == DType::bf16 ? 0.02 : 1e-6));
      }
    }
  }
  // bool: max is any, min is all; a sum is refused.
  Tensor flags = ctx.from_vector(std::vector<bool>{group.rank() == 0, true, false});
  group.all_reduce(flags, dist::ReduceOp::max);
  CHECK(flags.to_vector<bool>() == std::vector<bool>{true, true, false});
  CHECK_THROWS_AS(group.all_reduce(flags, dist::ReduceOp::sum), Error);
}

TEST_CASE("dist: collectives write through views and leave the rest of the buffer", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options());
  Tensor base = ctx.zeros({6, 4});
  base.fill_(7.0);
  Tensor view = base.narrow(1, 1, 2).t();  // [2, 6], strided
  REQUIRE_FALSE(view.is_contiguous());
  view.copy_(rank_tensor(ctx, group.rank(), {2, 6}, DType::f32));
  group.all_reduce(view, dist::ReduceOp::sum);
  const std::vector<float> got = base.to_vector<float>();
  const std::vector<float> v = view.contiguous().to_vector<float>();
  for (std::int64_t i = 0; i < 12; ++i)
    CHECK(v[static_cast<std::size_t>(i)] == expected(dist::ReduceOp::sum, group.size(), i));
  for (std::int64_t r = 0; r < 6; ++r) {
    CHECK(got[static_cast<std::size_t>(r * 4)] == 7.0f);
    CHECK(got[static_cast<std::size_t>(r * 4 + 3)] == 7.0f);
  }
}

TEST_CASE("dist: broadcast copies the root's tensor everywhere", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options());
  for (int root : {0, group.size() - 1}) {
    Tensor t = rank_tensor(ctx, group.rank(), {5}, DType::i64);
    group.broadcast(t, root);
    CHECK(t.to_vector<std::int64_t>() == rank_tensor(ctx, root, {5}, DType::i64).to_vector<std::int64_t>());
  }
  Tensor t = ctx.zeros({2});
  try {
    group.broadcast(t, group.size());
    FAIL("a root past the group was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::out_of_range);
  }
}

TEST_CASE("dist: all_gather and reduce_scatter place each rank's part", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options());
  const int size = group.size();
  Tensor in = rank_tensor(ctx, group.rank(), {2, 3}, DType::f32);
  Tensor all = group.all_gather(in);
  REQUIRE(all.shape() == Shape{size, 2, 3});
  for (int r = 0; r < size; ++r)
    CHECK(all.select(0, r).contiguous().to_vector<float>() ==
          rank_tensor(ctx, r, {2, 3}, DType::f32).to_vector<float>());

  // reduce_scatter: rank r keeps rows [3r, 3r + 3) of the sum.
  Tensor big = rank_tensor(ctx, group.rank(), {3 * size, 2}, DType::f64);
  Tensor mine = group.reduce_scatter(big, dist::ReduceOp::sum);
  REQUIRE(mine.shape() == Shape{3, 2});
  const std::vector<double> got = mine.to_vector<double>();
  for (std::int64_t i = 0; i < 6; ++i)
    CHECK(got[static_cast<std::size_t>(i)] == expected(dist::ReduceOp::sum, size, group.rank() * 6 + i));

  // Mismatched arguments are refused before anything is sent.
  Tensor wrong = ctx.zeros({size * 6 + 1});
  try {
    group.all_gather(wrong, in);
    FAIL("a wrong output size was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::shape);
  }
  CHECK_THROWS_AS(group.all_gather(ctx.zeros({size * 6}, DType::f64), in), Error);
  // An output that overlaps its input, or an expanded output, is refused.
  Tensor shared = ctx.zeros({size * 6 + 3});
  try {
    group.all_gather(shared.narrow(0, 0, size * 6), shared.narrow(0, 3, 6));
    FAIL("an all_gather into its own input was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
  }
  CHECK_THROWS_AS(group.all_reduce(ctx.zeros({1}).broadcast_to({4})), Error);
  if (size > 1) CHECK_THROWS_AS(group.reduce_scatter(ctx.zeros({3 * size + 1, 2})), Error);
}

TEST_CASE("dist: async collectives complete in any wait order", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options());
  std::vector<Tensor> ts;
  std::vector<dist::Work> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(rank_tensor(ctx, group.rank(), {1000 + k}, DType::f32));
    works.push_back(group.all_reduce_async(ts.back(), dist::ReduceOp::max));
  }
  for (int k = 3; k >= 0; --k) {
    works[static_cast<std::size_t>(k)].wait();
    CHECK(works[static_cast<std::size_t>(k)].is_completed());
    works[static_cast<std::size_t>(k)].wait();  // a second wait returns
  }
  for (int k = 0; k < 4; ++k) {
    const std::vector<float> got = ts[static_cast<std::size_t>(k)].to_vector<float>();
    for (std::int64_t i = 0; i < 1000 + k; i += 97)
      CHECK(got[static_cast<std::size_t>(i)] == expected(dist::ReduceOp::max, group.size(), i));
  }
  // A dropped Work still completes, results in place (a strided view copied
  // back by the group's next call).
  Tensor base = ctx.zeros({8, 2});
  Tensor dropped = base.select(1, 1);
  REQUIRE_FALSE(dropped.is_contiguous());
  dropped.copy_(rank_tensor(ctx, group.rank(), {8}, DType::f32));
  (void)group.all_reduce_async(dropped);
  group.barrier();
  group.barrier();  // the first may have found the reduction still running
  const std::vector<float> got = dropped.contiguous().to_vector<float>();
  for (std::int64_t i = 0; i < 8; ++i)
    CHECK(got[static_cast<std::size_t>(i)] == expected(dist::ReduceOp::sum, group.size(), i));
  CHECK_THROWS_AS(dist::Work().wait(), Error);
}

TEST_CASE("dist: barrier waits for the slowest rank", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options());
  group.barrier();
  const auto start = std::chrono::steady_clock::now();
  if (group.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  group.barrier();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (group.size() > 1) CHECK(ms >= 250);
}

TEST_CASE("dist: the debug check names both shapes of a mismatch on every rank", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options(/*debug=*/true));
  REQUIRE(group.debug());
  Tensor t = ctx.zeros({3 + group.rank(), 4});
  if (group.size() > 1) {
    try {
      group.all_reduce(t);
      FAIL("mismatched shapes were accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::shape);
      CHECK_THAT(e.what(), Catch::Contains("rank 0 has all_reduce of f32 [3, 4]"));
      CHECK_THAT(e.what(), Catch::Contains("rank 1 has all_reduce of f32 [4, 4]"));
    }
    // A call that one rank would refuse by itself (an integer mean) is refused on every rank.
    Tensor m = ctx.zeros({2}, group.rank() == 0 ? DType::f32 : DType::i32);
    try {
      group.all_reduce(m, dist::ReduceOp::mean);
      FAIL("mismatched dtypes were accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::dtype);
      CHECK_THAT(e.what(), Catch::Contains("the ranks disagree"));
    }
    // A root that differs is an argument mismatch.
    Tensor same = ctx.zeros({2});
    CHECK_THROWS_AS(group.broadcast(same, group.rank() == 0 ? 0 : 1), Error);
  }
  // The group is still usable.
  Tensor ok = ctx.ones({2, 2});
  group.all_reduce(ok);
  CHECK(ok.to_vector<float>() == std::vector<float>(4, static_cast<float>(group.size())));
}

TEST_CASE("dist: the distributed sampler gives disjoint shards that cover the data", "[collectives]") {
  ExecContext ctx;
  dist::ProcessGroup group(ctx, options());
  const std::int64_t n = 103;
  data::DistributedSampler shard(n, {.world_size = group.size(), .rank = group.rank(), .seed = 5});
  for (std::int64_t epoch : {0, 1}) {
    const std::vector<std::int64_t> mine = shard.indices(epoch);
    Tensor all = group.all_gather(ctx.from_vector(mine));
    std::vector<std::int64_t> every = all.to_vector<std::int64_t>();
    std::vector<int> seen(n, 0);
    for (std::int64_t i : every) seen[static_cast<std::size_t>(i)] += 1;
    for (std::int64_t i = 0; i < n; ++i) CHECK(seen[static_cast<std::size_t>(i)] >= 1);
    // Padding repeats at most size - 1 indices.
    CHECK(static_cast<std::int64_t>(every.size()) - n < group.size());
  }
}

TEST_CASE("dist: rank 0 writes the checkpoint and every rank reads it", "[collectives]") {
  ExecContext ctx({.seed = 10 + static_cast<std::uint64_t>(dist_test::launched_rank())});
  dist::ProcessGroup group(ctx, options());
  auto model = std::make_shared<nn::Linear>(ctx, 4, 3);
  // The path is rank 0's choice.
  Tensor stamp = ctx.from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(::getpid())});
  group.broadcast(stamp, 0);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("forge_dist_ckpt_" + std::to_string(stamp.item<std::int64_t>()));
  dist::save_checkpoint(group, path, {.model = model.get(), .step = 42});
  auto fresh = std::make_shared<nn::Linear>(ctx, 4, 3);
  const train::Checkpoint at = dist::load_checkpoint(group, path, {.model = fresh.get()});
  CHECK(at.step == 42);
  // Every rank now holds rank 0's weights.
  Tensor w = dist_test::named(*fresh, "weight").clone();
  Tensor w0 = w.clone();
  group.broadcast(w0, 0);
  CHECK(w.to_vector<float>() == w0.to_vector<float>());
  group.barrier();
  if (group.is_main()) std::filesystem::remove(path);

  // A write that fails on rank 0 fails everywhere.
  try {
    dist::save_checkpoint(group, "/nonexistent-dir/x.safetensors", {.model = model.get()});
    FAIL("a failed save returned");
  } catch (const Error& e) {
    if (group.is_main())
      CHECK(e.code() == ErrorCode::io);
    else
      CHECK_THAT(e.what(), Catch::Contains("rank 0 failed"));
  }
  // A file only some ranks can read fails everywhere too.
  try {
    (void)dist::load_checkpoint(group, group.rank() == 0 ? "/nonexistent-dir/y.safetensors" : path.string() + ".none",
                                {.model = fresh.get()});
    FAIL("a failed load returned");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::io);
  }
}
