// Mixed precision (forge/amp.h): which ops autocast and where, the recorded
// casts giving f32 master weights f32 gradients, a small MLP trained under
// bf16 autocast against the same MLP in f32, and GradScaler's skip, backoff,
// growth and state dict.

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::DType;
using forge::Tensor;
using forge_test::TestContext;
namespace amp = forge::amp;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const auto x = values(a), y = values(b);
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]) / (1.0 + std::abs(y[i])));
  return m;
}

}  // namespace

TEST_CASE("amp: inside an autocast region the listed ops compute in bf16, every other op and thread as before") {
  TestContext ctx;
  const Tensor a = ctx.randn({4, 8}), b = ctx.randn({8, 3}), bias = ctx.randn({3});
  const Tensor f32 = forge::matmul(a, b);
  CHECK_FALSE(amp::Autocast::is_enabled());
  {
    amp::AutocastGuard autocast(DType::bf16);
    CHECK(amp::Autocast::is_enabled());
    const Tensor m = forge::matmul(a, b);
    CHECK(m.dtype() == DType::bf16);
    CHECK(max_rel_diff(m, f32) < 3e-2);
    CHECK(forge::linear(a, b.t(), bias).dtype() == DType::bf16);
    CHECK(forge::bmm(a.unsqueeze(0), b.unsqueeze(0)).dtype() == DType::bf16);
    CHECK(forge::conv2d(ctx.randn({1, 2, 5, 5}), ctx.randn({3, 2, 3, 3}), ctx.randn({3})).dtype() == DType::bf16);
    const Tensor q = ctx.randn({2, 4, 8});
    CHECK(forge::scaled_dot_product_attention(q, q, q, ctx.zeros({4, 4})).dtype() == DType::bf16);
    // Not listed: unchanged. f64 is not cast.
    CHECK(forge::add(a, a).dtype() == DType::f32);
    CHECK(forge::softmax(a, -1).dtype() == DType::f32);
    CHECK(forge::matmul(a.to(DType::f64), b.to(DType::f64)).dtype() == DType::f64);
    {
      amp::AutocastGuard off(DType::bf16, false);
      CHECK(forge::matmul(a, b).dtype() == DType::f32);
    }
    CHECK(forge::matmul(a, b).dtype() == DType::bf16);
    bool other_thread_enabled = true;
    std::thread([&] { other_thread_enabled = amp::Autocast::is_enabled(); }).join();
    CHECK_FALSE(other_thread_enabled);
  }
  CHECK_FALSE(amp::Autocast::is_enabled());
  CHECK(forge::matmul(a, b).dtype() == DType::f32);
  FORGE_REQUIRE_ERROR(dtype, "AutocastGuard", amp::AutocastGuard guard(DType::f64));
}

TEST_CASE("amp: f32 master weights get f32 gradients through the recorded casts") {
  TestContext ctx;
  const Tensor x = ctx.randn({16, 8});
  Tensor w = ctx.randn({4, 8}).requires_grad_();
  Tensor b = ctx.randn({4}).requires_grad_();
  forge::linear(x, w, b).sum().backward();
  const Tensor gw32 = w.grad().clone(), gb32 = b.grad().clone();
  w.zero_grad();
  b.zero_grad();
  {
    amp::AutocastGuard autocast(DType::bf16);
    const Tensor y = forge::linear(x, w, b);
    REQUIRE(y.dtype() == DType::bf16);
    y.to(DType::f32).sum().backward();
  }
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f32);
  CHECK(max_rel_diff(w.grad(), gw32) < 3e-2);  // x's column sums, through bf16
  CHECK(values(b.grad()) == values(gb32));     // 16 per output, exact in bf16

  // conv2d, bmm and attention backward through bf16 too.
  Tensor k = ctx.randn({3, 2, 3, 3}).requires_grad_();
  Tensor q = ctx.randn({2, 4, 8}).requires_grad_();
  {
    amp::AutocastGuard autocast(DType::bf16);
    const Tensor c = forge::conv2d(ctx.randn({1, 2, 5, 5}), k);
    const Tensor a = forge::scaled_dot_product_attention(q, q, q);
    const Tensor m = forge::bmm(q, q.transpose(1, 2));
    REQUIRE(c.dtype() == DType::bf16);
    (c.to(DType::f32).sum() + a.to(DType::f32).sum() + m.to(DType::f32).sum()).backward();
  }
  CHECK(k.grad().dtype() == DType::f32);
  CHECK(q.grad().dtype() == DType::f32);
  for (const Tensor& g : {q.grad(), k.grad()})
    for (const double e : values(g)) CHECK(std::isfinite(e));
}

TEST_CASE("amp: a small MLP trained under bf16 autocast reaches a loss close to f32's") {
  TestContext ctx(forge_test::context_options(2, 7));
  const Tensor x = ctx.randn({128, 4});
  const Tensor target = forge::tanh(forge::linear(x, ctx.randn({1, 4}))) +
                        0.5 * x.index({forge::indexing::Slice(), 0}).unsqueeze(1).square();
  const std::vector<Tensor> init = {ctx.randn({32, 4}) * 0.5, ctx.zeros({32}), ctx.randn({1, 32}) * 0.2,
                                    ctx.zeros({1})};
  auto train = [&](bool autocast) {
    std::vector<Tensor> p;
    for (const Tensor& t : init) p.push_back(t.clone().requires_grad_());
    forge::optim::SGD opt(p, {.lr = 0.05, .momentum = 0.9});
    double first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard region(DType::bf16, autocast);
        const Tensor h = forge::relu(forge::linear(x, p[0], p[1]));
        const Tensor out = forge::linear(h, p[2], p[3]);
        CHECK(out.dtype() == (autocast ? DType::bf16 : DType::f32));
        loss = forge::mse_loss(out.to(DType::f32), target);
      }
      loss.backward();
      for (const Tensor& t : p) REQUIRE(t.grad().dtype() == DType::f32);
      opt.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    return std::pair{first, last};
  };
  const auto [first32, last32] = train(false);
  const auto [first16, last16] = train(true);
  INFO("f32 loss " << first32 << " -> " << last32 << ", bf16 autocast " << first16 << " -> " << last16);
  CHECK(last32 < 0.1 * first32);
  CHECK(std::abs(first16 - first32) < 0.02 * first32);
  CHECK(last16 < 0.1 * first16);
  CHECK(std::abs(last16 - last32) < 0.1 * last32);
}

TEST_CASE("amp: GradScaler unscales, skips a step with an inf gradient, backs off and grows") {
  TestContext ctx;
  Tensor p = ctx.ones({3}).requires_grad_();
  forge::optim::SGD opt({p}, {.lr = 0.25});
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 2});
  auto iteration = [&](bool inject_inf) {
    opt.zero_grad();
    const Tensor loss = (p * 2.0).sum();
    const Tensor scaled = scaler.scale(loss);
    CHECK(scaled.item<double>() == loss.item<double>() * scaler.get_scale());
    scaled.backward();
    CHECK(values(p.grad()) == std::vector<double>(3, 2 * scaler.get_scale()));
    if (inject_inf) {
      forge::autograd::NoGradGuard no_grad;
      p.grad().index_put_({1}, std::numeric_limits<double>::infinity());
    }
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  CHECK(iteration(false));
  CHECK(values(p) == std::vector<double>(3, 0.5));  // 1 - 0.25 * 2: the gradient was unscaled
  CHECK(scaler.get_scale() == 1024);
  CHECK(scaler.growth_tracker() == 1);
  CHECK(iteration(false));
  CHECK(scaler.get_scale() == 2048);  // growth_interval clean steps: grows
  CHECK(scaler.growth_tracker() == 0);
  CHECK_FALSE(iteration(true));
  CHECK(values(p) == std::vector<double>(3, 0.0));  // the skipped step left p alone
  CHECK(scaler.get_scale() == 1024);                // backed off
  CHECK(scaler.growth_tracker() == 0);

  // Unscaling by hand, then step(): no second division. Twice is an error.
  opt.zero_grad();
  scaler.scale((p * 3.0).sum()).backward();
  scaler.unscale_(opt);
  CHECK(values(p.grad()) == std::vector<double>(3, 3.0));
  FORGE_REQUIRE_ERROR(invalid_argument, "GradScaler.unscale_", scaler.unscale_(opt));
  CHECK(scaler.step(opt));
  CHECK(values(p) == std::vector<double>(3, -0.75));
  scaler.update();

  // The state dict round-trips; a bad one changes nothing.
  amp::GradScaler other;
  forge::StateDict dict = scaler.state_dict();
  other.load_state_dict(dict);
  CHECK(other.get_scale() == scaler.get_scale());
  CHECK(other.growth_tracker() == scaler.growth_tracker());
  dict["backoff_factor"] = ctx.full({}, 2.0, DType::f64);
  FORGE_REQUIRE_ERROR(invalid_argument, "GradScaler", other.load_state_dict(dict));
  dict.erase("scale");
  FORGE_REQUIRE_ERROR(invalid_argument, "GradScaler.load_state_dict", other.load_state_dict(dict));
  CHECK(other.get_scale() == scaler.get_scale());

  // Disabled: scale 1, steps always run.
  amp::GradScaler off({.enabled = false});
  CHECK(off.get_scale() == 1.0);
  CHECK(off.state_dict().empty());
  FORGE_REQUIRE_ERROR(invalid_argument, "GradScaler", amp::GradScaler({.backoff_factor = 1.5}));
}
