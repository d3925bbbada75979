// Exec scopes (DESIGN §8): what a scope holds, nesting, identical results
// with and without a scope, stats, failed ops and views inside a scope, and
// ctx.replace.

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::BufferPool;
using forge::DType;
using forge::ExecScope;
using forge::Tensor;
using forge_test::TestContext;

namespace {

// One op of the chain: an add, a mul or a relu, each producing a new 64x64 tensor.
Tensor chain_op(int i, const Tensor& h, const Tensor& x) {
  switch (i % 3) {
    case 0:
      return h + x;
    case 1:
      return h * x;
    default:
      return forge::relu(h);
  }
}

constexpr int kChainOps = 16;

// A forward with broadcasting, type promotion, a strided (transposed) operand
// and a chain of intermediates.
Tensor forward(const Tensor& x, const Tensor& bias, const Tensor& scale64) {
  Tensor h = x + bias;                     // [64, 64] + [64]
  h = forge::relu(h * x.transpose(0, 1));  // strided operand
  h = h + h.transpose(0, 1);
  Tensor wide = h * scale64;  // f32 * f64 -> f64
  Tensor back = wide.to(DType::f32);
  for (int i = 0; i < 6; ++i) back = chain_op(i, back, x);
  return back;
}

std::vector<std::uint32_t> bits(const Tensor& t) {
  std::vector<std::uint32_t> out;
  for (float v : t.to_vector<float>()) out.push_back(std::bit_cast<std::uint32_t>(v));
  return out;
}

}  // namespace

TEST_CASE("exec_scope: a 16-op chain keeps at most 2 buffers outstanding without a scope") {
  TestContext ctx;
  ctx.manual_seed(11);
  const Tensor x = ctx.rand({64, 64});
  const std::int64_t baseline = ctx.pool().outstanding();
  std::int64_t most = 0;
  {
    Tensor h = x;
    for (int i = 0; i < kChainOps; ++i) {
      h = chain_op(i, h, x);
      const std::int64_t above = ctx.pool().outstanding() - baseline;
      INFO("after op " << i);
      CHECK(above <= 2);
      most = std::max(most, above);
    }
    CHECK(most >= 1);  // the chain's result is alive
  }
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: a 16-op chain inside a scope holds exactly 16 buffers until close") {
  TestContext ctx;
  ctx.manual_seed(11);
  const Tensor x = ctx.rand({64, 64});
  const std::int64_t baseline = ctx.pool().outstanding();
  std::vector<float> result;
  {
    auto scope = ctx.open_exec_scope();
    CHECK(scope.is_open());
    {
      Tensor h = x;
      for (int i = 0; i < kChainOps; ++i) {
        h = chain_op(i, h, x);
        CHECK(ctx.pool().outstanding() - baseline == i + 1);
      }
      result = h.to_vector<float>();
    }
    // Every intermediate is still held, though no handle is left.
    CHECK(ctx.pool().outstanding() - baseline == kChainOps);
    CHECK(scope.stats().buffers == static_cast<std::size_t>(kChainOps));
    CHECK(scope.stats().bytes == kChainOps * BufferPool::rounded_size(64 * 64 * sizeof(float)));
    scope.close();
    CHECK_FALSE(scope.is_open());
    CHECK(ctx.pool().outstanding() == baseline);
    scope.close();  // idempotent
    CHECK(ctx.pool().outstanding() == baseline);
  }
  CHECK(ctx.pool().outstanding() == baseline);

  // A handle the caller keeps survives the close: the scope only drops its own hold.
  Tensor kept;
  {
    auto scope = ctx.open_exec_scope();
    Tensor h = x;
    for (int i = 0; i < kChainOps; ++i) h = chain_op(i, h, x);
    kept = h;
  }  // closed by its destructor
  CHECK(ctx.pool().outstanding() == baseline + 1);
  CHECK(kept.to_vector<float>() == result);
  kept = Tensor();
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: nested scopes release only their own suffix") {
  TestContext ctx;
  const Tensor x = ctx.ones({64, 64});
  const std::int64_t baseline = ctx.pool().outstanding();
  constexpr int N = 3, M = 5;
  {
    auto outer = ctx.open_exec_scope();
    for (int i = 0; i < N; ++i) (void)(x + x);
    REQUIRE(ctx.pool().outstanding() == baseline + N);
    {
      auto inner = ctx.open_exec_scope();
      for (int i = 0; i < M; ++i) (void)(x * x);
      CHECK(ctx.pool().outstanding() == baseline + N + M);
      CHECK(inner.stats().buffers == static_cast<std::size_t>(M));
      inner.close();
      CHECK(ctx.pool().outstanding() == baseline + N);              // exactly M dropped
      CHECK(inner.stats().buffers == static_cast<std::size_t>(M));  // what it held when it closed
      CHECK(outer.is_open());
    }
    CHECK(ctx.pool().outstanding() == baseline + N);
    // The outer scope keeps adopting after the inner one closed.
    (void)forge::relu(x);
    CHECK(ctx.pool().outstanding() == baseline + N + 1);
    CHECK(outer.stats().buffers == static_cast<std::size_t>(N + 1));
    outer.close();
    CHECK(ctx.pool().outstanding() == baseline);
  }
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: closing the outer scope also closes an inner one still open") {
  TestContext ctx;
  const Tensor x = ctx.ones({64, 64});
  const std::int64_t baseline = ctx.pool().outstanding();
  {
    auto outer = ctx.open_exec_scope();
    (void)(x + x);
    auto inner = ctx.open_exec_scope();
    (void)(x * x);
    (void)(x * x);
    REQUIRE(ctx.pool().outstanding() == baseline + 3);
    outer.close();
    CHECK_FALSE(outer.is_open());
    CHECK_FALSE(inner.is_open());
    CHECK(ctx.pool().outstanding() == baseline);
    inner.close();  // nothing left to release: no double release
    CHECK(ctx.pool().outstanding() == baseline);
    // Ops after both closed are not held by anything.
    (void)(x + x);
    CHECK(ctx.pool().outstanding() == baseline);
  }  // both destructors run: still no double release
  CHECK(ctx.pool().outstanding() == baseline);

  // A scope opened afterwards works normally.
  {
    auto again = ctx.open_exec_scope();
    (void)(x + x);
    CHECK(ctx.pool().outstanding() == baseline + 1);
  }
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: destroying scopes out of order releases each buffer once") {
  TestContext ctx;
  const Tensor x = ctx.ones({8, 8});
  const std::int64_t baseline = ctx.pool().outstanding();
  std::optional<ExecScope> outer, inner;
  outer.emplace(ctx.open_exec_scope());
  (void)(x + x);
  inner.emplace(ctx.open_exec_scope());
  (void)(x + x);
  (void)(x + x);
  outer.reset();  // the outer dies first and takes the inner's buffers with it
  CHECK(ctx.pool().outstanding() == baseline);
  CHECK_FALSE(inner->is_open());
  inner.reset();
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: a moved scope keeps its hold, the moved-from one releases nothing") {
  TestContext ctx;
  const Tensor x = ctx.ones({8, 8});
  const std::int64_t baseline = ctx.pool().outstanding();
  {
    auto first = ctx.open_exec_scope();
    (void)(x + x);
    ExecScope second(std::move(first));
    CHECK_FALSE(first.is_open());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
    CHECK(second.is_open());
    first.close();
    CHECK(ctx.pool().outstanding() == baseline + 1);
    (void)(x + x);
    CHECK(second.stats().buffers == 2);
    second.close();
    CHECK(ctx.pool().outstanding() == baseline);
  }
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: scoped and unscoped runs of a forward give identical values") {
  TestContext ctx;
  ctx.manual_seed(5);
  const Tensor x = ctx.randn({64, 64});
  const Tensor bias = ctx.randn({64});
  const Tensor scale = ctx.full({1}, 0.75, DType::f64);
  const std::int64_t baseline = ctx.pool().outstanding();

  const auto unscoped = bits(forward(x, bias, scale));
  CHECK(ctx.pool().outstanding() == baseline);

  std::vector<std::uint32_t> scoped;
  std::size_t held = 0;
  {
    auto scope = ctx.open_exec_scope();
    scoped = bits(forward(x, bias, scale));
    held = scope.stats().buffers;
  }
  CHECK(held > 0);
  CHECK(ctx.pool().outstanding() == baseline);
  REQUIRE(scoped.size() == unscoped.size());
  CHECK(scoped == unscoped);

  // And again unscoped after the scope: the recycled buffers do not change anything.
  CHECK(bits(forward(x, bias, scale)) == unscoped);
}

TEST_CASE("exec_scope: stats report buffers, block bytes and the peak") {
  TestContext ctx;
  const Tensor a = ctx.ones({10});    // outputs of 40 bytes
  const Tensor b = ctx.ones({100});   // 400
  const Tensor c = ctx.ones({2000});  // 8000
  const Tensor d = ctx.ones({5000});  // 20000
  const std::int64_t baseline = ctx.pool().outstanding();

  auto scope = ctx.open_exec_scope();
  CHECK(scope.stats().buffers == 0);
  CHECK(scope.stats().bytes == 0);
  std::size_t expected = 0;
  {
    const Tensor outs[] = {a + a, b * b, forge::relu(c), d + d};
    for (const Tensor& t : outs) expected += BufferPool::rounded_size(t.nbytes());
  }
  const std::size_t live_now = ctx.pool().live_bytes();
  const auto open = scope.stats();
  CHECK(open.buffers == 4);
  CHECK(open.bytes == expected);
  CHECK(open.bytes == 64 + 512 + 8192 + 20480);
  CHECK(open.peak_live_bytes >= open.bytes);
  CHECK(open.peak_live_bytes >= live_now);
  CHECK(ctx.pool().outstanding() == baseline + 4);

  scope.close();
  const auto closed = scope.stats();
  CHECK(closed.buffers == 4);
  CHECK(closed.bytes == expected);
  CHECK(closed.peak_live_bytes >= closed.bytes);
  CHECK(closed.peak_live_bytes >= live_now);  // everything held plus the inputs was live at once
  CHECK(closed.peak_live_bytes <= ctx.stats().peak_live_bytes);
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: the peak of a scope covers an op's transient temporaries") {
  TestContext ctx;
  const Tensor f = ctx.ones({300});                   // f32, 1200 bytes
  const Tensor g = ctx.full({300}, 2.0, DType::f64);  // f64, 2400 bytes
  auto scope = ctx.open_exec_scope();
  const std::size_t live_at_open = ctx.pool().live_bytes();
  // f + g promotes to f64: f is converted into a temporary (not held by the
  // scope) that is live together with the output.
  (void)(f + g);
  const std::size_t f64_block = BufferPool::rounded_size(300 * sizeof(double));
  scope.close();
  CHECK(scope.stats().buffers == 1);
  CHECK(scope.stats().bytes == f64_block);
  CHECK(scope.stats().peak_live_bytes >= live_at_open + 2 * f64_block);
}

TEST_CASE("exec_scope: a failed op inside a scope leaves outstanding unchanged") {
  TestContext ctx;
  const Tensor a3 = ctx.ones({3});
  const Tensor a4 = ctx.ones({4});
  const Tensor f = ctx.ones({300});
  const Tensor g = ctx.full({300}, 2.0, DType::f64);
  const std::int64_t baseline = ctx.pool().outstanding();
  auto scope = ctx.open_exec_scope();
  (void)(a3 + a3);
  REQUIRE(ctx.pool().outstanding() == baseline + 1);

  SECTION("shapes that do not broadcast") {
    FORGE_REQUIRE_ERROR(shape, "add", a3 + a4);
    FORGE_REQUIRE_ERROR(shape, "mul", a4 * a3);
  }
  SECTION("an injected allocation failure of the output") {
    ctx.pool().trim();
    ctx.pool().fail_system_allocation_after(1);
    FORGE_REQUIRE_ERROR(out_of_memory, "add", f + f);
  }
  SECTION("an injected failure after a cast temporary was allocated") {
    ctx.pool().trim();
    ctx.pool().fail_system_allocation_after(2);
    FORGE_REQUIRE_ERROR(out_of_memory, "add", f + g);
  }
  CHECK(ctx.pool().outstanding() == baseline + 1);
  CHECK(scope.stats().buffers == 1);
  // The scope still works.
  (void)(f + g);
  CHECK(ctx.pool().outstanding() == baseline + 2);
  CHECK(scope.stats().buffers == 2);
  scope.close();
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: views made inside a scope are not adopted") {
  TestContext ctx;
  const Tensor x = ctx.ones({8, 16});
  const std::int64_t baseline = ctx.pool().outstanding();
  auto scope = ctx.open_exec_scope();
  {
    Tensor t = x.transpose(0, 1);
    Tensor n = x.narrow(1, 2, 4);
    Tensor r = x.reshape({16, 8});
    Tensor v = x.view({128});
    Tensor c = x.clone_view();
    Tensor e = x.unsqueeze(0).expand({3, 8, 16});
    Tensor s = x.select(0, 1);
    CHECK(t.buffer() == x.buffer());
    CHECK(r.buffer() == x.buffer());
    CHECK(scope.stats().buffers == 0);
    CHECK(ctx.pool().outstanding() == baseline);
  }
  CHECK(scope.stats().buffers == 0);
  CHECK(ctx.pool().outstanding() == baseline);
  // An op on a view is an op: its output is adopted.
  (void)forge::relu(x.transpose(0, 1));
  CHECK(scope.stats().buffers == 1);
  scope.close();
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("exec_scope: ctx.replace carries a value and releases the old buffer") {
  TestContext ctx;
  ctx.manual_seed(9);
  const Tensor x = ctx.randn({32, 32});
  Tensor state = ctx.randn({32, 32});
  std::vector<float> expect = state.to_vector<float>();
  const std::vector<float> xs = x.to_vector<float>();
  const std::int64_t baseline = ctx.pool().outstanding();
  for (int step = 0; step < 20; ++step) {
    ctx.replace(state, forge::relu(state + x) * x);
    for (std::size_t i = 0; i < expect.size(); ++i) {
      const float s = expect[i] + xs[i];
      expect[i] = (s > 0 ? s : 0.0f) * xs[i];
    }
    INFO("step " << step);
    CHECK(ctx.pool().outstanding() == baseline);
  }
  CHECK(state.to_vector<float>() == expect);

  // x = f(x) does the same.
  for (int step = 0; step < 5; ++step) {
    state = state + x;
    CHECK(ctx.pool().outstanding() == baseline);
  }
}
