// Gradients of conv2d, max_pool2d and avg_pool2d (src/autograd/rules/conv.cpp):
// finite differences over every option on small inputs, the adjoint identity
// on layers large enough to take the threaded, tiled kernel paths, and the
// max pool's tie rule on exact values.

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::Conv2dOptions;
using forge::DType;
using forge::Pool2dOptions;
using forge::Tensor;
using forge_test::check_gradients;
using forge_test::TestContext;
namespace autograd = forge::autograd;

namespace {

Tensor leaf(TestContext& ctx, const forge::Shape& shape) { return ctx.randn(shape, DType::f64).requires_grad_(); }

// An NCHW leaf whose storage is NHWC: no dim but N has unit stride.
Tensor channels_last_leaf(TestContext& ctx, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  Tensor t = ctx.randn({n, h, w, c}, DType::f64).permute({0, 3, 1, 2});
  t.requires_grad_();
  return t;
}

// conv2d over inputs {x, weight, bias} (bias may be undefined).
forge_test::GradFn conv(const Conv2dOptions& o) {
  return [o](const std::vector<Tensor>& in) { return forge::conv2d(in[0], in[1], in[2], o); };
}

forge_test::GradFn max_pool(const Pool2dOptions& o) {
  return [o](const std::vector<Tensor>& in) { return forge::max_pool2d(in[0], o); };
}

forge_test::GradFn avg_pool(const Pool2dOptions& o) {
  return [o](const std::vector<Tensor>& in) { return forge::avg_pool2d(in[0], o); };
}

double inner(const Tensor& a, const Tensor& b) {
  return forge::sum(a.to(DType::f64) * b.to(DType::f64)).item<double>();
}

}  // namespace

TEST_CASE("autograd conv: conv2d gradients of x, weight and bias at stride 1") {
  TestContext ctx;
  check_gradients(conv({}), {leaf(ctx, {1, 2, 4, 4}), leaf(ctx, {3, 2, 2, 2}), leaf(ctx, {3})});
}

TEST_CASE("autograd conv: conv2d with stride 2 and padding, batch 2") {
  TestContext ctx;
  const Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}};
  check_gradients(conv(o), {leaf(ctx, {2, 1, 5, 5}), leaf(ctx, {2, 1, 3, 3}), leaf(ctx, {2})});
  // Uneven strides and paddings, no bias.
  const Conv2dOptions uneven{.stride = {1, 2}, .padding = {0, 2}};
  check_gradients(conv(uneven), {leaf(ctx, {2, 1, 4, 5}), leaf(ctx, {2, 1, 2, 3}), Tensor()});
}

TEST_CASE("autograd conv: conv2d with dilation") {
  TestContext ctx;
  const Conv2dOptions o{.padding = {1, 0}, .dilation = {2, 2}};
  check_gradients(conv(o), {leaf(ctx, {1, 2, 5, 5}), leaf(ctx, {2, 2, 2, 2}), leaf(ctx, {2})});
}

TEST_CASE("autograd conv: conv2d with 2 groups, with and without bias") {
  TestContext ctx;
  const Conv2dOptions o{.padding = {1, 1}, .groups = 2};
  check_gradients(conv(o), {leaf(ctx, {1, 4, 3, 3}), leaf(ctx, {4, 2, 2, 2}), Tensor()});
  check_gradients(conv(o), {leaf(ctx, {2, 4, 2, 2}), leaf(ctx, {2, 2, 2, 2}), leaf(ctx, {2})});
}

TEST_CASE("autograd conv: conv2d of non-contiguous x and weight") {
  TestContext ctx;
  // x and weight stored channels-last (the weight packed by the kernel).
  Tensor w = ctx.randn({2, 3, 3, 2}, DType::f64).permute({0, 3, 1, 2});
  w.requires_grad_();
  check_gradients(conv({.padding = {1, 1}}), {channels_last_leaf(ctx, 1, 2, 4, 4), w, leaf(ctx, {2})});
}

TEST_CASE("autograd conv: conv2d with a gradient whose planes are not flat") {
  TestContext ctx;
  // sum over W hands back a gradient expanded along W (stride 0).
  auto fn = [](const std::vector<Tensor>& in) { return forge::sum(forge::conv2d(in[0], in[1], in[2]), 3); };
  check_gradients(fn, {leaf(ctx, {2, 2, 3, 4}), leaf(ctx, {2, 2, 2, 2}), leaf(ctx, {2})});
}

TEST_CASE("autograd conv: conv2d of an unbatched image") {
  TestContext ctx;
  check_gradients(conv({.stride = {2, 1}}), {leaf(ctx, {2, 4, 4}), leaf(ctx, {3, 2, 2, 2}), leaf(ctx, {3})});
}

TEST_CASE("autograd conv: pointwise conv2d, contiguous and channels-last") {
  TestContext ctx;
  check_gradients(conv({}), {leaf(ctx, {2, 2, 3, 3}), leaf(ctx, {3, 2, 1, 1}), leaf(ctx, {3})});
  check_gradients(conv({}), {channels_last_leaf(ctx, 2, 2, 3, 3), leaf(ctx, {3, 2, 1, 1}), Tensor()});
  // 1x1 with stride 2 is not pointwise: it goes through the column tiles.
  check_gradients(conv({.stride = {2, 2}}), {leaf(ctx, {2, 2, 3, 3}), leaf(ctx, {3, 2, 1, 1}), Tensor()});
}

TEST_CASE("autograd conv: conv2d gradients of x alone or of the weight alone") {
  TestContext ctx;
  const Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}};
  Tensor x = leaf(ctx, {2, 2, 4, 4});
  Tensor w = ctx.randn({2, 2, 3, 3}, DType::f64);
  check_gradients(conv(o), {x, w, Tensor()});
  Tensor x2 = ctx.randn({2, 2, 4, 4}, DType::f64);
  check_gradients(conv(o), {x2, leaf(ctx, {2, 2, 3, 3}), leaf(ctx, {2})});
}

TEST_CASE("autograd conv: conv2d on threaded and tiled layers satisfies the adjoint identity") {
  // conv2d is bilinear: for r = dL/dy, <r, conv(x, w)> = <dL/dx, x> = <dL/dw, w>.
  TestContext ctx(forge_test::context_options(4));
  struct Case {
    DType dtype;
    forge::Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {DType::f64, {4, 64, 20, 20}, {8, 64, 3, 3}, {.padding = {1, 1}}},  // two tiles per image
      {DType::f32, {8, 8, 20, 20}, {16, 4, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}},
      {DType::f32, {8, 16, 12, 12}, {32, 16, 1, 1}, {}},  // pointwise
      {DType::f32, {8, 16, 14, 14}, {32, 16, 3, 3}, {.dilation = {2, 2}}},
      // dL/dx as a forward convolution (Note [conv2d input gradient as a
      // forward]): groups, unequal padding and dilation, a 5x3 kernel
      {DType::f32, {2, 32, 9, 11}, {20, 16, 5, 3}, {.padding = {2, 3}, .dilation = {1, 2}, .groups = 2}},
      {DType::f32, {3, 20, 7, 13}, {24, 20, 3, 3}, {.padding = {0, 1}}},
      // dL/dW transposed (Note [thin weight gradients]): one input channel,
      // a pointwise layer, and groups with 2x2 kernels
      {DType::f32, {32, 1, 28, 28}, {32, 1, 3, 3}, {.padding = {1, 1}}},  // threaded: one accumulator per slot
      {DType::f32, {4, 8, 10, 10}, {6, 8, 1, 1}, {}},
      {DType::f32, {4, 4, 9, 9}, {6, 2, 2, 2}, {.stride = {2, 1}, .groups = 2}},
  };
  for (const Case& c : cases) {
    Tensor x = ctx.randn(c.x, c.dtype).requires_grad_();
    Tensor w = ctx.randn(c.w, c.dtype).requires_grad_();
    Tensor y = forge::conv2d(x, w, Tensor(), c.o);
    Tensor r = ctx.randn(y.shape(), c.dtype);
    const auto g = autograd::grad({y}, {x, w}, {.grad_outputs = {r}});
    const double ry = inner(r, y), gx = inner(g[0], x), gw = inner(g[1], w);
    const double tol = (c.dtype == DType::f64 ? 1e-10 : 1e-4) * (1 + std::abs(ry));
    CHECK(std::abs(gx - ry) <= tol);
    CHECK(std::abs(gw - ry) <= tol);
  }
}

TEST_CASE("autograd conv: Winograd's f32 gradients of 3x3 stride-1 layers match f64 within their terms' magnitude") {
  // dL/dx runs as a Winograd forward and dL/dW as Winograd's 16 sums over
  // tiles (Note [Winograd weight gradients]): ragged tiles, padding 0-2,
  // several chunks of tiles per thread, a last chunk shorter than the
  // others, and a channel-sliced x. Each element is held to 1e-5 of the
  // sum of its terms' magnitudes: the same gradients in f64 of |x|, |w|
  // and |dL/dy|.
  struct Case {
    forge::Shape x, w;
    std::int64_t pad;
  };
  const Case cases[] = {
      {{2, 16, 8, 8}, {16, 16, 3, 3}, 1},
      {{3, 17, 9, 7}, {19, 17, 3, 3}, 1},
      {{2, 16, 11, 13}, {24, 16, 3, 3}, 0},
      {{2, 20, 6, 5}, {16, 20, 3, 3}, 2},
      {{4, 16, 30, 30}, {40, 16, 3, 3}, 1},
      {{1, 24, 5, 40}, {32, 24, 3, 3}, 1},
      {{6, 32, 14, 14}, {64, 32, 3, 3}, 1},
      // 16 outputs: sgemm's dot mode for chunks of 64 tiles or more, its
      // packed mode (with scratch) for a shorter last chunk (8 threads:
      // chunks of 80, the last of 40; 1 thread: chunks of 256, the last of 1)
      {{2, 16, 30, 40}, {16, 16, 3, 3}, 1},
      {{5, 16, 14, 278}, {16, 16, 3, 3}, 1},
  };
  for (const int threads : {1, 2, 8}) {
    TestContext ctx(forge_test::context_options(threads));
    for (const Case& c : cases) {
      const Conv2dOptions o{.padding = {c.pad, c.pad}};
      // x channel-sliced (rows contiguous, planes apart), dL/dy transposed in
      // memory (the rule makes it contiguous before the kernel).
      Tensor x = ctx.randn({c.x[0], 2 * c.x[1], c.x[2], c.x[3]}).slice(1, 0, 2 * c.x[1], 2);
      x.requires_grad_();
      Tensor w = ctx.randn(c.w).requires_grad_();
      const Tensor y = forge::conv2d(x, w, Tensor(), o);
      const Tensor r = ctx.randn({y.shape()[0], y.shape()[1], y.shape()[3], y.shape()[2]}).transpose(2, 3);
      const auto g = autograd::grad({y}, {x, w}, {.grad_outputs = {r}});
      auto f64 = [&](const Tensor& t, bool magnitude) {
        Tensor d = t.detach().to(DType::f64);
        return (magnitude ? forge::abs(d) : d).requires_grad_();
      };
      const Tensor x64 = f64(x, false), w64 = f64(w, false), ax = f64(x, true), aw = f64(w, true);
      const auto want =
          autograd::grad({forge::conv2d(x64, w64, Tensor(), o)}, {x64, w64}, {.grad_outputs = {r.to(DType::f64)}});
      const auto mag = autograd::grad({forge::conv2d(ax, aw, Tensor(), o)}, {ax, aw},
                                      {.grad_outputs = {forge::abs(r.to(DType::f64))}});
      for (int i = 0; i < 2; ++i) {
        INFO(threads << " threads, x " << c.x << " weight " << c.w << " pad " << c.pad << (i ? ": dL/dW" : ": dL/dx"));
        const std::vector<double> got = g[static_cast<std::size_t>(i)].to(DType::f64).to_vector<double>();
        const std::vector<double> ref = want[static_cast<std::size_t>(i)].to_vector<double>();
        const std::vector<double> bound = mag[static_cast<std::size_t>(i)].to_vector<double>();
        REQUIRE(got.size() == ref.size());
        std::size_t bad = 0;
        for (std::size_t k = 0; k < got.size(); ++k)
          if (!(std::abs(got[k] - ref[k]) <= 1e-5 * bound[k] + 1e-30) && bad++ < 3)
            FAIL_CHECK("element " << k << ": " << got[k] << " against " << ref[k] << " +- " << 1e-5 * bound[k]);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("autograd conv: 16-bit conv2d gradients come back in the input's dtype") {
  TestContext ctx;
  Tensor x = ctx.randn({2, 2, 5, 5}, DType::f32);
  Tensor w = ctx.randn({3, 2, 3, 3}, DType::f32);
  Tensor xh = x.to(DType::bf16).requires_grad_(), wh = w.to(DType::bf16).requires_grad_();
  Tensor xf = xh.detach().to(DType::f32).requires_grad_(), wf = wh.detach().to(DType::f32).requires_grad_();
  forge::sum(forge::conv2d(xh, wh, Tensor(), {.padding = {1, 1}})).backward();
  forge::sum(forge::conv2d(xf, wf, Tensor(), {.padding = {1, 1}})).backward();
  REQUIRE(xh.grad().dtype() == DType::bf16);
  REQUIRE(wh.grad().dtype() == DType::bf16);
  const auto a = xh.grad().to_vector<double>(), b = xf.grad().to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= 0.02 * (1 + std::abs(b[i])));
  const auto c = wh.grad().to_vector<double>(), d = wf.grad().to_vector<double>();
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::abs(c[i] - d[i]) <= 0.05 * (1 + std::abs(d[i])));
}

TEST_CASE("autograd conv: conv2d records only when an input requires grad") {
  TestContext ctx;
  Tensor x = ctx.randn({1, 1, 3, 3}), w = ctx.randn({1, 1, 2, 2});
  CHECK_FALSE(forge::conv2d(x, w).requires_grad());
  CHECK_FALSE(forge::max_pool2d(x).requires_grad());
  w.requires_grad_();
  Tensor y = forge::conv2d(x, w);
  CHECK(y.requires_grad());
  CHECK(std::string(y.grad_fn_name()) == "conv2d");
  Tensor out = ctx.zeros({1, 1, 2, 2});
  FORGE_REQUIRE_ERROR(backward, "conv2d_into", forge::conv2d_into(out, x, w));
  forge::autograd::NoGradGuard no_grad;
  forge::conv2d_into(out, x, w);
  CHECK_FALSE(out.requires_grad());
}

TEST_CASE("autograd conv: max_pool2d gradients over windows, strides, padding and dilation") {
  TestContext ctx;
  check_gradients(max_pool({}), {leaf(ctx, {2, 1, 4, 4})});
  check_gradients(max_pool({.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}), {leaf(ctx, {2, 1, 5, 5})});
  check_gradients(max_pool({.kernel = {2, 2}, .stride = {1, 1}}), {channels_last_leaf(ctx, 2, 2, 3, 3)});
  check_gradients(max_pool({.kernel = {2, 3}, .dilation = {2, 1}}), {leaf(ctx, {1, 2, 5, 5})});
  check_gradients(max_pool({.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}),
                  {leaf(ctx, {1, 2, 4, 4})});
  check_gradients(max_pool({.kernel = {2, 2}, .stride = {1, 2}}), {leaf(ctx, {2, 3, 3})});  // unbatched
  // Windows that tile the plane but for a leftover column and row.
  check_gradients(max_pool({.kernel = {3, 2}}), {leaf(ctx, {1, 2, 7, 5})});
  check_gradients(max_pool({}), {leaf(ctx, {1, 2, 5, 5})});
}

TEST_CASE("autograd conv: max_pool2d credits the first max of a tied window") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({5, 5, 1, 1, 5, 5, 1, 1}, {1, 1, 2, 4}).requires_grad_();
  forge::sum(forge::max_pool2d(x)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 1, 0, 0, 0, 0, 0});
  // Overlapping windows that share their max credit it once each.
  Tensor y = ctx.from_vector<float>({1, 2, 1}, {1, 1, 1, 3}).requires_grad_();
  forge::sum(forge::max_pool2d(y, {.kernel = {1, 2}, .stride = {1, 1}})).backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 2, 0});
  // A NaN wins its window, the last one when there are several (libtorch's index).
  const double nan = std::nan("");
  Tensor z = ctx.from_vector<double>({1, nan, 7, nan, 2, 3, nan, 4}, {1, 1, 2, 4}).requires_grad_();
  forge::sum(forge::max_pool2d(z)).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0, 0, 0, 1, 0});
}

// f32 2x2 stride-2 pools run vectorized rows (pool2x2.h); f64 runs the
// scalar loops. Same values, same results: widths around the 16-output
// step, odd sizes that leave a column and a row out, ties from a small set
// of values (the first max takes the gradient), and NaNs in some windows.
TEST_CASE("autograd conv: f32 2x2 max pools match the f64 loops, ties, NaNs and row tails included") {
  TestContext ctx;
  std::mt19937 rng(3);
  const double nan = std::nan("");
  for (const std::int64_t w : {2, 5, 31, 32, 33, 34, 65}) {
    for (const bool with_nan : {false, true}) {
      INFO("width " << w << (with_nan ? " with NaNs" : ""));
      const std::int64_t h = 2 * (w % 3) + 3;
      std::vector<double> values(static_cast<std::size_t>(2 * 3 * h * w));
      for (double& v : values) v = static_cast<double>(rng() % 4);  // ties in most windows
      if (with_nan)
        for (std::size_t i = 0; i < values.size(); i += 37) values[i] = nan;
      std::vector<double> upstream(static_cast<std::size_t>(2 * 3 * (h / 2) * (w / 2)));
      for (double& v : upstream) v = static_cast<double>(rng() % 7) - 3;
      Tensor x64 = ctx.from_vector<double>(values, {2, 3, h, w}).requires_grad_();
      Tensor x32 = x64.detach().to(DType::f32).requires_grad_();
      const Tensor y64 = forge::max_pool2d(x64, {.kernel = {2, 2}});
      const Tensor y32 = forge::max_pool2d(x32, {.kernel = {2, 2}});
      y64.backward(ctx.from_vector<double>(upstream, y64.shape()));
      y32.backward(ctx.from_vector<double>(upstream, y32.shape()).to(DType::f32));
      const auto f64 = y64.to_vector<double>(), f32 = y32.to_vector<double>();
      REQUIRE(f32.size() == f64.size());
      for (std::size_t i = 0; i < f64.size(); ++i)
        CHECK(((std::isnan(f64[i]) && std::isnan(f32[i])) || f64[i] == f32[i]));
      CHECK(x32.grad().to_vector<double>() == x64.grad().to_vector<double>());
    }
  }
}

TEST_CASE("autograd conv: avg_pool2d gradients with and without padding in the count") {
  TestContext ctx;
  check_gradients(avg_pool({}), {leaf(ctx, {2, 1, 4, 4})});
  for (bool include : {true, false}) {
    const Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = include};
    check_gradients(avg_pool(o), {leaf(ctx, {2, 1, 5, 5})});
  }
  check_gradients(avg_pool({.kernel = {2, 2}, .stride = {1, 1}}), {channels_last_leaf(ctx, 2, 2, 3, 3)});
  check_gradients(avg_pool({.kernel = {3, 2}, .stride = {2, 1}}), {leaf(ctx, {2, 5, 4})});  // unbatched
}

TEST_CASE("autograd conv: avg_pool2d with ceil_mode counts a window cut by the edge as the forward does") {
  TestContext ctx;
  for (bool include : {true, false}) {
    const Pool2dOptions o{.kernel = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = include};
    check_gradients(avg_pool(o), {leaf(ctx, {1, 2, 4, 5})});
    check_gradients(avg_pool({.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = true, .count_include_pad = include}),
                    {leaf(ctx, {1, 1, 6, 6})});
  }
}

TEST_CASE("autograd conv: a CNN block backpropagates through conv, pools and sum") {
  TestContext ctx;
  Tensor x = ctx.randn({2, 1, 6, 6}, DType::f64);
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor h = forge::conv2d(in[0], in[1], in[2], {.padding = {1, 1}});
    h = forge::max_pool2d(h);
    return forge::avg_pool2d(h, {.kernel = {3, 3}});
  };
  check_gradients(fn, {x, leaf(ctx, {2, 1, 3, 3}), leaf(ctx, {2})});
}
