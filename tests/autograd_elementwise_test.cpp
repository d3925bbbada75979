// Gradients of the elementwise and unary ops (src/autograd/rules/elementwise.cpp,
// unary.cpp): every differentiable op under check_gradients (broadcast shapes,
// transposed leaves, each option), libtorch's conventions at the kinks and
// ties, the fused activation kernels against the composed fallback, 16-bit
// inputs, and the non-differentiable ops recording nothing.

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::DType;
using forge::Tensor;
using forge_test::check_gradients;
using forge_test::TestContext;
namespace autograd = forge::autograd;

namespace {

using Inputs = std::vector<Tensor>;

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

Tensor leaf(Tensor t) {
  t.requires_grad_();
  return t;
}
// Standard normal f64 leaves, packed or transposed (a non-contiguous leaf).
Tensor normal(TestContext& ctx, const forge::Shape& shape) { return leaf(ctx.randn(shape, DType::f64)); }
Tensor normal_t(TestContext& ctx, std::int64_t rows, std::int64_t cols) {
  return leaf(ctx.randn({cols, rows}, DType::f64).t());
}
// Uniform in [0.5, 1.5): the domain of log, sqrt, reciprocal and pow's base.
Tensor positive(TestContext& ctx, const forge::Shape& shape) { return leaf(ctx.rand(shape, DType::f64) + 0.5); }
Tensor positive_t(TestContext& ctx, std::int64_t rows, std::int64_t cols) {
  return leaf((ctx.rand({cols, rows}, DType::f64) + 0.5).t());
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  bool positive_domain = false;
};

std::vector<UnaryCase> unary_cases() {
  using forge::GeluApproximation;
  return {
      {"neg", [](const Tensor& x) { return forge::neg(x); }},
      {"operator-", [](const Tensor& x) { return -x; }},
      {"abs", [](const Tensor& x) { return forge::abs(x); }},
      {"sign", [](const Tensor& x) { return forge::sign(x); }},
      {"exp", [](const Tensor& x) { return forge::exp(x); }},
      {"expm1", [](const Tensor& x) { return forge::expm1(x); }},
      {"log", [](const Tensor& x) { return forge::log(x); }, true},
      {"log1p", [](const Tensor& x) { return forge::log1p(x); }, true},
      {"sqrt", [](const Tensor& x) { return forge::sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return forge::rsqrt(x); }, true},
      {"square", [](const Tensor& x) { return forge::square(x); }},
      {"reciprocal", [](const Tensor& x) { return forge::reciprocal(x); }, true},
      {"sin", [](const Tensor& x) { return forge::sin(x); }},
      {"cos", [](const Tensor& x) { return forge::cos(x); }},
      {"tanh", [](const Tensor& x) { return forge::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return forge::sigmoid(x); }},
      {"relu", [](const Tensor& x) { return forge::relu(x); }},
      {"leaky_relu", [](const Tensor& x) { return forge::leaky_relu(x); }},
      {"leaky_relu slope 0.2", [](const Tensor& x) { return forge::leaky_relu(x, 0.2); }},
      {"gelu", [](const Tensor& x) { return forge::gelu(x); }},
      {"gelu tanh", [](const Tensor& x) { return forge::gelu(x, GeluApproximation::tanh); }},
      {"silu", [](const Tensor& x) { return forge::silu(x); }},
      {"softplus", [](const Tensor& x) { return forge::softplus(x); }},
      {"softplus beta 2 threshold 1", [](const Tensor& x) { return forge::softplus(x, 2.0, 1.0); }},
      {"elu", [](const Tensor& x) { return forge::elu(x); }},
      {"elu alpha 0.5", [](const Tensor& x) { return forge::elu(x, 0.5); }},
      {"erf", [](const Tensor& x) { return forge::erf(x); }},
      {"Tensor::exp", [](const Tensor& x) { return x.exp(); }},
      {"Tensor::sigmoid", [](const Tensor& x) { return x.sigmoid(); }},
  };
}

// The gradient of sum(w * f(x)) for w = ones, packed (the fused kernels run)
// and broadcast from one element (stride 0: the composed fallback runs).
std::pair<Tensor, Tensor> fused_and_composed(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  const Tensor y = fn(x);
  const Tensor packed = autograd::grad({y}, {x}, {.grad_outputs = {forge::ones(y.shape(), y.dtype())}})[0];
  const Tensor broadcast = autograd::grad({fn(x).sum()}, {x})[0];
  return {packed, broadcast};
}

// max_i |a - b| / (1 + |b|) <= rtol, as one assertion.
void require_close(const Tensor& a, const Tensor& b, double rtol) {
  const auto va = values(a), vb = values(b);
  REQUIRE(va.size() == vb.size());
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double err = std::abs(va[i] - vb[i]) / (1.0 + std::abs(vb[i]));
    if (!(err <= worst)) {  // a NaN error wins too
      worst = err;
      at = i;
    }
  }
  INFO("element " << at << ": " << va[at] << " vs " << vb[at]);
  REQUIRE(worst <= rtol);
}

}  // namespace

// ---- unary ----

TEST_CASE("autograd elementwise: every unary op passes gradcheck on packed and transposed leaves") {
  TestContext ctx;
  for (const UnaryCase& c : unary_cases()) {
    INFO(c.name);
    const auto fn = [&](const Inputs& in) { return c.fn(in[0]); };
    check_gradients(fn, {c.positive_domain ? positive(ctx, {3, 4}) : normal(ctx, {3, 4})});
    check_gradients(fn, {c.positive_domain ? positive_t(ctx, 3, 4) : normal_t(ctx, 3, 4)});
  }
}

TEST_CASE("autograd elementwise: unary rules record the op's name") {
  TestContext ctx;
  const Tensor x = normal(ctx, {3});
  CHECK(std::string(forge::relu(x).grad_fn_name()) == "relu");
  CHECK(std::string(forge::gelu(x).grad_fn_name()) == "gelu");
  CHECK(std::string(forge::clamp(x, -1.0, 1.0).grad_fn_name()) == "clamp");
  CHECK(std::string(forge::div(x, 2.0).grad_fn_name()) == "div");
}

TEST_CASE("autograd elementwise: kinks follow libtorch (relu and abs at 0, sign everywhere)") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({-1.5, 0.0, 2.0}).requires_grad_();
  const auto grad_of = [&](const Tensor& y) { return values(autograd::grad({y.sum()}, {x})[0]); };
  CHECK(grad_of(forge::relu(x)) == std::vector<double>{0, 0, 1});
  CHECK(grad_of(forge::abs(x)) == std::vector<double>{-1, 0, 1});
  CHECK(grad_of(forge::sign(x)) == std::vector<double>{0, 0, 0});
  CHECK(grad_of(forge::leaky_relu(x, 0.25)) == std::vector<double>{0.25, 0.25, 1});
  CHECK(grad_of(forge::elu(x, 0.5))[2] == 1.0);
  // Packed gradient: the fused relu kernel, the same convention.
  const auto packed = autograd::grad({forge::relu(x)}, {x}, {.grad_outputs = {ctx.ones({3}, DType::f64)}})[0];
  CHECK(values(packed) == std::vector<double>{0, 0, 1});
}

TEST_CASE("autograd elementwise: fused activation kernels match the composed rules on large f32 and f64 tensors") {
  TestContext ctx;
  using forge::GeluApproximation;
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"relu", [](const Tensor& x) { return forge::relu(x); }},
      {"sigmoid", [](const Tensor& x) { return forge::sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return forge::tanh(x); }},
      {"gelu", [](const Tensor& x) { return forge::gelu(x); }},
      {"gelu tanh", [](const Tensor& x) { return forge::gelu(x, GeluApproximation::tanh); }},
      {"silu", [](const Tensor& x) { return forge::silu(x); }},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    // Over the parallel grain, with a tail that is not a whole vector.
    Tensor x = (ctx.randn({70001}, dtype) * 3.0).requires_grad_();
    for (const auto& [name, fn] : ops) {
      INFO(name << " in " << forge::dtype_name(dtype));
      const auto [packed, composed] = fused_and_composed(fn, x);
      CHECK(packed.dtype() == dtype);
      require_close(packed, composed, dtype == DType::f32 ? 1e-5 : 1e-12);
    }
  }
}

TEST_CASE("autograd elementwise: 16-bit inputs get 16-bit gradients from every unary rule") {
  TestContext ctx;
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (const UnaryCase& c : unary_cases()) {
      INFO(c.name << " in " << forge::dtype_name(dtype));
      Tensor base = c.positive_domain ? ctx.rand({2, 3}) + 0.5 : ctx.randn({2, 3});
      Tensor x = base.to(dtype).requires_grad_();
      const Tensor y = c.fn(x);
      autograd::backward({y}, {forge::ones(y.shape(), y.dtype())});
      REQUIRE(x.grad().dtype() == dtype);
      for (double g : values(x.grad())) CHECK(std::isfinite(g));
    }
    Tensor a = ctx.rand({2, 3}).add(0.5).to(dtype).requires_grad_();
    Tensor b = ctx.randn({3}).to(dtype).requires_grad_();
    (forge::pow(a, b) + a / b + forge::maximum(a, b) + forge::clamp(b, -0.5, 0.5)).sum().backward();
    CHECK(a.grad().dtype() == dtype);
    CHECK(b.grad().dtype() == dtype);
  }
}

// ---- binary arithmetic ----

TEST_CASE("autograd elementwise: div of two tensors, broadcast and transposed, and with a scalar on either side") {
  TestContext ctx;
  const auto div_tt = [](const Inputs& in) { return forge::div(in[0], in[1]); };
  check_gradients(div_tt, {normal(ctx, {3, 4}), positive(ctx, {4})});
  check_gradients(div_tt, {normal_t(ctx, 3, 4), positive(ctx, {3, 1})});
  check_gradients(div_tt, {normal(ctx, {4}), positive_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return in[0] / in[1]; },
                  {normal(ctx, {2, 3}), ctx.rand({2, 3}, DType::f64) + 0.5});
  check_gradients([](const Inputs& in) { return forge::div(in[0], 2.5); }, {normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return forge::div(-2.5, in[0]); }, {positive_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return 3.0 / in[0]; }, {positive(ctx, {5})});
}

TEST_CASE("autograd elementwise: scalar-first add, sub and mul operators") {
  TestContext ctx;
  check_gradients([](const Inputs& in) { return 2.0 + in[0]; }, {normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return 2.0 - in[0]; }, {normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return 2.0 * in[0]; }, {normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return forge::sub(1.5, in[0]) * in[0]; }, {normal(ctx, {6})});
}

TEST_CASE("autograd elementwise: pow of tensor to tensor, tensor to scalar and scalar to tensor") {
  TestContext ctx;
  const auto pow_tt = [](const Inputs& in) { return forge::pow(in[0], in[1]); };
  check_gradients(pow_tt, {positive(ctx, {3, 4}), normal(ctx, {4})});
  check_gradients(pow_tt, {positive_t(ctx, 3, 4), normal(ctx, {3, 1})});
  check_gradients(pow_tt, {positive(ctx, {3, 4}), ctx.randn({4}, DType::f64)});  // exponent not differentiated
  for (double e : {3.0, -1.5, 0.5, 0.0}) {
    INFO("exponent " << e);
    check_gradients([e](const Inputs& in) { return forge::pow(in[0], e); }, {positive_t(ctx, 3, 4)});
  }
  check_gradients([](const Inputs& in) { return forge::pow(in[0], 2); }, {normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return in[0].pow(3); }, {normal(ctx, {5})});
  check_gradients([](const Inputs& in) { return forge::pow(2.5, in[0]); }, {normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return forge::pow(0.5, in[0]); }, {normal(ctx, {5})});
}

TEST_CASE("autograd elementwise: pow's exponent gradient is 0 where the base is 0 and the exponent is not negative") {
  TestContext ctx;
  Tensor a = ctx.from_vector<double>({0, 0, 0, 2}).requires_grad_();
  Tensor b = ctx.from_vector<double>({0, 2, -1, 3}).requires_grad_();
  const auto g = autograd::grad({forge::pow(a, b).sum()}, {a, b});
  const auto gb = values(g[1]);
  CHECK(gb[0] == 0.0);
  CHECK(gb[1] == 0.0);
  CHECK(gb[2] == -std::numeric_limits<double>::infinity());  // 0^-1 * log(0), as libtorch
  CHECK(gb[3] == Approx(8 * std::log(2.0)));
  const auto ga = values(g[0]);
  CHECK(ga[0] == 0.0);  // exponent 0: no 0 * 0^-1 NaN
  CHECK(ga[1] == 0.0);
  CHECK(ga[3] == Approx(12.0));
  // Scalar base 0: the same rule; pow(x, 0) gives zeros.
  Tensor e = ctx.from_vector<double>({0, 1, 2}).requires_grad_();
  CHECK(values(autograd::grad({forge::pow(0.0, e).sum()}, {e})[0]) == std::vector<double>{0, 0, 0});
  Tensor x = ctx.from_vector<double>({0, 1}).requires_grad_();
  CHECK(values(autograd::grad({forge::pow(x, 0).sum()}, {x})[0]) == std::vector<double>{0, 0});
}

// ---- maximum, minimum, selection, clamp ----

TEST_CASE("autograd elementwise: maximum and minimum, broadcast and transposed") {
  TestContext ctx;
  for (bool is_max : {true, false}) {
    INFO((is_max ? "maximum" : "minimum"));
    const auto fn = [is_max](const Inputs& in) {
      return is_max ? forge::maximum(in[0], in[1]) : forge::minimum(in[0], in[1]);
    };
    check_gradients(fn, {normal(ctx, {3, 4}), normal(ctx, {4})});
    check_gradients(fn, {normal_t(ctx, 3, 4), normal(ctx, {3, 1})});
  }
  check_gradients([](const Inputs& in) { return in[0].maximum(in[1]); }, {normal(ctx, {5}), normal(ctx, {5})});
}

TEST_CASE("autograd elementwise: maximum and minimum split the gradient in half at ties") {
  TestContext ctx;
  Tensor a = ctx.from_vector<double>({1, 2, 3}).requires_grad_();
  Tensor b = ctx.from_vector<double>({2, 2, 1}).requires_grad_();
  auto g = autograd::grad({forge::maximum(a, b).sum()}, {a, b});
  CHECK(values(g[0]) == std::vector<double>{0, 0.5, 1});
  CHECK(values(g[1]) == std::vector<double>{1, 0.5, 0});
  g = autograd::grad({forge::minimum(a, b).sum()}, {a, b});
  CHECK(values(g[0]) == std::vector<double>{1, 0.5, 0});
  CHECK(values(g[1]) == std::vector<double>{0, 0.5, 1});
  // A broadcast operand sums the halves it won.
  Tensor s = ctx.from_vector<double>({2}).requires_grad_();
  CHECK(values(autograd::grad({forge::maximum(a, s).sum()}, {s})[0]) == std::vector<double>{1.5});
}

TEST_CASE("autograd elementwise: where sends the gradient to both values and none to cond") {
  TestContext ctx;
  const Tensor cond = ctx.from_vector<double>({1, 0, 1}, {3, 1}) > 0.5;
  const auto where_tt = [](const Inputs& in) { return forge::where(in[0], in[1], in[2]); };
  check_gradients(where_tt, {cond, normal(ctx, {3, 4}), normal(ctx, {4})});
  check_gradients(where_tt, {cond, normal_t(ctx, 3, 4), normal(ctx, {1})});
  check_gradients([](const Inputs& in) { return forge::where(in[0], in[1], 1.5); }, {cond, normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return forge::where(in[0], in[1], 1.5); }, {cond, normal(ctx, {4})});

  Tensor a = ctx.from_vector<double>({1, 2, 3}).requires_grad_();
  Tensor b = ctx.from_vector<double>({4, 5, 6}).requires_grad_();
  const Tensor c = ctx.from_vector<double>({1, 0, 1}) > 0.5;
  const auto g = autograd::grad({forge::where(c, a, b).sum()}, {a, b});
  CHECK(values(g[0]) == std::vector<double>{1, 0, 1});
  CHECK(values(g[1]) == std::vector<double>{0, 1, 0});
}

TEST_CASE("autograd elementwise: masked_fill passes the gradient where the mask is false") {
  TestContext ctx;
  const Tensor mask = ctx.from_vector<double>({1, 0, 0, 1}) > 0.5;
  const auto fn = [](const Inputs& in) { return forge::masked_fill(in[0], in[1], 7.0); };
  check_gradients(fn, {normal(ctx, {3, 4}), mask});
  check_gradients(fn, {normal_t(ctx, 3, 4), mask});
  check_gradients([](const Inputs& in) { return in[0].masked_fill(in[1], -1.0); }, {normal(ctx, {4}), mask});
  Tensor x = ctx.from_vector<double>({1, 2, 3, 4}).requires_grad_();
  CHECK(values(autograd::grad({forge::masked_fill(x, mask, 0.0).sum()}, {x})[0]) == std::vector<double>{0, 1, 1, 0});
}

TEST_CASE("autograd elementwise: clamp with both bounds, only min and only max") {
  TestContext ctx;
  check_gradients([](const Inputs& in) { return forge::clamp(in[0], -0.5, 0.5); }, {normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return forge::clamp(in[0], -0.5, std::nullopt); }, {normal(ctx, {3, 4})});
  check_gradients([](const Inputs& in) { return forge::clamp(in[0], std::nullopt, 0.5); }, {normal_t(ctx, 3, 4)});
  check_gradients([](const Inputs& in) { return in[0].clamp(0.0, 0.5); }, {normal(ctx, {8})});
  // The bounds themselves pass the gradient, as libtorch.
  Tensor x = ctx.from_vector<double>({-2, -1, 0, 1, 2}).requires_grad_();
  CHECK(values(autograd::grad({forge::clamp(x, -1.0, 1.0).sum()}, {x})[0]) == std::vector<double>{0, 1, 1, 1, 0});
}

TEST_CASE("autograd elementwise: in-place div_ and clamp_ of a non-leaf record") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2, 4}).requires_grad_();
  Tensor y = x * 1.0;
  y.div_(2.0);
  y.clamp_(0.0, 1.5);
  y.sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0.5, 0.5, 0});
}

// ---- not differentiable ----

TEST_CASE("autograd elementwise: comparisons and logic never require grad") {
  TestContext ctx;
  const Tensor a = normal(ctx, {3});
  const Tensor b = normal(ctx, {3});
  const std::vector<Tensor> outs = {
      forge::eq(a, b),         forge::ne(a, b),       forge::lt(a, b), forge::le(a, b), forge::gt(a, b),
      forge::ge(a, b),         forge::eq(a, 0),       forge::ne(a, 0), forge::lt(a, 0), forge::le(a, 0),
      forge::gt(a, 0),         forge::ge(a, 0),       a == b,          a < 0.5,         forge::logical_and(a, b),
      forge::logical_or(a, b), forge::logical_not(a), a.logical_not(),
  };
  for (std::size_t i = 0; i < outs.size(); ++i) {
    INFO("output " << i);
    CHECK(outs[i].dtype() == DType::boolean);
    CHECK_FALSE(outs[i].requires_grad());
    CHECK(outs[i].is_leaf());
  }
}
