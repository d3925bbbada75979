// Tensor hooks, post-accumulate hooks, retain_grad, hook handles and anomaly
// mode (docs/AUTOGRAD.md "Hooks", "Anomaly mode").

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::DType;
using forge::Tensor;
using forge_test::TestContext;
namespace autograd = forge::autograd;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("hooks: a non-leaf's hook sees its summed gradient once, before its node's VJP") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = x * 2.0;  // {2, 4}
  int calls = 0;
  std::vector<double> seen;
  autograd::HookHandle h = y.register_hook([&](const Tensor& g) {
    ++calls;
    seen = values(g);
    return g * 10.0;
  });
  (y * y + y).sum().backward();  // d/dy = 2y + 1, from two consumers
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{5, 9});
  CHECK(values(x.grad()) == std::vector<double>{100, 180});  // the replaced gradient went on through mul
  CHECK(h.active());
}

TEST_CASE("hooks: several hooks run in registration order, each on the previous one's result") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = x * 3.0;
  std::vector<std::string> order;
  std::vector<double> second_saw;
  autograd::HookHandle a = y.register_hook([&](const Tensor& g) {
    order.push_back("first");
    return g + 1.0;
  });
  autograd::HookHandle b = y.register_hook([&](const Tensor& g) {
    order.push_back("second");
    second_saw = values(g);
    return Tensor();  // undefined: leaves it as it is
  });
  autograd::HookHandle c = y.register_hook([&](const Tensor& g) {
    order.push_back("third");
    return g * 2.0;
  });
  y.sum().backward();
  CHECK(order == std::vector<std::string>{"first", "second", "third"});
  CHECK(second_saw == std::vector<double>{2, 2});
  CHECK(values(x.grad()) == std::vector<double>{12, 12});  // (1 + 1) * 2 * 3
}

TEST_CASE("hooks: remove() unregisters once, dropping a handle keeps the hook") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1}, {1}).requires_grad_();
  int kept = 0, removed = 0;
  {
    autograd::HookHandle dropped = x.register_hook([&](const Tensor&) {
      ++kept;
      return Tensor();
    });
  }
  autograd::HookHandle h = x.register_hook([&](const Tensor& g) {
    ++removed;
    return g * 100.0;
  });
  (x * 2.0).sum().backward();
  CHECK(kept == 1);
  CHECK(removed == 1);
  CHECK(values(x.grad()) == std::vector<double>{200});
  h.remove();
  CHECK_FALSE(h.active());
  h.remove();  // idempotent
  autograd::HookHandle moved = std::move(h);
  CHECK_FALSE(moved.active());
  (x * 2.0).sum().backward();
  CHECK(kept == 2);
  CHECK(removed == 1);
  CHECK(values(x.grad()) == std::vector<double>{202});
}

TEST_CASE("hooks: a hook may remove itself while it runs") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1}, {1}).requires_grad_();
  Tensor y = x * 2.0;
  int calls = 0;
  auto big = ctx.ones({1000}, DType::f64);  // captured: freed once the hook is gone
  autograd::HookHandle h;
  h = y.register_hook([&, big](const Tensor& g) {
    ++calls;
    h.remove();
    return g * big.sum();
  });
  y.sum().backward(Tensor(), /*retain_graph=*/true);
  y.sum().backward();
  CHECK(calls == 1);
  CHECK(values(x.grad()) == std::vector<double>{2000 + 2});
}

TEST_CASE("hooks: a leaf's hook sees its gradient summed over its uses, once, before accumulation") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  x.set_grad(ctx.from_vector<double>({1000, 1000}, {2}));
  std::vector<std::vector<double>> seen;
  autograd::HookHandle h = x.register_hook([&](const Tensor& g) {
    seen.push_back(values(g));
    return g * 2.0;
  });
  (x * x + x * 3.0).sum().backward();  // two edges into x: 2x and 3
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{5, 7});
  CHECK(values(x.grad()) == std::vector<double>{1010, 1014});  // accumulated after the hook
}

TEST_CASE("hooks: a leaf's hook runs when the leaf itself is the output of backward") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  int calls = 0;
  autograd::HookHandle h = x.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 4.0;
  });
  autograd::backward({x, x * 2.0}, {ctx.ones({2}, DType::f64), ctx.ones({2}, DType::f64)});
  CHECK(calls == 1);
  CHECK(values(x.grad()) == std::vector<double>{12, 12});  // (1 + 2) * 4
}

TEST_CASE("hooks: a hook returning a gradient of another shape or dtype is refused, leaving no .grad") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = x * 2.0;
  Tensor loss = y.sum();
  const std::int64_t baseline = ctx.pool().outstanding();
  {
    autograd::HookHandle h = y.register_hook([&](const Tensor& g) { return forge::sum(g); });
    const std::string msg = FORGE_REQUIRE_ERROR(shape, "register_hook", loss.backward(Tensor(), true));
    CHECK(msg.find("[2]") != std::string::npos);
    h.remove();
  }
  {
    autograd::HookHandle h = x.register_hook([&](const Tensor& g) { return g.to(DType::f32); });
    FORGE_REQUIRE_ERROR(dtype, "register_hook", loss.backward(Tensor(), true));
    h.remove();
  }
  CHECK_FALSE(x.grad().defined());
  CHECK(ctx.pool().outstanding() == baseline);
  loss.backward();
  CHECK(values(x.grad()) == std::vector<double>{2, 2});
}

TEST_CASE("hooks: hooks are refused on tensors that do not require grad, post-accumulate hooks on non-leaves") {
  TestContext ctx;
  Tensor plain = ctx.from_vector<double>({1}, {1});
  FORGE_REQUIRE_ERROR(backward, "register_hook", plain.register_hook([](const Tensor& g) { return g; }));
  FORGE_REQUIRE_ERROR(backward, "register_post_accumulate_grad_hook",
                      plain.register_post_accumulate_grad_hook([](const Tensor&) {}));
  FORGE_REQUIRE_ERROR(backward, "retain_grad", plain.retain_grad());
  Tensor x = ctx.from_vector<double>({1}, {1}).requires_grad_();
  Tensor y = x * 2.0;
  const std::string msg = FORGE_REQUIRE_ERROR(backward, "register_post_accumulate_grad_hook",
                                              y.register_post_accumulate_grad_hook([](const Tensor&) {}));
  CHECK(msg.find("mul") != std::string::npos);
  FORGE_REQUIRE_ERROR(invalid_argument, "register_hook", x.register_hook(nullptr));
}

TEST_CASE("hooks: autograd::grad runs tensor hooks on leaves and non-leaves, not post-accumulate hooks") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor w = ctx.from_vector<double>({3, 4}, {2}).requires_grad_();
  Tensor y = x * w;
  int leaf_calls = 0, node_calls = 0, post_calls = 0, other_leaf_calls = 0;
  autograd::HookHandle a = x.register_hook([&](const Tensor& g) {
    ++leaf_calls;
    return g + 100.0;
  });
  autograd::HookHandle b = y.register_hook([&](const Tensor& g) {
    ++node_calls;
    return g * 2.0;
  });
  autograd::HookHandle c = x.register_post_accumulate_grad_hook([&](const Tensor&) { ++post_calls; });
  autograd::HookHandle d = w.register_hook([&](const Tensor& g) {
    ++other_leaf_calls;  // w is not asked for: its hook does not run
    return g;
  });
  std::vector<Tensor> grads = autograd::grad({y.sum()}, {x, y});
  CHECK(values(grads[0]) == std::vector<double>{106, 108});  // 2 * w, then + 100
  CHECK(values(grads[1]) == std::vector<double>{2, 2});      // y's own gradient after its hook
  CHECK(leaf_calls == 1);
  CHECK(node_calls == 1);
  CHECK(post_calls == 0);
  CHECK(other_leaf_calls == 0);
  CHECK_FALSE(x.grad().defined());
}

// The pass: a = x*w0 (A), b = a*w1 (B), c = tanh(b) (C), d = c*w1 (D),
// loss = sum(d) (E). Backward runs E, D, C, B, A: w1 is final once B ran,
// while A (and so a's hook and w0) is still to come.
TEST_CASE("hooks: a post-accumulate hook runs once per pass, as soon as the leaf's .grad is complete") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({0.5, -1.0, 2.0}, {3});
  Tensor w0 = ctx.from_vector<double>({0.3, 0.7, -0.2}, {3}).requires_grad_();
  Tensor w1 = ctx.from_vector<double>({1.5, -0.5, 0.25}, {3}).requires_grad_();
  Tensor a = x * w0;
  Tensor loss = forge::sum(forge::tanh(a * w1) * w1);
  const std::vector<Tensor> expected = autograd::grad({loss}, {w0, w1}, {.retain_graph = true});

  int a_hook_calls = 0, w1_calls = 0, w0_calls = 0;
  autograd::HookHandle ha = a.register_hook([&](const Tensor&) {
    ++a_hook_calls;
    return Tensor();
  });
  autograd::HookHandle h1 = w1.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++w1_calls;
    CHECK(leaf.is_same(w1));
    REQUIRE(leaf.grad().defined());
    CHECK(values(leaf.grad()) == values(expected[1]));  // both contributions in
    CHECK(a_hook_calls == 0);                           // node A has not run yet
    CHECK_FALSE(w0.grad().defined());
  });
  autograd::HookHandle h0 = w0.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++w0_calls;
    CHECK(a_hook_calls == w0_calls);  // A ran before w0's .grad was final
    CHECK(values(leaf.grad()) == values(expected[0] * static_cast<double>(w0_calls)));
  });
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK(w1_calls == 1);
  CHECK(w0_calls == 1);
  CHECK(values(w1.grad()) == values(expected[1]));

  // A second pass: once more each, the hook sees the accumulated .grad.
  int second = 0;
  autograd::HookHandle h2 = w1.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++second;
    CHECK(values(leaf.grad()) == values(expected[1] * 2.0));
  });
  h1.remove();
  loss.backward();
  CHECK(second == 1);
  CHECK(w0_calls == 2);
}

TEST_CASE("hooks: a failing pass takes back a .grad handed to a post-accumulate hook") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({0.5, -1.0}, {2});
  Tensor w0 = ctx.from_vector<double>({0.3, 0.7}, {2}).requires_grad_();
  Tensor w1 = ctx.from_vector<double>({1.5, -0.5}, {2}).requires_grad_();
  Tensor a = x * w0;  // saves x for w0's gradient
  Tensor loss = forge::sum(a * w1);
  int calls = 0;
  autograd::HookHandle h = w1.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++calls;
    CHECK(leaf.grad().defined());
  });
  x.add_(1.0);  // the saved x is stale: node A will refuse
  const std::int64_t baseline = ctx.pool().outstanding();
  FORGE_REQUIRE_ERROR(backward, "mul", loss.backward());
  CHECK(calls == 1);
  CHECK_FALSE(w1.grad().defined());
  CHECK_FALSE(w0.grad().defined());
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("hooks: retain_grad keeps a non-leaf's gradient, a fresh tensor summed across passes") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = x * 3.0;  // {3, 6}
  Tensor loss = (y * y).sum();
  CHECK_FALSE(y.retains_grad());
  CHECK(&y.retain_grad() == &y);
  CHECK(y.retains_grad());
  x.retain_grad();  // a no-op on a leaf
  CHECK_FALSE(x.retains_grad());
  loss.backward(Tensor(), /*retain_graph=*/true);
  const Tensor first = y.grad();
  CHECK(values(first) == std::vector<double>{6, 12});
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK(values(y.grad()) == std::vector<double>{12, 24});
  CHECK(values(first) == std::vector<double>{6, 12});  // not written in place
  CHECK_FALSE(y.grad().is_same(first));
  // grad() leaves it alone; a hook runs before it is kept.
  autograd::grad({loss}, {x}, {.retain_graph = true});
  CHECK(values(y.grad()) == std::vector<double>{12, 24});
  autograd::HookHandle h = y.register_hook([](const Tensor& g) { return g * 0.5; });
  y.zero_grad();
  loss.backward();
  CHECK(values(y.grad()) == std::vector<double>{3, 6});
  CHECK(values(x.grad()) == std::vector<double>{18 + 18 + 9, 36 + 36 + 18});
}

TEST_CASE("hooks: retain_grad follows a tensor through an in-place op") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = x * 3.0;
  y.retain_grad();
  y.mul_(2.0);  // y is now the output of another node
  CHECK(y.retains_grad());
  (y * y).sum().backward();  // y = {6, 12}
  CHECK(values(y.grad()) == std::vector<double>{12, 24});
}

TEST_CASE("hooks: a handle outliving its tensor is inactive and can still be removed") {
  TestContext ctx;
  autograd::HookHandle leaf_handle, node_handle;
  {
    Tensor x = ctx.from_vector<double>({1}, {1}).requires_grad_();
    Tensor y = x * 2.0;
    leaf_handle = x.register_hook([](const Tensor& g) { return g; });
    node_handle = y.register_hook([](const Tensor& g) { return g; });
    CHECK(leaf_handle.active());
    CHECK(node_handle.active());
  }
  CHECK_FALSE(leaf_handle.active());
  CHECK_FALSE(node_handle.active());
  leaf_handle.remove();
  node_handle.remove();
}

TEST_CASE("anomaly: off by default, the guard turns it on for its scope") {
  CHECK_FALSE(autograd::AnomalyMode::is_enabled());
  {
    autograd::DetectAnomalyGuard guard;
    CHECK(autograd::AnomalyMode::is_enabled());
  }
  CHECK_FALSE(autograd::AnomalyMode::is_enabled());
}

TEST_CASE("anomaly: the backward of sqrt at a negative input is named as producing NaN") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({4, -1}, {2}).requires_grad_();
  Tensor loss = forge::sum(forge::sqrt(x) * 2.0);
  {
    // Off: backward succeeds and the NaN reaches .grad.
    loss.backward(Tensor(), /*retain_graph=*/true);
    CHECK(std::isnan(values(x.grad())[1]));
    x.zero_grad();
  }
  const std::int64_t baseline = ctx.pool().outstanding();
  autograd::DetectAnomalyGuard guard;
  const std::string msg = FORGE_REQUIRE_ERROR(backward, "backward", loss.backward());
  CHECK(msg.find("the backward of sqrt (recorded as node #") != std::string::npos);
  CHECK(msg.find("produced NaN in the gradient of input 0 of shape [2]") != std::string::npos);
  CHECK_FALSE(x.grad().defined());
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("anomaly: the backward of log at zero is named as producing Inf") {
  TestContext ctx;
  Tensor x = ctx.from_vector<float>({1, 0, 2}, {3}).requires_grad_();
  Tensor loss = forge::sum(forge::log(x));
  autograd::DetectAnomalyGuard guard;
  const std::string msg = FORGE_REQUIRE_ERROR(backward, "backward", loss.backward());
  CHECK(msg.find("the backward of log") != std::string::npos);
  CHECK(msg.find("produced Inf") != std::string::npos);
  // A finite pass is untouched by the mode.
  Tensor y = ctx.from_vector<float>({1, 2}, {2}).requires_grad_();
  forge::sum(forge::log(y)).backward();
  CHECK(values(y.grad()) == std::vector<double>{1.0, 0.5});
}
