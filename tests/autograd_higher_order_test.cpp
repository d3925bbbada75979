// Higher-order gradients: backward with create_graph records the backward
// pass, so gradients can be differentiated again. Hand-derived second
// derivatives, gradgradcheck in f64 over every rule family the docs list
// (elementwise, unary, reductions, matmul/linear, softmax/log_softmax,
// layer_norm/rms_norm, cross_entropy/nll_loss, views, attention), and the
// rules that refuse by name (conv2d, the pools).

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge_test::TestContext;
namespace autograd = forge::autograd;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor leaf(TestContext& ctx, const Shape& shape) { return ctx.randn(shape, DType::f64).requires_grad_(); }

void check_second_order(const Fn& fn, const std::vector<Tensor>& inputs,
                        const autograd::GradcheckOptions& options = {.atol = 1e-4, .rtol = 1e-3}) {
  const autograd::GradcheckResult r = autograd::gradgradcheck(fn, inputs, options);
  INFO("gradgradcheck: " << r.message << " (max abs error " << r.max_abs_error << ")");
  REQUIRE(r.ok);
}

}  // namespace

TEST_CASE("higher order: d2/dx2 of x^3 is 6x, and the first gradient has a history") {
  TestContext ctx;
  const auto baseline = ctx.stats().outstanding;
  {
    Tensor x = ctx.from_vector<double>({-1.5, 0.5, 2.0}, {3}).requires_grad_();
    Tensor y = forge::sum(x * x * x);
    const auto g = autograd::grad({y}, {x}, {.create_graph = true});
    REQUIRE(g[0].requires_grad());
    REQUIRE(g[0].grad_fn_name() != nullptr);
    const auto g1 = g[0].to_vector<double>();
    const auto xs = x.to_vector<double>();
    for (std::size_t i = 0; i < 3; ++i) CHECK(g1[i] == Approx(3 * xs[i] * xs[i]));
    forge::sum(g[0]).backward();
    const auto g2 = x.grad().to_vector<double>();
    for (std::size_t i = 0; i < 3; ++i) CHECK(g2[i] == Approx(6 * xs[i]));
  }
  CHECK(ctx.stats().outstanding == baseline);
}

TEST_CASE("higher order: Tensor::backward with create_graph leaves a .grad that can be differentiated") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({0.3, -0.7}, {2}).requires_grad_();
  forge::sum(forge::sin(x)).backward({}, false, /*create_graph=*/true);
  const Tensor first = x.grad();  // cos(x), with a history
  REQUIRE(first.requires_grad());
  x.zero_grad();
  forge::sum(first).backward();
  const auto xs = x.to_vector<double>();
  const auto second = x.grad().to_vector<double>();
  for (std::size_t i = 0; i < 2; ++i) CHECK(second[i] == Approx(-std::sin(xs[i])));
}

TEST_CASE("higher order: a gradient penalty trains through the gradient of a small MLP") {
  TestContext ctx;
  Tensor w1 = leaf(ctx, {4, 3}), b1 = leaf(ctx, {4}), w2 = leaf(ctx, {1, 4});
  Tensor x = ctx.randn({5, 3}, DType::f64).requires_grad_();
  auto net = [&](const std::vector<Tensor>& in) {
    autograd::GradModeGuard on(true);  // gradcheck's finite differences run under no grad
    const Tensor h = forge::tanh(forge::linear(in[0], in[1], in[2]));
    const Tensor out = forge::sum(forge::linear(h, in[3]));
    const auto gx = autograd::grad({out}, {in[0]}, {.create_graph = true});
    return forge::sum(forge::square(gx[0]));  // ||d out / dx||^2
  };
  autograd::GradcheckResult r = autograd::gradcheck(net, {x, w1, b1, w2});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("higher order: gradgradcheck of the elementwise and unary rules") {
  TestContext ctx;
  Tensor a = leaf(ctx, {2, 3}), b = leaf(ctx, {3});
  Tensor pos = ctx.rand({2, 3}, DType::f64).add(0.5).detach().requires_grad_();
  check_second_order([](const std::vector<Tensor>& in) { return in[0] * in[1] + in[0] / (in[1] * in[1] + 1.0); },
                     {a, b});
  check_second_order([](const std::vector<Tensor>& in) { return forge::pow(in[0], 3.0) - forge::exp(in[0]); }, {a});
  check_second_order([](const std::vector<Tensor>& in) { return forge::log(in[0]) + forge::sqrt(in[0]); }, {pos});
  check_second_order([](const std::vector<Tensor>& in) { return forge::rsqrt(in[0]) * forge::reciprocal(in[0]); },
                     {pos});
  check_second_order([](const std::vector<Tensor>& in) { return forge::sin(in[0]) * forge::cos(in[0]); }, {a});
  check_second_order([](const std::vector<Tensor>& in) { return forge::pow(in[0], in[1]); }, {pos, b});
}

TEST_CASE("higher order: gradgradcheck of the fused activations computed from ops") {
  TestContext ctx;
  Tensor x = leaf(ctx, {3, 4});
  check_second_order([](const std::vector<Tensor>& in) { return forge::tanh(in[0]); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::sigmoid(in[0]); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::silu(in[0]); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::gelu(in[0]); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::gelu(in[0], forge::GeluApproximation::tanh); },
                     {x});
  // relu: its second derivative is 0 away from the kink; the first derivative still flows to the gradient.
  check_second_order([](const std::vector<Tensor>& in) { return forge::relu(in[0]) * in[0]; }, {x});
}

TEST_CASE("higher order: gradgradcheck of reductions and views") {
  TestContext ctx;
  Tensor x = leaf(ctx, {3, 4});
  check_second_order([](const std::vector<Tensor>& in) { return forge::sum(forge::square(in[0]), {1}); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::mean(in[0] * in[0] * in[0], {0}); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::var(in[0], {1}); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::logsumexp(in[0], {1}); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::norm(in[0], 2.0, {1}); }, {x});
  check_second_order(
      [](const std::vector<Tensor>& in) {
        const Tensor y = forge::square(in[0]);
        return y.narrow(1, 1, 2).t() * y.select(0, 1).slice(0, 0, 4, 2).unsqueeze(1);
      },
      {x});
}

TEST_CASE("higher order: gradgradcheck of matmul and linear") {
  TestContext ctx;
  Tensor a = leaf(ctx, {2, 3}), b = leaf(ctx, {3, 4}), w = leaf(ctx, {5, 3}), bias = leaf(ctx, {5});
  check_second_order([](const std::vector<Tensor>& in) { return forge::square(forge::matmul(in[0], in[1])); }, {a, b});
  check_second_order([](const std::vector<Tensor>& in) { return forge::tanh(forge::linear(in[0], in[1], in[2])); },
                     {a, w, bias});
}

TEST_CASE("higher order: gradgradcheck of softmax, log_softmax and the norms") {
  TestContext ctx;
  Tensor x = leaf(ctx, {3, 5}), w = leaf(ctx, {5}), b = leaf(ctx, {5});
  check_second_order([](const std::vector<Tensor>& in) { return forge::softmax(in[0], -1); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::log_softmax(in[0], 0); }, {x});
  check_second_order(
      [](const std::vector<Tensor>& in) { return forge::layer_norm(in[0], Shape{5}, in[1], in[2], 1e-5); }, {x, w, b});
  check_second_order([](const std::vector<Tensor>& in) { return forge::layer_norm(in[0], Shape{5}); }, {x});
  check_second_order([](const std::vector<Tensor>& in) { return forge::rms_norm(in[0], Shape{5}, in[1], 1e-5); },
                     {x, w});
}

TEST_CASE("higher order: gradgradcheck of cross_entropy and nll_loss in every reduction") {
  TestContext ctx;
  Tensor logits = leaf(ctx, {4, 3});
  Tensor target = ctx.from_vector<std::int64_t>({2, 0, -100, 1}, {4});
  for (forge::Reduction r : {forge::Reduction::mean, forge::Reduction::sum, forge::Reduction::none}) {
    INFO("reduction " << static_cast<int>(r));
    check_second_order(
        [&](const std::vector<Tensor>& in) {
          return forge::cross_entropy(in[0], target, {.reduction = r, .label_smoothing = 0.1});
        },
        {logits});
    check_second_order(
        [&](const std::vector<Tensor>& in) { return forge::nll_loss(forge::log_softmax(in[0], 1), target, r); },
        {logits});
  }
  Tensor spatial = leaf(ctx, {2, 3, 2});  // [N, C, d]
  Tensor spatial_target = ctx.from_vector<std::int64_t>({0, 2, 1, 1}, {2, 2});
  check_second_order([&](const std::vector<Tensor>& in) { return forge::cross_entropy(in[0], spatial_target); },
                     {spatial});
}

TEST_CASE("higher order: gradgradcheck of attention, composed of recorded ops") {
  TestContext ctx;
  Tensor q = leaf(ctx, {1, 3, 4}), k = leaf(ctx, {1, 3, 4}), v = leaf(ctx, {1, 3, 4});
  check_second_order(
      [](const std::vector<Tensor>& in) {
        return forge::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), /*is_causal=*/true);
      },
      {q, k, v});
}

TEST_CASE("higher order: conv2d and the pools refuse create_graph by name, leaving nothing behind") {
  TestContext ctx;
  const auto baseline = ctx.stats().outstanding;
  {
    Tensor x = ctx.randn({1, 2, 5, 5}).requires_grad_();
    Tensor w = ctx.randn({3, 2, 3, 3}).requires_grad_();
    Tensor y = forge::sum(forge::square(forge::conv2d(x, w)));
    try {
      autograd::grad({y}, {x}, {.create_graph = true});
      FAIL("conv2d recorded its backward");
    } catch (const forge::Error& e) {
      CHECK(e.code() == forge::ErrorCode::not_implemented);
      CHECK_THAT(e.what(), Catch::Contains("conv2d") && Catch::Contains("create_graph"));
    }
    Tensor p = forge::sum(forge::square(forge::max_pool2d(x)));
    CHECK_THROWS_WITH(autograd::grad({p}, {x}, {.create_graph = true}), Catch::Contains("max_pool2d"));
    // Without create_graph the same graph still runs.
    Tensor y2 = forge::sum(forge::conv2d(x, w));
    CHECK(autograd::grad({y2}, {x})[0].shape() == x.shape());
  }
  CHECK(ctx.stats().outstanding == baseline);
}

TEST_CASE("higher order: a bias-only conv2d graph still records (the kernel is not needed)") {
  TestContext ctx;
  Tensor x = ctx.randn({1, 2, 4, 4}, DType::f64);
  Tensor w = ctx.randn({3, 2, 3, 3}, DType::f64);
  Tensor bias = leaf(ctx, {3});
  check_second_order([&](const std::vector<Tensor>& in) { return forge::square(forge::conv2d(x, w, in[0])); }, {bias});
}

TEST_CASE("higher order: dropout's recorded backward replays the same mask") {
  TestContext ctx;
  Tensor x = ctx.randn({64}, DType::f64).requires_grad_();
  Tensor y = forge::sum(forge::square(forge::dropout(x, 0.5, /*train=*/true)));
  const auto g = autograd::grad({y}, {x}, {.create_graph = true});  // 2 * d(x)^2-ish, masked
  forge::sum(g[0]).backward();
  // d/dx sum(2 m^2 x / (1-p)^2) = 2 m / (1-p)^2 per element: 8 where kept, 0 where dropped.
  const auto gx = g[0].to_vector<double>();
  const auto second = x.grad().to_vector<double>();
  int kept = 0;
  for (std::size_t i = 0; i < second.size(); ++i) {
    if (gx[i] != 0.0) {
      ++kept;
      CHECK(second[i] == Approx(8.0));
    } else {
      CHECK(second[i] == 0.0);
    }
  }
  CHECK(kept > 0);
}

TEST_CASE("higher order: gradgradcheck of the indexing and shape rules") {
  TestContext ctx;
  Tensor w = leaf(ctx, {4, 3});
  Tensor idx = ctx.from_vector<std::int64_t>({1, 3, 1, 0}, {2, 2});
  check_second_order([&](const std::vector<Tensor>& in) { return forge::square(forge::embedding(in[0], idx, 1)); },
                     {w});
  Tensor x = leaf(ctx, {3, 4});
  Tensor g_idx = ctx.from_vector<std::int64_t>({0, 2, 1, 3, 3, 0}, {3, 2});
  check_second_order([&](const std::vector<Tensor>& in) { return forge::square(forge::gather(in[0], 1, g_idx)); }, {x});
  Tensor src = leaf(ctx, {3, 3});  // wider than the index: the unread column gets zeros
  check_second_order(
      [&](const std::vector<Tensor>& in) { return forge::square(forge::scatter_add(in[0], 1, g_idx, in[1])); },
      {x, src});
  check_second_order(
      [](const std::vector<Tensor>& in) {
        const Tensor y = forge::cat({forge::square(in[0]), in[0] * in[1]}, 1);
        return forge::stack({y, forge::sin(y)}, 0);
      },
      {x, leaf(ctx, {3, 4})});
  check_second_order(
      [](const std::vector<Tensor>& in) {
        return forge::square(forge::pad(in[0], {1, 2}, forge::PadMode::reflect));
      },
      {x});
}

TEST_CASE("higher order: create_graph into an existing .grad replaces it with a recorded sum") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({0.5, -2.0}, {2}).requires_grad_();
  forge::sum(x * x).backward();  // .grad = 2x, no history
  REQUIRE_FALSE(x.grad().requires_grad());
  forge::sum(x * x * x).backward({}, false, /*create_graph=*/true);  // .grad = 2x + 3x^2, with a history
  const Tensor g = x.grad();
  REQUIRE(g.requires_grad());
  const auto xs = x.to_vector<double>();
  const auto gv = g.to_vector<double>();
  for (std::size_t i = 0; i < 2; ++i) CHECK(gv[i] == Approx(2 * xs[i] + 3 * xs[i] * xs[i]));
  const auto second = autograd::grad({forge::sum(g)}, {x});
  const auto sv = second[0].to_vector<double>();
  for (std::size_t i = 0; i < 2; ++i) CHECK(sv[i] == Approx(6 * xs[i]));  // the first term has no history
  // A .grad with a history reaches its own leaf: a cycle until .grad is dropped (as in libtorch).
  x.zero_grad();
}
