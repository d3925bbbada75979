// Adam and AdamW: three steps against the update formulas evaluated here in
// scalar double arithmetic, and bad parameters.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::DType;
using forge::Tensor;
using forge_test::TestContext;

namespace {

// The textbook update, one scalar at a time.
struct ScalarAdam {
  double lr, b1, b2, eps, wd;
  bool decoupled;
  double p, m = 0, v = 0;
  int t = 0;
  void step(double g) {
    ++t;
    if (decoupled) p -= lr * wd * p;
    else g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, t)), vhat = v / (1 - std::pow(b2, t));
    p -= lr * mhat / (std::sqrt(vhat) + eps);
  }
};

void three_steps(bool decoupled, double wd, DType dtype) {
  TestContext ctx;
  const std::vector<double> start = {1.0, -2.0, 0.5};
  const std::vector<std::vector<double>> grads = {{0.5, -1.0, 0.0}, {0.25, 2.0, -0.1}, {-0.75, 0.5, 0.3}};
  Tensor p = ctx.from_vector<double>(start, {3}).to(dtype).requires_grad_();
  forge::optim::AdamOptions o{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = wd,
                              .decoupled_weight_decay = decoupled};
  forge::optim::Adam adam({p}, o);
  std::vector<ScalarAdam> ref;
  for (double s : start) ref.push_back({o.lr, o.beta1, o.beta2, o.eps, wd, decoupled, s});
  for (const auto& g : grads) {
    p.set_grad(ctx.from_vector<double>(g, {3}).to(dtype));
    adam.step();
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i].step(g[i]);
  }
  const auto got = p.to_vector<double>();
  for (std::size_t i = 0; i < ref.size(); ++i)
    CHECK(got[i] == Approx(ref[i].p).epsilon(dtype == DType::f32 ? 1e-5 : 1e-12));
  CHECK(adam.steps() == 3);
  adam.zero_grad();
  CHECK_FALSE(p.grad().defined());
}

}  // namespace

TEST_CASE("optim: Adam's three steps match the update formulas in f64 and f32") {
  three_steps(false, 0.0, DType::f64);
  three_steps(false, 0.0, DType::f32);
  three_steps(false, 0.05, DType::f64);  // L2 weight decay added to the gradient
}

TEST_CASE("optim: AdamW's three steps match the decoupled update") {
  three_steps(true, 0.1, DType::f64);
  three_steps(true, 0.1, DType::f32);
}

TEST_CASE("optim: a parameter without a gradient is left alone") {
  TestContext ctx;
  Tensor a = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor b = ctx.from_vector<double>({3, 4}, {2}).requires_grad_();
  forge::optim::Adam adam({a, b}, {.lr = 0.5});
  (a * 2.0).sum().backward();
  adam.step();
  CHECK(b.to_vector<double>() == std::vector<double>{3, 4});
  CHECK(a.to_vector<double>() != std::vector<double>{1, 2});
}

TEST_CASE("optim: Adam refuses parameters it cannot update") {
  TestContext ctx;
  Tensor i = ctx.from_vector<std::int64_t>({1}, {1});
  FORGE_REQUIRE_ERROR(dtype, "Adam", forge::optim::Adam({i}));
  Tensor no_grad = ctx.from_vector<double>({1}, {1});
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({no_grad}));
  Tensor base = ctx.randn({3, 2}, DType::f64);
  Tensor t = base.t();
  t.requires_grad_();
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({t}));
  Tensor ok = ctx.from_vector<double>({1}, {1}).requires_grad_();
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({ok}, {.lr = -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({ok}, {.beta1 = 1.0}));
}
