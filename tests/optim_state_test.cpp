// Optimizer state dicts (bit-exact round trips, resumed steps, refused dicts),
// clip_grad_norm_ and the learning-rate schedules.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/optim.h"
#include "support.h"

using forge::DType;
using forge::StateDict;
using forge::Tensor;
using forge_test::TestContext;
namespace optim = forge::optim;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return a.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), a.nbytes()) == 0;
}

// Two parameters (f32 and f64) and a deterministic gradient for step k.
struct Params {
  std::vector<Tensor> tensors;
  explicit Params(TestContext& ctx) {
    tensors.push_back(ctx.randn({4, 3}).requires_grad_());
    tensors.push_back(ctx.randn({5}, DType::f64).requires_grad_());
  }
  Params(TestContext& ctx, const Params& like) {  // same values, new leaves
    for (const Tensor& t : like.tensors) tensors.push_back(t.detach().clone().requires_grad_());
    (void)ctx;
  }
  void set_grads(TestContext& ctx, int k) {
    for (Tensor& t : tensors) {
      Tensor g = ctx.arange(0, static_cast<double>(t.numel()), 1, t.dtype()).reshape(t.shape());
      t.set_grad((g * 0.37 + static_cast<double>(k)).sin());
    }
  }
};

using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, double lr)>;

const std::vector<std::pair<const char*, Factory>>& factories() {
  static const std::vector<std::pair<const char*, Factory>> all = {
      {"Adam",
       [](std::vector<Tensor> p, double lr) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = lr}); }},
      {"AdamW",
       [](std::vector<Tensor> p, double lr) {
         return std::make_unique<optim::AdamW>(p, optim::AdamOptions{.lr = lr, .weight_decay = 0.1});
       }},
      {"SGD",
       [](std::vector<Tensor> p, double lr) {
         return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = lr, .momentum = 0.9, .nesterov = true});
       }},
  };
  return all;
}

}  // namespace

TEST_CASE("optim: state_dict holds the moments, per-parameter steps and hyper-parameters") {
  TestContext ctx;
  Params ps(ctx);
  optim::Adam adam(ps.tensors, {.lr = 0.01, .beta1 = 0.8});
  ps.set_grads(ctx, 0);
  adam.step();
  const StateDict d = adam.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, v] : d) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"beta1", "beta2", "decoupled_weight_decay", "eps", "lr", "state.0.exp_avg",
                                         "state.0.exp_avg_sq", "state.0.step", "state.1.exp_avg", "state.1.exp_avg_sq",
                                         "state.1.step", "step", "weight_decay"});
  CHECK(d.at("step").dim() == 0);
  CHECK(d.at("step").dtype() == DType::i64);
  CHECK(d.at("step").item<std::int64_t>() == 1);
  CHECK(d.at("state.1.step").item<std::int64_t>() == 1);
  CHECK(d.at("lr").dtype() == DType::f64);
  CHECK(d.at("lr").item<double>() == 0.01);
  CHECK(d.at("beta1").item<double>() == 0.8);
  CHECK(d.at("decoupled_weight_decay").item<double>() == 0);
  CHECK(same_bits(d.at("state.0.exp_avg"), adam.exp_avg(0)));
  CHECK(d.at("state.1.exp_avg_sq").dtype() == DType::f64);
  ps.tensors[0].zero_grad();
  ps.tensors[1].zero_grad();
}

TEST_CASE("optim: a state_dict round trip is bit-exact and a resumed optimizer takes the same steps") {
  for (const auto& [name, make] : factories()) {
    INFO(name);
    TestContext ctx;
    Params a(ctx);
    auto first = make(a.tensors, 0.05);
    for (int k = 0; k < 3; ++k) {
      a.set_grads(ctx, k);
      first->step();
    }
    // A second optimizer, made with another lr, over copies of the parameters.
    Params b(ctx, a);
    auto resumed = make(b.tensors, 0.5);
    resumed->load_state_dict(first->state_dict());
    CHECK(resumed->lr() == 0.05);
    CHECK(resumed->steps() == 3);
    const StateDict da = first->state_dict(), db = resumed->state_dict();
    REQUIRE(da.size() == db.size());
    for (const auto& [key, t] : da) {
      INFO(key);
      REQUIRE(db.count(key) == 1);
      CHECK(same_bits(t, db.at(key)));
    }
    for (int k = 3; k < 6; ++k) {
      a.set_grads(ctx, k);
      b.set_grads(ctx, k);
      first->step();
      resumed->step();
    }
    for (std::size_t i = 0; i < a.tensors.size(); ++i) CHECK(same_bits(a.tensors[i], b.tensors[i]));
    first->zero_grad();
    resumed->zero_grad();
  }
}

TEST_CASE("optim: a refused state dict names the key and leaves the optimizer as it was") {
  TestContext ctx;
  Params ps(ctx);
  optim::Adam adam(ps.tensors, {.lr = 0.01});
  ps.set_grads(ctx, 0);
  adam.step();
  const std::vector<float> m0 = adam.exp_avg(0).to_vector<float>();
  const StateDict good = adam.state_dict();
  const std::string op = "Adam.load_state_dict";
  // needle: the key in quotes, or for a hyper-parameter its name and value.
  auto refused = [&](forge::ErrorCode code, const StateDict& bad, const std::string& needle) {
    const std::string msg = forge_test::expect_error(code, op, [&] { adam.load_state_dict(bad); });
    INFO(msg);
    CHECK(msg.find(needle) != std::string::npos);
    CHECK(adam.lr() == 0.01);
    CHECK(adam.steps() == 1);
    CHECK(adam.exp_avg(0).to_vector<float>() == m0);
  };
  auto with = [&](const std::string& key, const Tensor& t) {
    StateDict d = good;
    d[key] = t;
    return d;
  };
  // Every check passes on a dict whose scalars changed, except the one that is wrong.
  StateDict missing = with("lr", ctx.full({}, 0.5, DType::f64));
  missing.erase("state.1.exp_avg_sq");
  refused(forge::ErrorCode::invalid_argument, missing, "'state.1.exp_avg_sq'");
  refused(forge::ErrorCode::shape, with("state.0.exp_avg", ctx.zeros({3, 4})), "'state.0.exp_avg'");
  refused(forge::ErrorCode::dtype, with("state.1.exp_avg", ctx.zeros({5})), "'state.1.exp_avg'");
  refused(forge::ErrorCode::shape, with("step", ctx.zeros({1}, DType::i64)), "'step'");
  refused(forge::ErrorCode::invalid_argument, with("state.0.step", ctx.full({}, -1, DType::i64)), "'state.0.step'");
  refused(forge::ErrorCode::invalid_argument, with("state.0.step", ctx.full({}, 1.5, DType::f64)), "'state.0.step'");
  refused(forge::ErrorCode::invalid_argument, with("lr", ctx.full({}, -1, DType::f64)), "lr -1 is negative");
  refused(forge::ErrorCode::invalid_argument, with("decoupled_weight_decay", ctx.full({}, 1, DType::f64)),
          "'decoupled_weight_decay'");
  refused(forge::ErrorCode::invalid_argument, with("state.2.exp_avg", ctx.zeros({2})), "'state.2.exp_avg'");
  refused(forge::ErrorCode::invalid_argument, with("state.1.exp_avg", Tensor()), "'state.1.exp_avg'");

  // A dict for more or fewer parameters.
  optim::Adam one({ps.tensors[0]});
  const std::string more =
      forge_test::expect_error(forge::ErrorCode::invalid_argument, op, [&] { one.load_state_dict(good); });
  CHECK(more.find("'state.1.exp_avg'") != std::string::npos);
  const std::string fewer =
      forge_test::expect_error(forge::ErrorCode::invalid_argument, op, [&] { adam.load_state_dict(one.state_dict()); });
  CHECK(fewer.find("'state.1.") != std::string::npos);

  // SGD: momentum on one side only, and a flag that is not 0 or 1.
  optim::SGD plain({ps.tensors[0]}, {.lr = 0.1});
  optim::SGD heavy({ps.tensors[0]}, {.lr = 0.1, .momentum = 0.9});
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD.load_state_dict", plain.load_state_dict(heavy.state_dict()));
  StateDict odd = heavy.state_dict();
  odd["nesterov"] = ctx.full({}, 0.5, DType::f64);
  const std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "SGD.load_state_dict", heavy.load_state_dict(odd));
  CHECK(msg.find("'nesterov'") != std::string::npos);
  adam.load_state_dict(good);  // still takes a good one
  CHECK(adam.exp_avg(0).to_vector<float>() == m0);
  adam.zero_grad();
}

TEST_CASE("optim: clip_grad_norm_ measures all gradients as one vector and scales them above the bound") {
  TestContext ctx;
  Tensor a = ctx.from_vector<double>({0, 0}, {2}).requires_grad_();
  Tensor b = ctx.from_vector<float>({0}, {1}).requires_grad_();
  Tensor none = ctx.from_vector<double>({0}, {1}).requires_grad_();  // no grad: skipped
  auto set = [&] {
    a.set_grad(ctx.from_vector<double>({3, -4}, {2}));
    b.set_grad(ctx.from_vector<float>({12}, {1}));
  };
  set();
  CHECK(optim::clip_grad_norm_({a, b, none}, 20.0) == Approx(13).epsilon(1e-15));  // below: untouched
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3, -4});
  CHECK(optim::clip_grad_norm_({a, b, none}, 6.5) == Approx(13).epsilon(1e-15));
  const double coef = 6.5 / (13 + 1e-6);
  CHECK(a.grad().to_vector<double>()[0] == Approx(3 * coef).epsilon(1e-15));
  CHECK(a.grad().to_vector<double>()[1] == Approx(-4 * coef).epsilon(1e-15));
  CHECK(b.grad().item<float>() == Approx(12 * coef).epsilon(1e-6));
  CHECK(optim::clip_grad_norm_({a, b}, 100.0) == Approx(6.5).epsilon(1e-6));

  set();
  CHECK(optim::clip_grad_norm_({a, b}, 20.0, optim::kInfNorm) == 12);
  CHECK(b.grad().item<float>() == 12);
  CHECK(optim::clip_grad_norm_({a, b}, 6.0, optim::kInfNorm) == 12);
  CHECK(a.grad().to_vector<double>()[1] == Approx(-4 * 6 / (12 + 1e-6)).epsilon(1e-15));
  set();
  CHECK(optim::clip_grad_norm_({a, b}, 100.0, 1.0) == Approx(19).epsilon(1e-15));

  FORGE_REQUIRE_ERROR(invalid_argument, "clip_grad_norm_", optim::clip_grad_norm_({a}, -1.0));
  FORGE_REQUIRE_ERROR(invalid_argument, "clip_grad_norm_", optim::clip_grad_norm_({a}, 1.0, 0.0));
  FORGE_REQUIRE_ERROR(invalid_argument, "clip_grad_norm_", optim::clip_grad_norm_({Tensor()}, 1.0));
  a.zero_grad();
  b.zero_grad();
}

// libtorch 1.13 (checked against it): the coefficient min(max_norm / (norm +
// 1e-6), 1) is applied whatever the norm.
TEST_CASE("optim: clip_grad_norm_ applies a non-finite norm as libtorch, or refuses it") {
  TestContext ctx;
  const double inf = std::numeric_limits<double>::infinity();
  Tensor a = ctx.zeros({3}).requires_grad_();
  Tensor b = ctx.zeros({2}, DType::f64).requires_grad_();
  auto set = [&](double special) {
    a.set_grad(ctx.from_vector<float>({1, static_cast<float>(special), -2}, {3}));
    b.set_grad(ctx.from_vector<double>({3, -4}, {2}));
  };
  for (double norm_type : {2.0, 1.0, optim::kInfNorm}) {
    INFO("norm_type " << norm_type);
    // An infinite norm: the coefficient is 0, so finite entries become
    // (signed) zeros and the infinite one NaN.
    set(inf);
    CHECK(optim::clip_grad_norm_({a, b}, 1.0, norm_type) == inf);
    const auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
    CHECK((ga[0] == 0 && !std::signbit(ga[0]) && std::isnan(ga[1]) && ga[2] == 0 && std::signbit(ga[2])));
    CHECK((gb[0] == 0 && gb[1] == 0 && std::signbit(gb[1])));
    // A NaN norm: every entry becomes NaN.
    set(std::nan(""));
    CHECK(std::isnan(optim::clip_grad_norm_({a, b}, 1.0, norm_type)));
    for (double v : a.grad().to_vector<double>()) CHECK(std::isnan(v));
    for (double v : b.grad().to_vector<double>()) CHECK(std::isnan(v));
    // error_if_nonfinite refuses either before touching a gradient.
    for (double special : {inf, std::nan("")}) {
      set(special);
      const std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "clip_grad_norm_",
                                                  optim::clip_grad_norm_({a, b}, 1.0, norm_type, true));
      CHECK_THAT(msg, Catch::Contains(std::isnan(special) ? "nan, so" : "is inf, so"));
      const auto g = a.grad().to_vector<double>();
      CHECK((g[0] == 1 && g[2] == -2 && b.grad().to_vector<double>() == std::vector<double>{3, -4}));
    }
  }
  // Finite f32 gradients whose 2-norm passes f32's range: libtorch's f32 sum
  // gives inf (and zeroes them); the f64 sum gives the norm and clips.
  a.set_grad(ctx.from_vector<float>({3e38f, 3e38f, 0}, {3}));
  CHECK(optim::clip_grad_norm_({a}, 1.0, 2.0, true) == Approx(3e38 * std::sqrt(2.0)).epsilon(1e-6));
  CHECK(a.grad().to_vector<double>()[0] == Approx(1 / std::sqrt(2.0)).epsilon(1e-6));
  // A finite norm passes error_if_nonfinite, and a norm within 1e-6 below
  // max_norm is still scaled by max_norm / (norm + 1e-6) < 1.
  b.set_grad(ctx.from_vector<double>({3, -4}, {2}));
  CHECK(optim::clip_grad_norm_({b}, 5.0000001, 2.0, true) == 5);
  CHECK(b.grad().to_vector<double>()[0] == Approx(3 * 5.0000001 / (5 + 1e-6)).epsilon(1e-15));
  CHECK(b.grad().to_vector<double>()[0] < 3);
  a.zero_grad();
  b.zero_grad();
}

TEST_CASE("optim: clip_grad_norm_ over a large gradient matches the formula for any thread count") {
  double norms[2] = {};
  for (int threads : {1, 2}) {
    TestContext ctx(forge_test::context_options(threads));
    Tensor p = ctx.zeros({100003}).requires_grad_();
    p.set_grad(ctx.arange(0, 100003, 1, DType::f32) * 1e-3);
    norms[threads - 1] = optim::clip_grad_norm_({p}, 1e9);
    p.zero_grad();
  }
  double ref = 0;
  for (int i = 0; i < 100003; ++i) ref += (static_cast<float>(i) * 1e-3f) * (static_cast<float>(i) * 1e-3f);
  CHECK(norms[0] == Approx(std::sqrt(ref)).epsilon(1e-6));
  CHECK(norms[0] == norms[1]);
}

TEST_CASE("optim: StepLR multiplies the lr by gamma every step_size steps") {
  TestContext ctx;
  Tensor p = ctx.from_vector<double>({1}, {1}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.1});
  optim::StepLR sched(sgd, 3, 0.5);
  for (int t = 0; t <= 10; ++t) {
    INFO(t);
    const double want = 0.1 * std::pow(0.5, t / 3);
    CHECK(sched.lr() == Approx(want).epsilon(1e-15));
    CHECK(sgd.lr() == sched.lr());
    sched.step();
  }
  FORGE_REQUIRE_ERROR(invalid_argument, "StepLR", optim::StepLR(sgd, 0, 0.5));
  FORGE_REQUIRE_ERROR(invalid_argument, "StepLR", optim::StepLR(sgd, 1, -0.5));
}

TEST_CASE("optim: CosineWithWarmup warms up linearly from 0, then follows the cosine down to min_lr") {
  TestContext ctx;
  Tensor p = ctx.from_vector<double>({1}, {1}).requires_grad_();
  optim::AdamW adamw({p}, {.lr = 0.1});
  optim::CosineWithWarmup sched(adamw, 4, 10, 0.01);
  for (int t = 0; t <= 13; ++t) {
    INFO(t);
    double want = 0.01;
    if (t < 4)
      want = 0.1 * t / 4.0;
    else if (t < 10)
      want = 0.01 + 0.09 * 0.5 * (1 + std::cos(std::numbers::pi * (t - 4) / 6.0));
    CHECK(sched.lr() == Approx(want).epsilon(1e-14).margin(1e-17));
    CHECK(adamw.lr() == sched.lr());
    sched.step();
  }
  optim::Adam adam({p}, {.lr = 0.2});
  optim::CosineWithWarmup no_warmup(adam, 0, 2);
  CHECK(adam.lr() == 0.2);
  no_warmup.step();
  CHECK(adam.lr() == Approx(0.1).epsilon(1e-15));
  no_warmup.step();
  CHECK(adam.lr() == 0);
  FORGE_REQUIRE_ERROR(invalid_argument, "CosineWithWarmup", optim::CosineWithWarmup(adamw, -1, 10));
  FORGE_REQUIRE_ERROR(invalid_argument, "CosineWithWarmup", optim::CosineWithWarmup(adamw, 5, 4));
  optim::SGD sgd({p}, {.lr = 0.1});
  FORGE_REQUIRE_ERROR(invalid_argument, "CosineWithWarmup", optim::CosineWithWarmup(sgd, 1, 4, 0.2));
}

TEST_CASE("optim: ExponentialLR, LinearLR and OneCycleLR follow their formulas") {
  TestContext ctx;
  Tensor p = ctx.from_vector<double>({1}, {1}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.2});
  {
    optim::ExponentialLR sched(sgd, 0.9);
    for (int t = 0; t <= 6; ++t, sched.step()) CHECK(sgd.lr() == Approx(0.2 * std::pow(0.9, t)).epsilon(1e-15));
  }
  sgd.set_lr(0.2);
  {
    optim::LinearLR sched(sgd, 0.25, 1.0, 4);
    for (int t = 0; t <= 6; ++t, sched.step()) {
      INFO(t);
      CHECK(sgd.lr() == Approx(0.2 * (0.25 + 0.75 * std::min(t, 4) / 4.0)).epsilon(1e-15));
    }
  }
  sgd.set_lr(0.2);
  {
    optim::OneCycleLR sched(sgd, 10, 0.3, 25, 1e4);
    const double peak = 0.2, initial = peak / 25, floor = initial / 1e4;
    auto anneal = [](double from, double to, double pct) {
      return to + (from - to) / 2 * (1 + std::cos(std::numbers::pi * pct));
    };
    for (int t = 0; t <= 11; ++t, sched.step()) {
      INFO(t);
      double want = floor;  // past the last step it stays there
      if (t <= 2)
        want = anneal(initial, peak, t / 2.0);
      else if (t <= 9)
        want = anneal(peak, floor, (t - 2) / 7.0);
      CHECK(sgd.lr() == Approx(want).epsilon(1e-14).margin(1e-18));
    }
    CHECK(sched.steps() == 12);
  }
  FORGE_REQUIRE_ERROR(invalid_argument, "ExponentialLR", optim::ExponentialLR(sgd, -0.5));
  FORGE_REQUIRE_ERROR(invalid_argument, "LinearLR", optim::LinearLR(sgd, 0.0));
  FORGE_REQUIRE_ERROR(invalid_argument, "LinearLR", optim::LinearLR(sgd, 0.5, 1.0, 0));
  FORGE_REQUIRE_ERROR(invalid_argument, "OneCycleLR", optim::OneCycleLR(sgd, 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "OneCycleLR", optim::OneCycleLR(sgd, 10, 1.0));
}

TEST_CASE("optim: a schedule scales each parameter group from its own base lr") {
  TestContext ctx;
  Tensor a = ctx.randn({2}).requires_grad_(), b = ctx.randn({2}).requires_grad_();
  optim::AdamW adamw({{{a}, {.lr = 0.1}}, {{b}, {.lr = 0.01}}});
  optim::CosineWithWarmup sched(adamw, 2, 6, 0.001);
  CHECK(sched.base_lrs() == std::vector<double>{0.1, 0.01});
  for (int t = 0; t <= 7; ++t, sched.step()) {
    INFO(t);
    for (std::size_t g = 0; g < 2; ++g) {
      const double base = g == 0 ? 0.1 : 0.01;
      double want = 0.001;
      if (t < 2)
        want = base * t / 2.0;
      else if (t < 6)
        want = 0.001 + (base - 0.001) * 0.5 * (1 + std::cos(std::numbers::pi * (t - 2) / 4.0));
      CHECK(adamw.lr(g) == Approx(want).epsilon(1e-14).margin(1e-18));
      CHECK(sched.lr(g) == adamw.lr(g));
    }
  }
  optim::StepLR step(adamw, 1, 0.5);  // the bases are the lrs the optimizer has now
  CHECK(step.base_lrs() == std::vector<double>{0.001, 0.001});
  FORGE_REQUIRE_ERROR(invalid_argument, "CosineWithWarmup", optim::CosineWithWarmup(adamw, 1, 4, 0.002));
}

TEST_CASE("optim: a schedule's state_dict resumes it exactly, and a refused dict changes nothing") {
  TestContext ctx;
  Tensor p = ctx.from_vector<double>({1}, {1}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.3});
  optim::OneCycleLR sched(sgd, 20, 0.25);
  for (int t = 0; t < 7; ++t) sched.step();
  const StateDict saved = sched.state_dict();
  CHECK(saved.at("step").item<std::int64_t>() == 7);
  CHECK(saved.at("base_lr").item<double>() == 0.3);
  CHECK(saved.at("pct_start").item<double>() == 0.25);

  // Made anew against an optimizer whose lr has already been changed, as when resuming.
  optim::SGD other({p}, {.lr = 1.0});
  optim::OneCycleLR resumed(other, 50);
  resumed.load_state_dict(saved);
  CHECK(resumed.steps() == 7);
  CHECK(other.lr() == sgd.lr());
  for (int t = 0; t < 15; ++t) {
    sched.step();
    resumed.step();
    CHECK(other.lr() == sgd.lr());
  }

  optim::StepLR step(other, 3);
  const double lr_before = other.lr();
  StateDict bad = step.state_dict();
  bad.insert_or_assign("gamma", ctx.full({}, -2.0, DType::f64));
  auto msg = FORGE_REQUIRE_ERROR(invalid_argument, "StepLR.load_state_dict", step.load_state_dict(bad));
  CHECK_THAT(msg, Catch::Contains("gamma -2"));
  bad = step.state_dict();
  bad.emplace("extra", ctx.full({}, 1.0, DType::f64));
  FORGE_REQUIRE_ERROR(invalid_argument, "StepLR.load_state_dict", step.load_state_dict(bad));
  FORGE_REQUIRE_ERROR(invalid_argument, "StepLR.load_state_dict", step.load_state_dict(saved));
  CHECK(other.lr() == lr_before);
  step.step();
  CHECK(other.lr() == Approx(lr_before).epsilon(1e-15));  // gamma still 0.1, step_size still 3
}
