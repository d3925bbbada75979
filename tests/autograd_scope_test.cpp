// Autograd with exec scopes (DESIGN §8 in training): gradients through a
// scope, a training loop whose outstanding buffers return to one baseline
// after every step with no system allocation after the first, saved values
// released by backward without a scope, and failures inside a scoped step
// (bad input, injected allocation failures in forward and backward) that
// release everything they took exactly once.

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::DType;
using forge::Tensor;
using forge_test::TestContext;

namespace {

// A two-layer MLP: 8 -> 32 -> 4, ReLU, cross-entropy.
struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(forge::ExecContext& ctx)
      : w1((ctx.randn({32, 8}) * 0.3).requires_grad_()),
        b1(ctx.zeros({32}).requires_grad_()),
        w2((ctx.randn({4, 32}) * 0.3).requires_grad_()),
        b2(ctx.zeros({4}).requires_grad_()) {}
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    const Tensor h = forge::relu(forge::linear(x, w1, b1));
    return forge::cross_entropy(forge::linear(h, w2, b2), y);
  }
};

struct Batch {
  Tensor x, y;
  explicit Batch(forge::ExecContext& ctx)
      : x(ctx.randn({16, 8})),
        y(ctx.from_vector<std::int64_t>({0, 1, 2, 3, 0, 1, 2, 3, 3, 2, 1, 0, 0, 0, 1, 1}, {16})) {}
};

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("autograd scope: d/dx of x*x*x at {1,2,3} inside a scope is {3,12,27}") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  const std::int64_t baseline = ctx.pool().outstanding();
  {
    auto scope = ctx.open_exec_scope();
    (x * x * x).sum().backward();
    CHECK(scope.stats().buffers >= 3);
  }
  CHECK(values(x.grad()) == std::vector<double>{3, 12, 27});
  x.zero_grad();
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("autograd scope: scoped and unscoped steps give identical gradients") {
  TestContext ctx({.threads = 2, .seed = 7});
  Mlp mlp(ctx);
  Batch batch(ctx);
  mlp.loss(batch.x, batch.y).backward();
  std::vector<std::vector<double>> plain;
  for (Tensor& p : mlp.params()) {
    plain.push_back(values(p.grad()));
    p.zero_grad();
  }
  {
    auto scope = ctx.open_exec_scope();
    mlp.loss(batch.x, batch.y).backward();
  }
  auto params = mlp.params();
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(values(params[i].grad()) == plain[i]);
}

TEST_CASE("autograd scope: 100 training steps return to one baseline, no system allocation after step 1") {
  TestContext ctx({.threads = 2, .seed = 3});
  Mlp mlp(ctx);
  Batch batch(ctx);
  forge::optim::Adam adam(mlp.params(), {.lr = 0.01});
  const std::int64_t baseline = ctx.pool().outstanding();  // parameters, batch, Adam's moments
  double first_loss = 0, last_loss = 0;
  std::uint64_t allocations_after_first = 0;
  for (int step = 0; step < 100; ++step) {
    {
      auto scope = ctx.open_exec_scope();
      Tensor loss = mlp.loss(batch.x, batch.y);
      (step == 0 ? first_loss : last_loss) = loss.item<float>();
      loss.backward();
      adam.step();
      adam.zero_grad();
    }
    INFO("step " << step);
    REQUIRE(ctx.pool().outstanding() == baseline);
    if (step == 0) allocations_after_first = ctx.stats().system_allocations;
  }
  CHECK(ctx.stats().system_allocations == allocations_after_first);
  CHECK(last_loss < 0.5 * first_loss);  // it learns
}

TEST_CASE("autograd scope: 100 steps under release and recompute return to one baseline, warm after step 1") {
  for (const forge::ScopePolicy policy : {forge::ScopePolicy::release, forge::ScopePolicy::recompute}) {
    INFO("policy " << forge::to_string(policy));
    TestContext ctx({.threads = 2, .seed = 3});
    Mlp mlp(ctx);
    Batch batch(ctx);
    forge::optim::Adam adam(mlp.params(), {.lr = 0.01});
    const std::int64_t baseline = ctx.pool().outstanding();
    double first_loss = 0, last_loss = 0;
    std::uint64_t allocations_after_first = 0;
    for (int step = 0; step < 100; ++step) {
      {
        auto scope = ctx.open_exec_scope(policy);
        // The whole loss as one checkpoint under recompute, a plain call under release.
        Tensor loss =
            scope.run([&](const std::vector<Tensor>& in) { return mlp.loss(in[0], in[1]); }, {batch.x, batch.y});
        (step == 0 ? first_loss : last_loss) = loss.item<float>();
        loss.backward();
        adam.step();
        adam.zero_grad();
        REQUIRE(scope.stats().buffers == 0);
        REQUIRE(scope.stats().recomputes == (policy == forge::ScopePolicy::recompute ? 1u : 0u));
      }
      INFO("step " << step);
      REQUIRE(ctx.pool().outstanding() == baseline);
      if (step == 0) allocations_after_first = ctx.stats().system_allocations;
    }
    CHECK(ctx.stats().system_allocations == allocations_after_first);
    CHECK(last_loss < 0.5 * first_loss);
  }
}

TEST_CASE("autograd scope: without a scope, backward releases the saved activations as each node runs") {
  TestContext ctx({.threads = 2, .seed = 5});
  Mlp mlp(ctx);
  Batch batch(ctx);
  const std::int64_t baseline = ctx.pool().outstanding();
  Tensor loss = mlp.loss(batch.x, batch.y);
  const std::int64_t after_forward = ctx.pool().outstanding();
  CHECK(after_forward > baseline + 1);  // the graph holds activations
  loss.backward();
  // Left: the loss value and one .grad per parameter.
  CHECK(ctx.pool().outstanding() == baseline + 1 + 4);
  loss = Tensor();
  for (Tensor& p : mlp.params()) p.zero_grad();
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("autograd scope: a failing op inside a scoped step releases everything once") {
  TestContext ctx({.threads = 2, .seed = 11});
  Mlp mlp(ctx);
  Batch batch(ctx);
  const std::int64_t baseline = ctx.pool().outstanding();
  SECTION("bad input in the forward") {
    const Tensor wrong = ctx.randn({16, 5});
    auto scope = ctx.open_exec_scope();
    FORGE_REQUIRE_ERROR(shape, "linear", mlp.loss(wrong, batch.y));
  }
  SECTION("a gradient of the wrong shape") {
    auto scope = ctx.open_exec_scope();
    Tensor h = forge::linear(batch.x, mlp.w1, mlp.b1);
    FORGE_REQUIRE_ERROR(shape, "backward", h.backward(ctx.ones({2, 2})));
  }
  CHECK(ctx.pool().outstanding() == baseline);
  for (const Tensor& p : mlp.params()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("autograd scope: an allocation failure at any point of a step releases everything once") {
  // Walk the failure over every system allocation of a cold step: forward,
  // backward and the optimizer. Each attempt must fail cleanly or succeed.
  int failures = 0;
  for (std::uint64_t n = 1; n < 200; ++n) {
    TestContext ctx({.threads = 2, .seed = 13});
    Mlp mlp(ctx);
    Batch batch(ctx);
    const auto before = mlp.w1.to_vector<float>();
    const std::int64_t baseline = ctx.pool().outstanding();
    ctx.pool().trim();
    ctx.pool().fail_system_allocation_after(n);
    bool failed = false;
    try {
      auto scope = ctx.open_exec_scope();
      Tensor loss = mlp.loss(batch.x, batch.y);
      loss.backward();
    } catch (const forge::Error& e) {
      REQUIRE(e.code() == forge::ErrorCode::out_of_memory);
      failed = true;
      ++failures;
    }
    ctx.pool().fail_system_allocation_after(0);
    INFO("failing allocation " << n);
    for (Tensor& p : mlp.params()) p.zero_grad();
    REQUIRE(ctx.pool().outstanding() == baseline);
    CHECK(mlp.w1.to_vector<float>() == before);
    // The next step with the hook off succeeds.
    mlp.loss(batch.x, batch.y).backward();
    CHECK(mlp.w1.grad().defined());
    for (Tensor& p : mlp.params()) p.zero_grad();
    if (!failed) break;
  }
  CHECK(failures > 5);
}
