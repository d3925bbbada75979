// Gradients of the neural-network ops (rules/nn.cpp, loss.cpp, attention.cpp):
// softmax and log_softmax over every dim, layer_norm and rms_norm with and
// without their parameters, the indexing ops, the losses in every mode,
// dropout's replayed mask, attention with each kind of mask, triangles and
// every pad mode; and the ops that are not differentiable.

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::DType;
using forge::Reduction;
using forge::Shape;
using forge::Tensor;
using forge_test::check_gradients;
using forge_test::GradFn;
using forge_test::TestContext;

namespace {

Tensor leaf(TestContext& ctx, const Shape& shape) { return ctx.randn(shape, DType::f64).requires_grad_(); }

Tensor transposed_leaf(TestContext& ctx, std::int64_t rows, std::int64_t cols) {
  Tensor t = ctx.randn({cols, rows}, DType::f64).t();
  t.requires_grad_();
  return t;
}

Tensor indices(TestContext& ctx, const std::vector<std::int64_t>& values, const Shape& shape) {
  return ctx.from_vector<std::int64_t>(values, shape);
}

}  // namespace

TEST_CASE("autograd nn: softmax and log_softmax over the last and a middle dim") {
  TestContext ctx;
  for (std::int64_t dim : {-1, 0, 1}) {
    INFO("dim " << dim);
    check_gradients([dim](const std::vector<Tensor>& in) { return forge::softmax(in[0], dim); }, {leaf(ctx, {3, 4})});
    check_gradients([dim](const std::vector<Tensor>& in) { return forge::log_softmax(in[0], dim); },
                    {transposed_leaf(ctx, 3, 4)});
  }
  check_gradients([](const std::vector<Tensor>& in) { return forge::softmax(in[0], 1); }, {leaf(ctx, {2, 3, 4})});
}

TEST_CASE("autograd nn: softmax backward through a non-packed output gradient") {
  TestContext ctx;
  // sum() hands back an expanded (stride-0) gradient: the fused kernel packs it.
  Tensor x = ctx.randn({3, 5}, DType::f64).requires_grad_();
  forge::softmax(x, -1).sum().backward();
  for (double v : x.grad().to_vector<double>()) CHECK(std::abs(v) < 1e-12);
}

TEST_CASE("autograd nn: layer_norm with weight and bias, with neither, over two dims") {
  TestContext ctx;
  check_gradients([](const std::vector<Tensor>& in) { return forge::layer_norm(in[0], {4}, in[1], in[2]); },
                  {leaf(ctx, {3, 4}), leaf(ctx, {4}), leaf(ctx, {4})});
  check_gradients([](const std::vector<Tensor>& in) { return forge::layer_norm(in[0], {4}); },
                  {transposed_leaf(ctx, 3, 4)});
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return forge::layer_norm(in[0], {2, 3}, in[1], Tensor(), 1e-3);
      },
      {leaf(ctx, {2, 2, 3}), leaf(ctx, {2, 3})});
  check_gradients([](const std::vector<Tensor>& in) { return forge::layer_norm(in[0], {4}, Tensor(), in[1]); },
                  {leaf(ctx, {2, 4}), leaf(ctx, {4})});
}

TEST_CASE("autograd nn: rms_norm with and without weight") {
  TestContext ctx;
  check_gradients([](const std::vector<Tensor>& in) { return forge::rms_norm(in[0], {4}, in[1]); },
                  {leaf(ctx, {3, 4}), leaf(ctx, {4})});
  check_gradients([](const std::vector<Tensor>& in) { return forge::rms_norm(in[0], {3}, Tensor(), 1e-2); },
                  {transposed_leaf(ctx, 4, 3)});
}

// Normalizing c x equals normalizing x (eps aside), so with c a power of two
// the gradients of c x are x's divided by c, and the parameters' are x's.
// c = 2^700 puts the rows' squares beyond f64's range.
TEST_CASE("autograd nn: norm gradients of f64 rows beyond 1e154 are the rescaled rows'") {
  TestContext ctx;
  const double c = std::ldexp(1.0, 700);
  const Tensor small = ctx.randn({3, 6}, DType::f64), g = ctx.randn({3, 6}, DType::f64);
  for (bool rms : {false, true}) {
    INFO((rms ? "rms_norm" : "layer_norm"));
    auto grads = [&](const Tensor& x0, double eps) {
      Tensor x = x0.clone().requires_grad_();
      Tensor w = ctx.full({6}, 1.5, DType::f64).requires_grad_(), b = ctx.full({6}, 0.5, DType::f64).requires_grad_();
      const Tensor y = rms ? forge::rms_norm(x, {6}, w, eps) : forge::layer_norm(x, {6}, w, b, eps);
      forge::autograd::backward({y}, {g});
      return std::vector<Tensor>{x.grad(), w.grad(), rms ? Tensor() : b.grad()};
    };
    const auto huge = grads(small * c, 1e-5), want = grads(small, 0.0);
    const auto dx = huge[0].to_vector<double>(), dx_want = want[0].to_vector<double>();
    for (std::size_t i = 0; i < dx.size(); ++i) CHECK(dx[i] * c == Approx(dx_want[i]).epsilon(1e-10).margin(1e-12));
    for (std::size_t k = 1; k < huge.size(); ++k) {
      if (!huge[k].defined()) continue;
      const auto p = huge[k].to_vector<double>(), p_want = want[k].to_vector<double>();
      for (std::size_t i = 0; i < p.size(); ++i) CHECK(p[i] == Approx(p_want[i]).epsilon(1e-10).margin(1e-12));
    }
  }
}

TEST_CASE("autograd nn: embedding adds repeated rows into the weight gradient") {
  TestContext ctx;
  const Tensor idx = indices(ctx, {1, 3, 1, 0, 3, 3}, {2, 3});
  check_gradients([](const std::vector<Tensor>& in) { return forge::embedding(in[0], in[1]); },
                  {leaf(ctx, {4, 3}), idx});
  Tensor w = ctx.zeros({4, 2}, DType::f32).requires_grad_();
  forge::embedding(w, idx).sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 2, 2, 0, 0, 3, 3});
}

TEST_CASE("autograd nn: embedding's padding row is looked up but gets no gradient") {
  TestContext ctx;
  const Tensor idx = indices(ctx, {1, 3, 1, 0, 3, 3}, {2, 3});
  for (std::int64_t padding : {3, -1, 0, -4}) {  // -1 is row 3, -4 row 0
    INFO("padding_idx " << padding);
    Tensor w = ctx.randn({4, 2}).requires_grad_();
    const Tensor out = forge::embedding(w, idx, padding);
    CHECK(out.to_vector<double>() == forge::embedding(w.detach(), idx).to_vector<double>());
    out.sum().backward();
    const std::vector<double> counts = {1, 1, 2, 2, 0, 0, 3, 3};
    std::vector<double> want = counts;
    const std::size_t row = static_cast<std::size_t>(padding < 0 ? padding + 4 : padding);
    want[2 * row] = want[2 * row + 1] = 0;
    CHECK(w.grad().to_vector<double>() == want);
  }
  // The padding row's zero is a choice, not a derivative: gradcheck the
  // other rows, with a padding row that no index names.
  check_gradients([](const std::vector<Tensor>& in) { return forge::embedding(in[0], in[1], 2); },
                  {leaf(ctx, {4, 3}), idx});
  const Tensor w = ctx.zeros({4, 2});
  FORGE_REQUIRE_ERROR(out_of_range, "embedding", (void)forge::embedding(w, idx, 4));
  const std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "embedding", (void)forge::embedding(w, idx, -5));
  CHECK_THAT(msg, Catch::Contains("padding_idx -5 is out of range for 4 rows"));
}

TEST_CASE("autograd nn: index_select and gather with repeated indices") {
  TestContext ctx;
  const Tensor idx = indices(ctx, {2, 0, 2}, {3});
  for (std::int64_t dim : {0, 1}) {
    check_gradients([dim](const std::vector<Tensor>& in) { return forge::index_select(in[0], dim, in[1]); },
                    {transposed_leaf(ctx, 3, 4), idx});
  }
  const Tensor gidx = indices(ctx, {0, 2, 2, 1, 0, 0}, {2, 3});
  check_gradients([](const std::vector<Tensor>& in) { return forge::gather(in[0], 1, in[1]); },
                  {leaf(ctx, {3, 4}), gidx});
  check_gradients([](const std::vector<Tensor>& in) { return forge::gather(in[0], 0, in[1]); },
                  {transposed_leaf(ctx, 3, 4), indices(ctx, {0, 2, 1, 1, 2, 0}, {2, 3})});
}

TEST_CASE("autograd nn: scatter_add sends gradients to x and to src, zeros past index's extent") {
  TestContext ctx;
  const Tensor idx = indices(ctx, {0, 2, 2, 1}, {2, 2});
  check_gradients([](const std::vector<Tensor>& in) { return forge::scatter_add(in[0], 0, in[1], in[2]); },
                  {leaf(ctx, {3, 3}), idx, leaf(ctx, {3, 3})});
  check_gradients([](const std::vector<Tensor>& in) { return forge::scatter_add(in[0], 1, in[1], in[2]); },
                  {transposed_leaf(ctx, 2, 3), idx, leaf(ctx, {2, 2})});
}

TEST_CASE("autograd nn: cross_entropy in every reduction, with ignore_index and label smoothing") {
  TestContext ctx;
  const Tensor target = indices(ctx, {1, 3, 0, 2}, {4});
  const Tensor ignored = indices(ctx, {1, -1, 0, 2}, {4});
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    for (double ls : {0.0, 0.2}) {
      INFO("reduction " << static_cast<int>(r) << " label_smoothing " << ls);
      const forge::CrossEntropyOptions o{.reduction = r, .ignore_index = -1, .label_smoothing = ls};
      const GradFn f = [o](const std::vector<Tensor>& in) { return forge::cross_entropy(in[0], in[1], o); };
      check_gradients(f, {leaf(ctx, {4, 5}), target});
      check_gradients(f, {transposed_leaf(ctx, 4, 5), ignored});
    }
  }
  // One row: logits [C], target [].
  check_gradients([](const std::vector<Tensor>& in) { return forge::cross_entropy(in[0], in[1]); },
                  {leaf(ctx, {5}), indices(ctx, {3}, {})});
}

TEST_CASE("autograd nn: cross_entropy and nll_loss over [N, C, d1, ...] in every reduction and layout") {
  TestContext ctx;
  // Targets [2, 3, 2] over 4 classes at dim 1, two of them ignored (-1).
  const Tensor target = indices(ctx, {1, 3, 0, 2, -1, 1, 3, 3, 2, -1, 0, 0}, {2, 3, 2});
  // [N, d1, d2, C] moved to [N, C, d1, d2]: a transformer's logits as libtorch takes them.
  Tensor moved = ctx.randn({2, 3, 2, 4}, DType::f64).permute({0, 3, 1, 2});
  moved.requires_grad_();
  Tensor stepped = ctx.randn({2, 4, 3, 5}, DType::f64).slice(3, 0, 4, 2);  // [2, 4, 3, 2], last stride 2
  stepped.requires_grad_();
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    for (double ls : {0.0, 0.3}) {
      INFO("reduction " << static_cast<int>(r) << " label_smoothing " << ls);
      const forge::CrossEntropyOptions o{.reduction = r, .ignore_index = -1, .label_smoothing = ls};
      const GradFn f = [o](const std::vector<Tensor>& in) { return forge::cross_entropy(in[0], in[1], o); };
      check_gradients(f, {leaf(ctx, {2, 4, 3, 2}), target});
      check_gradients(f, {moved, target});
      check_gradients(f, {stepped, target});
    }
    const GradFn nll = [r](const std::vector<Tensor>& in) { return forge::nll_loss(in[0], in[1], r, -1); };
    check_gradients(nll, {leaf(ctx, {2, 4, 3, 2}), target});
    check_gradients(nll, {moved, target});
  }
  // [B, T, V] logits through transpose(1, 2): the gradient is written in
  // the input's own layout, so that it flows back as packed [B, T, V] rows.
  const Tensor logits = ctx.randn({2, 3, 5}).requires_grad_();
  const Tensor viewed = logits.transpose(1, 2);
  const Tensor ce = forge::cross_entropy(viewed, indices(ctx, {0, 1, 2, 3, 4, 0}, {2, 3}));
  CHECK(forge::autograd::grad({ce}, {viewed})[0].strides() == viewed.strides());
  // One spatial dim, and spatial dims of size 0 (an empty mean is NaN; its gradient empty).
  check_gradients([](const std::vector<Tensor>& in) { return forge::cross_entropy(in[0], in[1]); },
                  {leaf(ctx, {3, 5, 4}), indices(ctx, {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}, {3, 4})});
  Tensor empty = ctx.randn({2, 4, 0}, DType::f64).requires_grad_();
  const Tensor loss = forge::cross_entropy(empty, ctx.zeros({2, 0}, DType::i64));
  CHECK(std::isnan(loss.item<double>()));
  loss.backward();
  CHECK(empty.grad().shape() == Shape{2, 4, 0});
}

TEST_CASE("autograd nn: cross_entropy's gradient is softmax minus the one-hot, over the counted rows") {
  TestContext ctx;
  Tensor x = ctx.randn({3, 4}).requires_grad_();
  const Tensor t = indices(ctx, {2, -100, 1}, {3});
  forge::cross_entropy(x, t).backward();
  const auto p = forge::softmax(x.detach(), -1).to_vector<double>();
  const auto g = x.grad().to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      const int target = i == 0 ? 2 : (i == 2 ? 1 : -1);
      const double want = target < 0 ? 0.0 : (p[i * 4 + j] - (j == target ? 1.0 : 0.0)) / 2.0;
      CHECK(g[i * 4 + j] == Approx(want).margin(1e-6));
    }
}

TEST_CASE("autograd nn: nll_loss in every reduction with ignore_index") {
  TestContext ctx;
  const Tensor target = indices(ctx, {1, 3, 0, 3}, {4});
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    INFO("reduction " << static_cast<int>(r));
    check_gradients([r](const std::vector<Tensor>& in) { return forge::nll_loss(in[0], in[1], r, 3); },
                    {transposed_leaf(ctx, 4, 5), target});
  }
}

TEST_CASE("autograd nn: mse_loss reaches both operands through broadcasting") {
  TestContext ctx;
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    INFO("reduction " << static_cast<int>(r));
    check_gradients([r](const std::vector<Tensor>& in) { return forge::mse_loss(in[0], in[1], r); },
                    {transposed_leaf(ctx, 3, 4), leaf(ctx, {4})});
  }
}

TEST_CASE("autograd nn: dropout's gradient uses the forward's mask and scale") {
  TestContext ctx;
  check_gradients(
      [&ctx](const std::vector<Tensor>& in) {
        ctx.manual_seed(7);
        return forge::dropout(in[0], 0.4);
      },
      {transposed_leaf(ctx, 4, 5)});
  Tensor x = ctx.ones({200}, DType::f32).requires_grad_();
  const Tensor y = forge::dropout(x, 0.25);
  y.sum().backward();
  CHECK(x.grad().to_vector<float>() == y.detach().to_vector<float>());  // x is ones: y is mask * scale
  const auto g = forge::autograd::grad({forge::dropout(x, 1.0).sum()}, {x});
  for (float v : g[0].to_vector<float>()) CHECK(v == 0.0f);
}

TEST_CASE("autograd nn: dropout with p = 0 or in evaluation returns x and records nothing") {
  TestContext ctx;
  Tensor x = ctx.randn({3}).requires_grad_();
  const Tensor a = forge::dropout(x, 0.0), b = forge::dropout(x, 0.5, false);
  CHECK(a.is_leaf());
  CHECK(b.is_leaf());
  CHECK(a.impl() == x.impl());
}

TEST_CASE("autograd nn: dropout keeps manual_seed replay with autograd on") {
  TestContext ctx;
  Tensor x = ctx.randn({50});
  ctx.manual_seed(3);
  const auto plain = forge::dropout(x, 0.5).to_vector<float>();
  x.requires_grad_();
  ctx.manual_seed(3);
  CHECK(forge::dropout(x, 0.5).detach().to_vector<float>() == plain);
}

TEST_CASE("autograd nn: scaled_dot_product_attention without mask, causal, with bool and float masks") {
  TestContext ctx;
  const GradFn plain = [](const std::vector<Tensor>& in) {
    return forge::scaled_dot_product_attention(in[0], in[1], in[2]);
  };
  check_gradients(plain, {leaf(ctx, {2, 3, 2}), leaf(ctx, {2, 4, 2}), leaf(ctx, {2, 4, 3})});
  // k and v broadcast over q's leading batch dim; k is not packed.
  Tensor k = ctx.randn({1, 2, 4}, DType::f64).transpose(1, 2);
  k.requires_grad_();
  check_gradients(plain, {leaf(ctx, {2, 3, 2}), k, leaf(ctx, {4, 2})});
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return forge::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), true, 0.7);
      },
      {leaf(ctx, {3, 2}), leaf(ctx, {3, 2}), leaf(ctx, {3, 2})});
  // Causal from the end, fewer queries than keys (a chunk over a KV cache).
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return forge::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), true, std::nullopt,
                                                   forge::CausalAlign::bottom_right);
      },
      {leaf(ctx, {2, 2}), leaf(ctx, {5, 2}), leaf(ctx, {5, 3})});
  const Tensor keep =
      ctx.from_vector<bool>({true, false, true, true, true, true, false, true, false, true, true, false}, {3, 4});
  const Tensor bias = ctx.randn({3, 4}, DType::f64);
  for (const Tensor& mask : {keep, bias}) {
    check_gradients(
        [](const std::vector<Tensor>& in) { return forge::scaled_dot_product_attention(in[0], in[1], in[2], in[3]); },
        {leaf(ctx, {3, 2}), leaf(ctx, {4, 2}), leaf(ctx, {4, 2}), mask});
  }
}

TEST_CASE("autograd nn: a float attention mask that requires grad gets no gradient") {
  TestContext ctx;
  Tensor q = ctx.randn({2, 2}).requires_grad_();
  Tensor mask = ctx.randn({2, 2}).requires_grad_();
  const auto g = forge::autograd::grad({forge::scaled_dot_product_attention(q, q, q, mask).sum()}, {q, mask},
                                       {.allow_unused = true});
  CHECK(g[0].defined());
  CHECK_FALSE(g[1].defined());
}

TEST_CASE("autograd nn: triu and tril keep the gradient's triangle") {
  TestContext ctx;
  for (std::int64_t diagonal : {-1, 0, 2}) {
    check_gradients([diagonal](const std::vector<Tensor>& in) { return forge::triu(in[0], diagonal); },
                    {transposed_leaf(ctx, 3, 4)});
    check_gradients([diagonal](const std::vector<Tensor>& in) { return forge::tril(in[0], diagonal); },
                    {leaf(ctx, {2, 3, 3})});
  }
}

TEST_CASE("autograd nn: pad in constant mode (padding and cropping), reflect and replicate") {
  TestContext ctx;
  using forge::PadMode;
  const GradFn constant = [](const std::vector<Tensor>& in) {
    return forge::pad(in[0], {1, -1, 2, 0}, PadMode::constant, 3.0);
  };
  check_gradients(constant, {transposed_leaf(ctx, 3, 4)});
  for (PadMode mode : {PadMode::reflect, PadMode::replicate}) {
    INFO("mode " << static_cast<int>(mode));
    check_gradients(
        [mode](const std::vector<Tensor>& in) {
          return forge::pad(in[0], {2, 1, 1, 2}, mode);
        },
        {transposed_leaf(ctx, 3, 4)});
    check_gradients(
        [mode](const std::vector<Tensor>& in) {
          return forge::pad(in[0], {0, 2}, mode);
        },
        {leaf(ctx, {2, 2, 3})});
  }
}

TEST_CASE("autograd nn: f16 and bf16 inputs get gradients in their dtype, close to f32's") {
  TestContext ctx;
  const Tensor x32 = ctx.randn({3, 4});
  const Tensor w32 = ctx.randn({4});
  const Tensor t = indices(ctx, {0, 3, 1}, {3});
  using Loss = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<Loss> losses = {
      [&](const Tensor& x, const Tensor&) { return forge::mul(forge::softmax(x, -1), x.detach()).sum(); },
      [&](const Tensor& x, const Tensor& w) { return forge::mul(forge::layer_norm(x, {4}, w), x.detach()).sum(); },
      [&](const Tensor& x, const Tensor& w) { return forge::mul(forge::rms_norm(x, {4}, w), x.detach()).sum(); },
      [&](const Tensor& x, const Tensor&) { return forge::cross_entropy(x, t); },
  };
  for (std::size_t i = 0; i < losses.size(); ++i) {
    for (DType dt : {DType::f16, DType::bf16}) {
      INFO("loss " << i << " dtype " << forge::dtype_name(dt));
      Tensor a = x32.to(dt).requires_grad_(), wa = w32.to(dt).requires_grad_();
      Tensor b = x32.to(dt).to(DType::f32).requires_grad_(), wb = w32.to(dt).to(DType::f32).requires_grad_();
      const auto ga = forge::autograd::grad({losses[i](a, wa)}, {a}, {.allow_unused = true});
      const auto gb = forge::autograd::grad({losses[i](b, wb)}, {b}, {.allow_unused = true});
      REQUIRE(ga[0].dtype() == dt);
      const auto va = ga[0].to_vector<double>(), vb = gb[0].to_vector<double>();
      for (std::size_t j = 0; j < va.size(); ++j) CHECK(va[j] == Approx(vb[j]).margin(0.1).epsilon(0.1));
    }
  }
}

TEST_CASE("autograd nn: one_hot and integer outputs do not require grad") {
  TestContext ctx;
  Tensor x = ctx.randn({2, 3}).requires_grad_();
  const Tensor idx = indices(ctx, {0, 2}, {2});
  CHECK_FALSE(forge::one_hot(idx, 3).requires_grad());
  CHECK_FALSE(forge::argmax(x, 1).requires_grad());
  CHECK(forge::index_select(x, 1, idx).requires_grad());
  forge::autograd::NoGradGuard no_grad;
  CHECK_FALSE(forge::softmax(x, 1).requires_grad());
  CHECK_FALSE(forge::cross_entropy(x, idx).requires_grad());
}

// f32 rows take vectorized gradient kernels, f64 the scalar loops: the same
// values through both must agree to f32 precision. Row lengths around the
// vector width and the f64 fold, with and without weight and bias, several
// rows so that dw and db add over rows.
TEST_CASE("autograd nn: f32 softmax, log_softmax, layer_norm and rms_norm gradients match f64") {
  TestContext ctx;
  for (const std::int64_t n : {1, 17, 100, 1027, 5000}) {
    INFO("row length " << n);
    const Tensor x64 = ctx.randn({6, n}, DType::f64), g64 = ctx.randn({6, n}, DType::f64);
    const Tensor w64 = ctx.randn({n}, DType::f64), b64 = ctx.randn({n}, DType::f64);
    using Fn = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
    const std::vector<std::pair<const char*, Fn>> ops = {
        {"softmax", [](const Tensor& x, const Tensor&, const Tensor&) { return forge::softmax(x, -1); }},
        {"log_softmax", [](const Tensor& x, const Tensor&, const Tensor&) { return forge::log_softmax(x, -1); }},
        {"layer_norm",
         [n](const Tensor& x, const Tensor& w, const Tensor& b) { return forge::layer_norm(x, {n}, w, b); }},
        {"layer_norm, no affine",
         [n](const Tensor& x, const Tensor&, const Tensor&) { return forge::layer_norm(x, {n}); }},
        {"rms_norm", [n](const Tensor& x, const Tensor& w, const Tensor&) { return forge::rms_norm(x, {n}, w); }},
    };
    for (const auto& [name, op] : ops) {
      INFO(name);
      std::vector<std::vector<double>> grads[2];
      for (const DType t : {DType::f64, DType::f32}) {
        Tensor x = x64.to(t).detach().requires_grad_(), w = w64.to(t).detach().requires_grad_(),
               b = b64.to(t).detach().requires_grad_();
        op(x, w, b).backward(g64.to(t));
        auto& out = grads[t == DType::f32];
        for (const Tensor& leaf : {x, w, b})
          out.push_back(leaf.grad().defined() ? leaf.grad().to_vector<double>() : std::vector<double>{});
      }
      for (std::size_t k = 0; k < 3; ++k) {
        REQUIRE(grads[0][k].size() == grads[1][k].size());
        double scale = 1;  // gradients are O(1); a row of one has exact zeros in f64, rounding noise in f32
        for (const double v : grads[0][k]) scale = std::max(scale, std::abs(v));
        for (std::size_t i = 0; i < grads[0][k].size(); ++i)
          CHECK(std::abs(grads[1][k][i] - grads[0][k][i]) <= 2e-4 * scale);
      }
    }
  }
}
