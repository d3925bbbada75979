// SGD, Adam and AdamW: three steps against the update formulas evaluated here
// in scalar double arithmetic, where their state lives, and bad options.

#include "forge/optim.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
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
    if (decoupled)
      p -= lr * wd * p;
    else
      g += wd * p;
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
  forge::optim::AdamOptions o{
      .lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = wd, .decoupled_weight_decay = decoupled};
  std::unique_ptr<forge::optim::Adam> made;
  if (decoupled)
    made = std::make_unique<forge::optim::AdamW>(std::vector<Tensor>{p}, o);  // forces decoupled
  else
    made = std::make_unique<forge::optim::Adam>(std::vector<Tensor>{p}, o);
  forge::optim::Optimizer& adam = *made;
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

TEST_CASE("optim: AdamW defaults to decoupled weight decay 0.01") {
  TestContext ctx;
  Tensor p = ctx.from_vector<double>({1}, {1}).requires_grad_();
  forge::optim::AdamW adamw({p});
  CHECK(adamw.options().decoupled_weight_decay);
  CHECK(adamw.options().weight_decay == 0.01);
  CHECK(adamw.name() == "AdamW");
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
  Tensor leaf = ctx.from_vector<double>({1}, {1}).requires_grad_();
  Tensor not_leaf = leaf * 2.0;
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({not_leaf}));
  Tensor base = ctx.randn({3, 2}, DType::f64);
  Tensor t = base.t();
  t.requires_grad_();
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({t}));
  Tensor ok = ctx.from_vector<double>({1}, {1}).requires_grad_();
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({ok}, {.lr = -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({ok}, {.beta1 = 1.0}));
}

namespace {

// libtorch's SGD, one scalar at a time: the first momentum buffer is d itself.
struct ScalarSGD {
  double lr, momentum, dampening, wd;
  bool nesterov;
  double p, buf = 0;
  int t = 0;
  void step(double g) {
    ++t;
    double d = g + wd * p;
    if (momentum != 0) {
      buf = t == 1 ? d : momentum * buf + (1 - dampening) * d;
      d = nesterov ? d + momentum * buf : buf;
    }
    p -= lr * d;
  }
};

void sgd_three_steps(forge::optim::SGDOptions o, DType dtype) {
  TestContext ctx;
  const std::vector<double> start = {1.0, -2.0, 0.5};
  const std::vector<std::vector<double>> grads = {{0.5, -1.0, 0.0}, {0.25, 2.0, -0.1}, {-0.75, 0.5, 0.3}};
  Tensor p = ctx.from_vector<double>(start, {3}).to(dtype).requires_grad_();
  forge::optim::SGD sgd({p}, o);
  std::vector<ScalarSGD> ref;
  for (double s : start) ref.push_back({o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, s});
  for (const auto& g : grads) {
    p.set_grad(ctx.from_vector<double>(g, {3}).to(dtype));
    sgd.step();
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i].step(g[i]);
  }
  const auto got = p.to_vector<double>();
  for (std::size_t i = 0; i < ref.size(); ++i)
    CHECK(got[i] == Approx(ref[i].p).epsilon(dtype == DType::f32 ? 1e-5 : 1e-12));
  if (o.momentum != 0) {
    const auto buf = sgd.momentum_buffer(0).to_vector<double>();
    for (std::size_t i = 0; i < ref.size(); ++i)
      CHECK(buf[i] == Approx(ref[i].buf).epsilon(dtype == DType::f32 ? 1e-5 : 1e-12));
  }
  CHECK(sgd.steps() == 3);
}

}  // namespace

TEST_CASE("optim: SGD's three steps match the update formulas") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(forge::dtype_name(dtype));
    sgd_three_steps({.lr = 0.1}, dtype);
    sgd_three_steps({.lr = 0.1, .weight_decay = 0.05}, dtype);
    sgd_three_steps({.lr = 0.1, .momentum = 0.9}, dtype);
    sgd_three_steps({.lr = 0.1, .momentum = 0.9, .dampening = 0.3}, dtype);
    sgd_three_steps({.lr = 0.1, .momentum = 0.8, .weight_decay = 0.05, .nesterov = true}, dtype);
  }
}

TEST_CASE("optim: a parameter's first update starts its momentum buffer, whenever it comes") {
  TestContext ctx;
  Tensor a = ctx.from_vector<double>({1}, {1}).requires_grad_();
  Tensor b = ctx.from_vector<double>({2}, {1}).requires_grad_();
  forge::optim::SGD sgd({a, b}, {.lr = 0.5, .momentum = 0.9, .dampening = 0.5});
  a.set_grad(ctx.from_vector<double>({1}, {1}));
  sgd.step();  // b has no gradient: untouched, its buffer not started
  CHECK(b.item<double>() == 2);
  b.set_grad(ctx.from_vector<double>({4}, {1}));
  sgd.step();
  // b's buffer is its gradient (no dampening on the first update): 2 - 0.5 * 4.
  CHECK(b.item<double>() == 0);
  CHECK(sgd.momentum_buffer(1).item<double>() == 4);
  // a's second update: buffer 0.9 * 1 + 0.5 * 1 = 1.4; a = (1 - 0.5) - 0.5 * 1.4.
  CHECK(a.item<double>() == Approx(0.5 - 0.7).epsilon(1e-15));
}

TEST_CASE("optim: Adam's bias correction counts each parameter's own updates") {
  TestContext ctx;
  Tensor a = ctx.from_vector<double>({1}, {1}).requires_grad_();
  Tensor b = ctx.from_vector<double>({2}, {1}).requires_grad_();
  forge::optim::Adam adam({a, b}, {.lr = 0.5});
  a.set_grad(ctx.from_vector<double>({1}, {1}));
  adam.step();
  b.set_grad(ctx.from_vector<double>({4}, {1}));
  adam.step();
  // b's first update: m-hat = g, v-hat = g^2, so p -= lr g / (|g| + eps).
  CHECK(b.item<double>() == Approx(2 - 0.5 * 4 / (4 + 1e-8)).epsilon(1e-14));
  CHECK(adam.state_dict().at("state.1.step").item<std::int64_t>() == 1);
  CHECK(adam.steps() == 2);
  adam.zero_grad();
}

TEST_CASE("optim: an optimizer's state is its own, outside the transient pool") {
  TestContext ctx;
  Tensor w = ctx.randn({64, 33}).requires_grad_();
  Tensor b = ctx.randn({33}).requires_grad_();
  const auto before = ctx.stats();
  {
    forge::optim::Adam adam({w, b});
    forge::optim::SGD sgd({w, b}, {.momentum = 0.9});
    CHECK(ctx.stats().outstanding == before.outstanding);
    CHECK(ctx.stats().live_bytes == before.live_bytes);
    for (const Tensor& m : {adam.exp_avg(0), adam.exp_avg_sq(1), sgd.momentum_buffer(0)}) {
      CHECK_FALSE(m.buffer()->pooled());
      CHECK(reinterpret_cast<std::uintptr_t>(m.raw_data()) % 64 == 0);
      CHECK(&m.runtime() == &w.runtime());
    }
    CHECK(adam.exp_avg(0).shape() == w.shape());
    CHECK(adam.exp_avg_sq(1).to_vector<float>() == std::vector<float>(33, 0.0f));
    w.set_grad(ctx.ones({64, 33}));
    b.set_grad(ctx.ones({33}));
    const auto with_grads = ctx.stats().outstanding;
    adam.step();
    sgd.step();
    CHECK(ctx.stats().outstanding == with_grads);  // a step allocates nothing
    w.zero_grad();
    b.zero_grad();
  }
  CHECK(ctx.stats().outstanding == before.outstanding);
}

TEST_CASE("optim: zero_grad drops or zeroes every gradient") {
  TestContext ctx;
  Tensor p = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  forge::optim::SGD sgd({p}, {.lr = 0.1});
  (p * 3.0).sum().backward();
  sgd.zero_grad(false);
  REQUIRE(p.grad().defined());
  CHECK(p.grad().to_vector<double>() == std::vector<double>{0, 0});
  sgd.zero_grad();
  CHECK_FALSE(p.grad().defined());
}

TEST_CASE("optim: SGD refuses bad options") {
  TestContext ctx;
  Tensor p = ctx.from_vector<double>({1}, {1}).requires_grad_();
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD({p}, {.lr = -0.1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD({p}, {.lr = std::nan("")}));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD({p}, {.momentum = -0.5}));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD({p}, {.momentum = 0.9, .dampening = 1.5}));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD({p}, {.weight_decay = -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD({p}, {.nesterov = true}));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD",
                      forge::optim::SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD(std::vector<Tensor>{}, {}));
  forge::optim::SGD plain({p});
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", plain.momentum_buffer(0));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", plain.set_lr(-1));
  forge::optim::SGD heavy({p}, {.momentum = 0.5});
  FORGE_REQUIRE_ERROR(out_of_range, "SGD", heavy.momentum_buffer(1));
  CHECK(plain.lr() == 1e-2);
  plain.set_lr(0.25);
  CHECK(plain.lr() == 0.25);
  TestContext other;
  Tensor q = other.from_vector<double>({1}, {1}).requires_grad_();
  FORGE_REQUIRE_ERROR(device, "SGD", forge::optim::SGD({p, q}));
  FORGE_REQUIRE_ERROR(invalid_argument, "AdamW", forge::optim::AdamW({p}, {.eps = -1}));
}

TEST_CASE("optim: a parameter listed twice or two views whose bytes meet are refused, naming both") {
  TestContext ctx;
  Tensor p = ctx.randn({3}, DType::f64).requires_grad_();
  Tensor q = ctx.randn({2, 2}).requires_grad_();
  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD({p, q, p}));
  CHECK_THAT(msg, Catch::Contains("parameter 2 is parameter 0 listed again"));
  Tensor empty = ctx.zeros({0}).requires_grad_();
  msg = FORGE_REQUIRE_ERROR(invalid_argument, "Adam", forge::optim::Adam({empty, q, empty}));
  CHECK_THAT(msg, Catch::Contains("parameter 2 is parameter 0 listed again"));

  // Two leaves over one buffer: elements [0, 6) and [4, 10) share two.
  const Tensor base = ctx.zeros({10}, DType::f64);
  Tensor head = base.narrow(0, 0, 6).requires_grad_(), tail = base.narrow(0, 4, 6).requires_grad_();
  msg = FORGE_REQUIRE_ERROR(invalid_argument, "AdamW", forge::optim::AdamW({p, tail, head}));
  CHECK_THAT(
      msg, Catch::Contains("parameters 1 and 2 overlap") && Catch::Contains("[32, 80)") && Catch::Contains("[0, 48)"));
  // Rows 1-2 and 2-3 of a matrix, with unrelated parameters between them.
  const Tensor m = ctx.zeros({4, 3});
  Tensor rows12 = m.narrow(0, 1, 2).requires_grad_(), rows23 = m.narrow(0, 2, 2).requires_grad_();
  msg = FORGE_REQUIRE_ERROR(invalid_argument, "SGD", forge::optim::SGD({rows23, q, rows12}));
  CHECK_THAT(msg, Catch::Contains("parameters 0 and 2 overlap"));

  // Views that only touch are disjoint: each element is stepped once.
  Tensor left = base.narrow(0, 0, 5).requires_grad_(), right = base.narrow(0, 5, 5).requires_grad_();
  forge::optim::SGD sgd({right, left}, {.lr = 0.5});
  left.set_grad(ctx.ones({5}, DType::f64));
  right.set_grad(ctx.full({5}, 2.0, DType::f64));
  sgd.step();
  CHECK(base.to_vector<double>() == std::vector<double>{-0.5, -0.5, -0.5, -0.5, -0.5, -1, -1, -1, -1, -1});
}
