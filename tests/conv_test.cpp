// conv2d against a naive 7-loop reference (f64 accumulation) over random
// stride, padding, dilation and groups, with and without bias, on packed and
// strided inputs, in every float dtype; max_pool2d and avg_pool2d against
// naive window loops that restate libtorch's output-size and divisor rules;
// and every error path (shapes that leave no output, groups that do not
// divide the channels, bad options, dtypes, wrong `out`s).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support.h"

namespace {

using forge::Conv2dOptions;
using forge::DType;
using forge::Pool2dOptions;
using forge::Shape;
using forge::Tensor;
using forge_test::kFloatDTypes;
using forge_test::TestContext;

double tolerance(DType t) {  // relative to the sum of |terms|, as in linalg_test
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 2e-3;
    default:
      return 1.6e-2;
  }
}

struct Expected {
  Shape shape;
  std::vector<double> value, magnitude;
};

void check_close(const Tensor& got, const Expected& e, DType dtype) {
  REQUIRE(got.shape() == e.shape);
  REQUIRE(got.dtype() == dtype);
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == e.value.size());
  const double tol = tolerance(dtype);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double limit = tol * (e.magnitude[i] + std::abs(e.value[i])) + 1e-30;
    // NaN where NaN is due; an exact match covers infinities (a max over a
    // window that lies wholly in the padding is -inf, as in libtorch).
    const bool same = (std::isnan(v[i]) && std::isnan(e.value[i])) || v[i] == e.value[i];
    if (!same && !(std::abs(v[i] - e.value[i]) <= limit)) {
      if (bad++ < 5) FAIL_CHECK("element " << i << ": got " << v[i] << ", expected " << e.value[i] << " +- " << limit);
    }
  }
  CHECK(bad == 0);
}

// x [N, C, H, W] (or [C, H, W]), weight [O, C / groups, kH, kW].
Expected reference_conv(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  const std::vector<double> xv = x.to_vector<double>(), wv = weight.to_vector<double>();
  const std::vector<double> bv = bias.defined() ? bias.to_vector<double>() : std::vector<double>();
  const bool batched = x.dim() == 4;
  const std::int64_t N = batched ? x.shape()[0] : 1, C = x.shape()[x.dim() - 3], H = x.shape()[x.dim() - 2],
                     W = x.shape()[x.dim() - 1];
  const std::int64_t O = weight.shape()[0], Cg = weight.shape()[1], KH = weight.shape()[2], KW = weight.shape()[3];
  const std::int64_t Og = O / o.groups;
  const std::int64_t OH = (H + 2 * o.padding[0] - o.dilation[0] * (KH - 1) - 1) / o.stride[0] + 1;
  const std::int64_t OW = (W + 2 * o.padding[1] - o.dilation[1] * (KW - 1) - 1) / o.stride[1] + 1;
  Expected e;
  if (batched) e.shape.push_back(N);
  e.shape.push_back(O);
  e.shape.push_back(OH);
  e.shape.push_back(OW);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t oc = 0; oc < O; ++oc)
      for (std::int64_t oh = 0; oh < OH; ++oh)
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          double s = bias.defined() ? bv[static_cast<std::size_t>(oc)] : 0.0;
          double mag = std::abs(s);
          const std::int64_t g = oc / Og;
          for (std::int64_t c = 0; c < Cg; ++c)
            for (std::int64_t kh = 0; kh < KH; ++kh)
              for (std::int64_t kw = 0; kw < KW; ++kw) {
                const std::int64_t ih = oh * o.stride[0] - o.padding[0] + kh * o.dilation[0];
                const std::int64_t iw = ow * o.stride[1] - o.padding[1] + kw * o.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const double xval = xv[static_cast<std::size_t>(((n * C + g * Cg + c) * H + ih) * W + iw)];
                const double wval = wv[static_cast<std::size_t>(((oc * Cg + c) * KH + kh) * KW + kw)];
                s += xval * wval;
                mag += std::abs(xval * wval);
              }
          e.value.push_back(s);
          e.magnitude.push_back(mag);
        }
  return e;
}

// libtorch's pooling output size, restated.
std::int64_t pool_out(std::int64_t in, std::int64_t k, std::int64_t pad, std::int64_t stride, std::int64_t dil,
                      bool ceil_mode) {
  const std::int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  std::int64_t out = static_cast<std::int64_t>(std::floor(static_cast<double>(num) / static_cast<double>(stride))) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Expected reference_pool(const Tensor& x, const Pool2dOptions& o, bool is_max) {
  const std::vector<double> xv = x.to_vector<double>();
  const bool batched = x.dim() == 4;
  const std::int64_t N = batched ? x.shape()[0] : 1, C = x.shape()[x.dim() - 3], H = x.shape()[x.dim() - 2],
                     W = x.shape()[x.dim() - 1];
  const std::int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0], sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  const std::int64_t OH = pool_out(H, o.kernel[0], o.padding[0], sh, o.dilation[0], o.ceil_mode);
  const std::int64_t OW = pool_out(W, o.kernel[1], o.padding[1], sw, o.dilation[1], o.ceil_mode);
  Expected e;
  if (batched) e.shape.push_back(N);
  e.shape.push_back(C);
  e.shape.push_back(OH);
  e.shape.push_back(OW);
  for (std::int64_t p = 0; p < N * C; ++p)
    for (std::int64_t oh = 0; oh < OH; ++oh)
      for (std::int64_t ow = 0; ow < OW; ++ow) {
        const double* plane = xv.data() + p * H * W;
        if (is_max) {
          double best = -std::numeric_limits<double>::infinity();
          for (std::int64_t kh = 0; kh < o.kernel[0]; ++kh)
            for (std::int64_t kw = 0; kw < o.kernel[1]; ++kw) {
              const std::int64_t ih = oh * sh - o.padding[0] + kh * o.dilation[0];
              const std::int64_t iw = ow * sw - o.padding[1] + kw * o.dilation[1];
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const double v = plane[ih * W + iw];
              if (std::isnan(v) || std::isnan(best))
                best = std::numeric_limits<double>::quiet_NaN();
              else
                best = std::max(best, v);
            }
          e.value.push_back(best);
          e.magnitude.push_back(0);
        } else {
          // The window clipped to the padded input sets the divisor with
          // count_include_pad; the part inside the input is summed.
          const std::int64_t h0 = oh * sh - o.padding[0], w0 = ow * sw - o.padding[1];
          const std::int64_t h1 = std::min(h0 + o.kernel[0], H + o.padding[0]);
          const std::int64_t w1 = std::min(w0 + o.kernel[1], W + o.padding[1]);
          double s = 0, mag = 0;
          std::int64_t inside = 0;
          for (std::int64_t ih = std::max<std::int64_t>(h0, 0); ih < std::min(h1, H); ++ih)
            for (std::int64_t iw = std::max<std::int64_t>(w0, 0); iw < std::min(w1, W); ++iw) {
              s += plane[ih * W + iw];
              mag += std::abs(plane[ih * W + iw]);
              ++inside;
            }
          const double count =
              o.count_include_pad ? static_cast<double>((h1 - h0) * (w1 - w0)) : static_cast<double>(inside);
          e.value.push_back(inside ? s / count : 0.0);
          e.magnitude.push_back(inside ? mag / count : 0.0);
        }
      }
  return e;
}

// x with a layout chosen by `layout`: 0 packed, 1 spatially transposed, 2 channel-sliced.
Tensor make_image(TestContext& ctx, const Shape& s, DType t, int layout) {
  if (layout == 1) return ctx.randn({s[0], s[1], s[3], s[2]}, t).transpose(2, 3);
  if (layout == 2) return ctx.randn({s[0], s[1] * 2, s[2], s[3]}, t).slice(1, 0, s[1] * 2, 2);
  return ctx.randn(s, t);
}

// An f32 conv2d of an x laid out by `layout` and a weight (stored [O, kH,
// kW, C / groups] and permuted when `permuted`), with and without a bias,
// against the reference.
void check_layer(TestContext& ctx, const Shape& xs, const Shape& ws, const Conv2dOptions& o, int layout,
                 bool permuted) {
  const Tensor x = make_image(ctx, xs, DType::f32, layout);
  const Tensor w = permuted ? ctx.randn({ws[0], ws[2], ws[3], ws[1]}).permute({0, 3, 1, 2}) : ctx.randn(ws);
  const Tensor b = ctx.randn({ws[0]});
  INFO("x " << xs << " layout " << layout << " weight " << ws << (permuted ? " permuted" : "") << " stride "
            << o.stride[0] << " pad " << o.padding[0] << " dilation " << o.dilation[0] << " groups " << o.groups);
  check_close(forge::conv2d(x, w, b, o), reference_conv(x, w, b, o), DType::f32);
  check_close(forge::conv2d(x, w, Tensor(), o), reference_conv(x, w, Tensor(), o), DType::f32);
}

TEST_CASE("conv: conv2d matches a naive 7-loop reference over random stride, padding, dilation and groups", "[conv]") {
  TestContext ctx;
  std::mt19937 gen(1234);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  int ran = 0;
  for (int iter = 0; iter < 120; ++iter) {
    const DType t = kFloatDTypes[iter % 4];
    Conv2dOptions o;
    o.groups = pick(1, 3);
    const std::int64_t n = pick(1, 3), cg = pick(1, 3), og = pick(1, 3), h = pick(1, 9), w = pick(1, 9);
    const std::int64_t kh = pick(1, 3), kw = pick(1, 3);
    o.stride = {pick(1, 3), pick(1, 3)};
    o.padding = {pick(0, 2), pick(0, 2)};
    o.dilation = {pick(1, 2), pick(1, 2)};
    if (h + 2 * o.padding[0] < o.dilation[0] * (kh - 1) + 1 || w + 2 * o.padding[1] < o.dilation[1] * (kw - 1) + 1)
      continue;  // no output: covered by the error tests
    const Tensor x = make_image(ctx, {n, cg * o.groups, h, w}, t, iter % 3);
    const Tensor weight = iter % 5 == 0 ? ctx.randn({og * o.groups, kh, kw, cg}, t).permute({0, 3, 1, 2})
                                        : ctx.randn({og * o.groups, cg, kh, kw}, t);
    const Tensor bias = iter % 2 ? ctx.randn({og * o.groups}, t) : Tensor();
    INFO(forge::dtype_name(t) << " x " << x.shape() << " weight " << weight.shape() << " groups " << o.groups
                              << " stride " << o.stride[0] << "," << o.stride[1] << " pad " << o.padding[0] << ","
                              << o.padding[1] << " dilation " << o.dilation[0] << "," << o.dilation[1] << " bias "
                              << bias.defined());
    check_close(forge::conv2d(x, weight, bias, o), reference_conv(x, weight, bias, o), t);
    ++ran;
  }
  CHECK(ran > 60);
}

TEST_CASE("conv: the f32 forward's item cuts, weight packing and column reads agree with the reference", "[conv]") {
  // conv_packed.cpp cuts work by images, by chunks of positions (a batch
  // too small to share out), and by blocks of output channels (a batch of
  // one on a small image, its weights then packed as it goes); it reads
  // columns as shifted rows (stride 1), even lanes (stride 2) or lane by
  // lane (other strides, dilated or strided x), across several B blocks
  // (wide images) and ragged last panels. The 3x3 stride-1 layers here have
  // fewer than 16 channels one way, or groups, so that Winograd (the next
  // test) leaves them to this path.
  struct Case {
    Shape x, w;
    std::int64_t stride, pad, dilation, groups;
    int layout;
  };
  const Case cases[] = {
      {{1, 12, 7, 7}, {70, 12, 3, 3}, 1, 1, 1, 1, 0},    // by channel blocks, weights packed as it goes
      {{1, 12, 9, 11}, {72, 6, 3, 3}, 1, 1, 1, 2, 0},    // the same with groups
      {{1, 8, 40, 40}, {16, 8, 3, 3}, 1, 1, 1, 1, 0},    // chunks of positions
      {{2, 8, 56, 56}, {16, 8, 3, 3}, 1, 1, 1, 1, 0},    // chunks of 816 (2 B blocks) and 688 (one of 720)
      {{2, 60, 10, 10}, {12, 60, 3, 3}, 1, 1, 1, 1, 0},  // K = 540: k blocks of 272 and 268 cut a 3-row group
      {{4, 15, 10, 10}, {64, 15, 3, 3}, 1, 1, 1, 1, 0},  // 8 threads: prepacked, 2 channel blocks, a 4-column last
                                                         // panel
      {{2, 3, 8, 20}, {4, 3, 1, 9}, 1, 4, 1, 1, 0},      // a 9-wide kernel: masks worked out per row
      {{8, 3, 40, 40}, {10, 3, 3, 3}, 1, 1, 1, 1, 0},    // whole images wider than one B block
      {{5, 4, 23, 37}, {9, 4, 3, 3}, 2, 1, 1, 1, 0},     // stride 2 (even lanes)
      {{5, 4, 23, 37}, {9, 4, 3, 3}, 2, 1, 1, 1, 1},     // stride 2 of a transposed x (lane by lane)
      {{3, 4, 29, 31}, {6, 4, 3, 3}, 3, 2, 1, 1, 0},     // stride 3
      {{3, 4, 29, 31}, {6, 4, 3, 3}, 1, 2, 2, 1, 2},     // dilation 2, channels strided
      {{4, 6, 5, 4}, {8, 6, 2, 2}, 1, 1, 1, 1, 0},       // out_w 5: pieces cut at every row
      {{2, 6, 13, 13}, {5, 6, 1, 1}, 1, 0, 1, 1, 0},     // pointwise
      {{2, 6, 13, 13}, {5, 6, 1, 1}, 1, 0, 1, 1, 1},     // pointwise of a transposed x
      {{1, 3, 6, 2}, {4, 3, 3, 1}, 1, 0, 1, 1, 0},       // out_w 2: the tiled path
      {{1, 30, 9, 9}, {260, 15, 3, 3}, 1, 1, 1, 2, 0},   // channel blocks with a ragged last panel of rows
  };
  // 8 threads make more items than images: channel blocks beside
  // prepacked weights, and the narrow last panel against them.
  for (const int threads : {1, 2, 8}) {
    TestContext ctx(forge_test::context_options(threads));
    for (const Case& c : cases) {
      INFO(threads << " threads");
      check_layer(ctx, c.x, c.w,
                  {.stride = {c.stride, c.stride},
                   .padding = {c.pad, c.pad},
                   .dilation = {c.dilation, c.dilation},
                   .groups = c.groups},
                  c.layout, false);
    }
  }
}

TEST_CASE("conv: 3x3 stride-1 layers through Winograd F(2x2, 3x3) agree with the reference", "[conv]") {
  // conv_winograd.cpp takes 3x3 windows at stride 1 with 16 or more
  // channels each way: ragged last tiles (odd outputs), padding 0 to 2,
  // tile rows longer than one 16-lane piece, chunks that cross rows,
  // images and panels, more than 512 input channels (two k blocks), a
  // single chunk cut by output channels, channel-sliced x, and permuted
  // weights. Transposed x, groups and stride 2 keep the im2col path.
  struct Case {
    Shape x, w;
    std::int64_t pad, groups, stride;
    int layout;
    bool permuted;
  };
  const Case cases[] = {
      {{2, 16, 8, 8}, {16, 16, 3, 3}, 1, 1, 1, 0, false},
      {{3, 17, 9, 7}, {19, 17, 3, 3}, 1, 1, 1, 0, false},    // odd outputs: the last tiles ragged
      {{2, 16, 11, 13}, {24, 16, 3, 3}, 0, 1, 1, 0, true},   // unpadded, 9 x 11
      {{2, 20, 6, 5}, {16, 20, 3, 3}, 2, 1, 1, 2, false},    // padding 2 (an input gradient's), channel-sliced
      {{1, 24, 5, 40}, {32, 24, 3, 3}, 1, 1, 1, 0, false},   // 20 tiles a row: two pieces
      {{4, 16, 30, 30}, {40, 16, 3, 3}, 1, 1, 1, 0, false},  // 900 tiles: several chunks
      {{1, 520, 6, 6}, {20, 520, 3, 3}, 1, 1, 1, 0, false},  // two k blocks
      {{1, 16, 8, 8}, {200, 16, 3, 3}, 1, 1, 1, 2, true},    // one chunk, blocks of output channels
      {{1, 32, 8, 8}, {256, 32, 3, 3}, 1, 1, 1, 0, false},   // the same, enough work to run them in parallel
      {{2, 16, 9, 9}, {16, 16, 3, 3}, 1, 1, 1, 1, false},    // transposed x: im2col
      {{2, 32, 9, 9}, {32, 16, 3, 3}, 1, 2, 1, 0, false},    // groups: im2col
      {{2, 16, 9, 9}, {16, 16, 3, 3}, 1, 1, 2, 0, false},    // stride 2: im2col
  };
  for (const int threads : {1, 2, 8}) {
    TestContext ctx(forge_test::context_options(threads));
    for (const Case& c : cases) {
      INFO(threads << " threads");
      check_layer(ctx, c.x, c.w, {.stride = {c.stride, c.stride}, .padding = {c.pad, c.pad}, .groups = c.groups},
                  c.layout, c.permuted);
    }
  }
}

TEST_CASE("conv: pointwise, unbatched, zero-size and large (tiled, threaded) convolutions", "[conv]") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    Conv2dOptions o;
    {  // 1x1 stride 1 unpadded: columns read straight from x
      const Tensor x = ctx.randn({2, 6, 5, 7}, t), w = ctx.randn({4, 6, 1, 1}, t), b = ctx.randn({4}, t);
      check_close(forge::conv2d(x, w, b, o), reference_conv(x, w, b, o), t);
      Conv2dOptions g2;
      g2.groups = 2;
      const Tensor wg = ctx.randn({4, 3, 1, 1}, t);
      check_close(forge::conv2d(x, wg, b, g2), reference_conv(x, wg, b, g2), t);
    }
    {  // unbatched [C, H, W]
      const Tensor x = ctx.randn({3, 6, 6}, t), w = ctx.randn({2, 3, 3, 3}, t);
      check_close(forge::conv2d(x, w, Tensor(), o), reference_conv(x, w, Tensor(), o), t);
    }
    {  // zero-size batch and zero channels
      const Tensor x = ctx.randn({0, 3, 5, 5}, t), w = ctx.randn({2, 3, 3, 3}, t);
      CHECK(forge::conv2d(x, w).shape() == Shape{0, 2, 3, 3});
      const Tensor x0 = ctx.randn({1, 0, 5, 5}, t), w0 = ctx.randn({2, 0, 3, 3}, t), b0 = ctx.randn({2}, t);
      check_close(forge::conv2d(x0, w0, b0), reference_conv(x0, w0, b0, o), t);
      // Outputs 4 and more wide, with and without bias, 3x3 and pointwise: zeros, or the bias.
      const Tensor x1 = ctx.randn({2, 0, 6, 7}, t), w3 = ctx.randn({3, 0, 3, 3}, t), w1 = ctx.randn({3, 0, 1, 1}, t);
      const Tensor b1 = ctx.randn({3}, t);
      for (const Tensor& wz : {w3, w1}) {
        check_close(forge::conv2d(x1, wz), reference_conv(x1, wz, Tensor(), o), t);
        check_close(forge::conv2d(x1, wz, b1), reference_conv(x1, wz, b1, o), t);
      }
    }
    {  // many tiles and items: the threaded path
      Conv2dOptions p;
      p.padding = {1, 1};
      const Tensor x = ctx.randn({4, 16, 30, 30}, t), w = ctx.randn({8, 16, 3, 3}, t), b = ctx.randn({8}, t);
      check_close(forge::conv2d(x, w, b, p), reference_conv(x, w, b, p), t);
      const Tensor x1 = ctx.randn({1, 40, 50, 50}, t), w1 = ctx.randn({24, 40, 3, 3}, t);
      check_close(forge::conv2d(x1, w1, Tensor(), p), reference_conv(x1, w1, Tensor(), p), t);
    }
  }
}

TEST_CASE("conv: conv2d_into writes packed and strided outs", "[conv]") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    Conv2dOptions o;
    o.padding = {1, 0};
    o.stride = {2, 1};
    const Tensor x = ctx.randn({2, 4, 7, 6}, t), w = ctx.randn({6, 2, 3, 2}, t), b = ctx.randn({6}, t);
    o.groups = 2;
    const Expected e = reference_conv(x, w, b, o);
    Tensor packed = ctx.empty(e.shape, t);
    CHECK(&forge::conv2d_into(packed, x, w, b, o) == &packed);
    check_close(packed, e, t);
    Tensor transposed = ctx.empty({e.shape[0], e.shape[1], e.shape[3], e.shape[2]}, t).transpose(2, 3);
    const std::uint32_t v0 = transposed.version();
    forge::conv2d_into(transposed, x, w, b, o);
    CHECK(transposed.version() != v0);
    check_close(transposed, e, t);
    Tensor sliced = ctx.empty({e.shape[0], e.shape[1] * 2, e.shape[2], e.shape[3]}, t).slice(1, 1, e.shape[1] * 2, 2);
    forge::conv2d_into(sliced, x, w, b, o);
    check_close(sliced, e, t);
  }
}

TEST_CASE("conv: max_pool2d and avg_pool2d match naive windows over random options", "[conv]") {
  TestContext ctx;
  std::mt19937 gen(99);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  int ran = 0;
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kFloatDTypes[iter % 4];
    const bool is_max = iter % 2 == 0;
    Pool2dOptions o;
    o.kernel = {pick(1, 4), pick(1, 4)};
    o.stride = {pick(0, 3), pick(0, 3)};
    o.padding = {pick(0, static_cast<int>(o.kernel[0] / 2)), pick(0, static_cast<int>(o.kernel[1] / 2))};
    if (is_max) o.dilation = {pick(1, 2), pick(1, 2)};
    o.ceil_mode = pick(0, 1) == 1;
    o.count_include_pad = pick(0, 1) == 1;
    const Shape s{pick(1, 2), pick(1, 3), pick(1, 10), pick(1, 10)};
    const std::int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0], sw = o.stride[1] ? o.stride[1] : o.kernel[1];
    if (pool_out(s[2], o.kernel[0], o.padding[0], sh, o.dilation[0], o.ceil_mode) < 1 ||
        pool_out(s[3], o.kernel[1], o.padding[1], sw, o.dilation[1], o.ceil_mode) < 1)
      continue;
    const Tensor x = make_image(ctx, s, t, iter % 3);
    INFO(forge::dtype_name(t) << (is_max ? " max" : " avg") << " x " << x.shape() << " kernel " << o.kernel[0] << ","
                              << o.kernel[1] << " stride " << o.stride[0] << "," << o.stride[1] << " pad "
                              << o.padding[0] << "," << o.padding[1] << " dilation " << o.dilation[0] << ","
                              << o.dilation[1] << " ceil " << o.ceil_mode << " include_pad " << o.count_include_pad);
    const Expected e = reference_pool(x, o, is_max);
    check_close(is_max ? forge::max_pool2d(x, o) : forge::avg_pool2d(x, o), e, t);
    Tensor out = ctx.empty({e.shape[0], e.shape[1], e.shape[3], e.shape[2]}, t).transpose(2, 3);
    if (is_max)
      forge::max_pool2d_into(out, x, o);
    else
      forge::avg_pool2d_into(out, x, o);
    check_close(out, e, t);
    ++ran;
  }
  CHECK(ran > 80);
}

TEST_CASE("conv: pools follow libtorch's ceil_mode sizes, propagate NaN, and run unbatched and in parallel", "[conv]") {
  TestContext ctx;
  Pool2dOptions o;
  o.ceil_mode = true;
  // 5 wide, kernel 2, stride 2: a third, partial window with ceil_mode.
  CHECK(forge::max_pool2d(ctx.randn({1, 1, 5, 5}), o).shape() == Shape{1, 1, 3, 3});
  o.ceil_mode = false;
  CHECK(forge::max_pool2d(ctx.randn({1, 1, 5, 5}), o).shape() == Shape{1, 1, 2, 2});
  const Tensor x = ctx.from_vector<float>({1, std::numeric_limits<float>::quiet_NaN(), 3, 4}, {1, 1, 2, 2});
  CHECK(std::isnan(forge::max_pool2d(x, o).item<float>()));
  const Tensor u = ctx.randn({3, 8, 8});
  check_close(forge::avg_pool2d(u, o), reference_pool(u, o, false), DType::f32);
  Pool2dOptions big;
  big.kernel = {3, 3};
  big.stride = {2, 2};
  big.padding = {1, 1};
  const Tensor l = ctx.randn({4, 32, 40, 40});
  check_close(forge::max_pool2d(l, big), reference_pool(l, big, true), DType::f32);
  check_close(forge::avg_pool2d(l, big), reference_pool(l, big, false), DType::f32);
}

TEST_CASE("conv: bad shapes, options and dtypes are errors naming the op", "[conv]") {
  TestContext ctx;
  const Tensor x = ctx.randn({1, 4, 5, 5}), w = ctx.randn({2, 4, 3, 3});
  Conv2dOptions o;
  FORGE_REQUIRE_ERROR(shape, "conv2d", (void)forge::conv2d(x, ctx.randn({2, 4, 7, 3})));  // kernel > input
  o.padding = {1, 1};
  (void)forge::conv2d(x, ctx.randn({2, 4, 7, 3}), Tensor(), o);  // fits once padded
  o.dilation = {2, 2};
  FORGE_REQUIRE_ERROR(shape, "conv2d", (void)forge::conv2d(x, ctx.randn({2, 4, 7, 3}), Tensor(), o));
  Conv2dOptions g3;
  g3.groups = 3;
  FORGE_REQUIRE_ERROR(shape, "conv2d", (void)forge::conv2d(x, ctx.randn({3, 1, 3, 3}), Tensor(), g3));
  Conv2dOptions g2;
  g2.groups = 2;
  FORGE_REQUIRE_ERROR(shape, "conv2d", (void)forge::conv2d(x, ctx.randn({3, 2, 3, 3}), Tensor(), g2));
  FORGE_REQUIRE_ERROR(shape, "conv2d", (void)forge::conv2d(x, ctx.randn({2, 3, 3, 3})));
  FORGE_REQUIRE_ERROR(shape, "conv2d", (void)forge::conv2d(x, w, ctx.randn({3})));
  FORGE_REQUIRE_ERROR(shape, "conv2d", (void)forge::conv2d(ctx.randn({4, 5}), w));
  FORGE_REQUIRE_ERROR(shape, "conv2d", (void)forge::conv2d(x, ctx.randn({2, 4, 3})));
  Conv2dOptions bad;
  bad.stride = {0, 1};
  FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(x, w, Tensor(), bad));
  bad = {};
  bad.padding = {-1, 0};
  FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(x, w, Tensor(), bad));
  bad = {};
  bad.groups = 0;
  FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(x, w, Tensor(), bad));
  FORGE_REQUIRE_ERROR(dtype, "conv2d", (void)forge::conv2d(ctx.zeros({1, 4, 5, 5}, DType::i32), w));
  FORGE_REQUIRE_ERROR(dtype, "conv2d", (void)forge::conv2d(x, ctx.randn({2, 4, 3, 3}, DType::f64)));
  FORGE_REQUIRE_ERROR(dtype, "conv2d", (void)forge::conv2d(x, w, ctx.randn({2}, DType::f16)));
  FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(Tensor(), w));

  Pool2dOptions p;
  p.kernel = {2, 2};
  p.padding = {2, 0};
  FORGE_REQUIRE_ERROR(invalid_argument, "max_pool2d", (void)forge::max_pool2d(x, p));
  p = {};
  p.kernel = {0, 2};
  FORGE_REQUIRE_ERROR(invalid_argument, "avg_pool2d", (void)forge::avg_pool2d(x, p));
  p = {};
  p.kernel = {3, 3};
  FORGE_REQUIRE_ERROR(shape, "max_pool2d", (void)forge::max_pool2d(ctx.randn({1, 1, 2, 5}), p));
  p = {};
  p.dilation = {2, 1};
  FORGE_REQUIRE_ERROR(invalid_argument, "avg_pool2d", (void)forge::avg_pool2d(x, p));
  p = {};
  p.stride = {-1, 1};
  FORGE_REQUIRE_ERROR(invalid_argument, "max_pool2d", (void)forge::max_pool2d(x, p));
  FORGE_REQUIRE_ERROR(dtype, "max_pool2d", (void)forge::max_pool2d(ctx.zeros({1, 1, 4, 4}, DType::u8)));
  FORGE_REQUIRE_ERROR(shape, "avg_pool2d", (void)forge::avg_pool2d(ctx.randn({4, 4})));
}

// Note [window arithmetic] in ops/conv.cpp: options whose sizes overflow int64
// used to wrap into nonsense shapes (dilation INT64_MAX gave [1, 1, 7, 3]).
TEST_CASE("conv: window options whose sizes overflow int64 are refused, naming the op and the values", "[conv]") {
  TestContext ctx;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t k62 = std::int64_t{1} << 62;
  const Tensor x = ctx.ones({1, 1, 5, 5}), w = ctx.ones({1, 1, 3, 3});
  Tensor out = ctx.empty({1, 1, 3, 3});
  const std::string repro =
      FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(x, w, Tensor(), {.dilation = {kMax, 1}}));
  CHECK(repro.find("9223372036854775807") != std::string::npos);
  CHECK(repro.find("overflows int64") != std::string::npos);
  const std::string pool_repro =
      FORGE_REQUIRE_ERROR(invalid_argument, "max_pool2d", (void)forge::max_pool2d(x, {.dilation = {kMax, 1}}));
  CHECK(pool_repro.find("9223372036854775807") != std::string::npos);

  // Each option, on each axis, at the top of the range (where any sum with the
  // input size wraps) and at the bottom (refused as not positive, or as
  // negative padding).
  for (const std::int64_t v : {kMax, kMax - 1, kMin, kMin + 1}) {
    for (int axis = 0; axis < 2; ++axis) {
      CAPTURE(v, axis);
      Conv2dOptions stride, padding, dilation;
      stride.stride[axis] = v;
      padding.padding[axis] = v;
      dilation.dilation[axis] = v;
      for (const Conv2dOptions& o : {stride, padding, dilation}) {
        FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(x, w, Tensor(), o));
        FORGE_REQUIRE_ERROR(invalid_argument, "conv2d_into", forge::conv2d_into(out, x, w, Tensor(), o));
      }
      Pool2dOptions kernel, pstride, ppad, pdil;
      kernel.kernel[axis] = v;
      pstride.stride[axis] = v;
      ppad.kernel = {5, 5};
      ppad.padding[axis] = v;  // also more than half the kernel
      pdil.dilation[axis] = v;
      for (const Pool2dOptions& o : {kernel, pstride, ppad, pdil}) {
        for (const bool ceil : {false, true}) {
          Pool2dOptions c = o;
          c.ceil_mode = ceil;
          FORGE_REQUIRE_ERROR(invalid_argument, "max_pool2d", (void)forge::max_pool2d(x, c));
          FORGE_REQUIRE_ERROR(invalid_argument, "max_pool2d_into", forge::max_pool2d_into(out, x, c));
          if (o.dilation[axis] != 1) continue;  // avg_pool2d refuses any dilation
          FORGE_REQUIRE_ERROR(invalid_argument, "avg_pool2d", (void)forge::avg_pool2d(x, c));
          FORGE_REQUIRE_ERROR(invalid_argument, "avg_pool2d_into", forge::avg_pool2d_into(out, x, c));
        }
      }
    }
    // groups * (weight's C / groups) wraps: weight [0, 2, 3, 3] with 2^63 - 1 groups.
    if (v > 0)
      FORGE_REQUIRE_ERROR(shape, "conv2d",
                          (void)forge::conv2d(ctx.ones({1, 0, 5, 5}), ctx.ones({0, 2, 3, 3}), Tensor(), {.groups = v}));
    else
      FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(x, w, Tensor(), {.groups = v}));
  }
  // 2^62: padding doubled, or a dilation or pool kernel times the taps, reaches 2^63.
  FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(x, w, Tensor(), {.padding = {0, k62}}));
  FORGE_REQUIRE_ERROR(invalid_argument, "conv2d", (void)forge::conv2d(x, w, Tensor(), {.dilation = {k62, 1}}));
  FORGE_REQUIRE_ERROR(invalid_argument, "max_pool2d", (void)forge::max_pool2d(x, {.kernel = {k62, 2}}));
  FORGE_REQUIRE_ERROR(invalid_argument, "avg_pool2d", (void)forge::avg_pool2d(x, {.kernel = {2, k62}}));
  FORGE_REQUIRE_ERROR(invalid_argument, "max_pool2d", (void)forge::max_pool2d(x, {.dilation = {1, k62}}));
  // A pool kernel of 2^32 x 2^32 taps: the avg_pool2d divisor would overflow.
  const Pool2dOptions area{.kernel = {std::int64_t{1} << 32, std::int64_t{1} << 32},
                           .padding = {std::int64_t{1} << 31, std::int64_t{1} << 31}};
  FORGE_REQUIRE_ERROR(invalid_argument, "avg_pool2d", (void)forge::avg_pool2d(x, area));
  FORGE_REQUIRE_ERROR(invalid_argument, "max_pool2d", (void)forge::max_pool2d(x, area));
}

TEST_CASE("conv: huge strides, paddings and pool windows that fit in int64 compute the right values", "[conv]") {
  TestContext ctx;
  constexpr std::int64_t k61 = std::int64_t{1} << 61, k60 = std::int64_t{1} << 60;
  Tensor x = ctx.from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  x.requires_grad_();
  const Tensor w = ctx.ones({1, 1, 2, 2}, DType::f64);
  // One window, at the top left: 1 + 2 + 5 + 6.
  Tensor y = forge::conv2d(x, w, Tensor(), {.stride = {k61, k61}});
  REQUIRE(y.shape() == Shape{1, 1, 1, 1});
  CHECK(y.item<double>() == 14);
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  // Padding 2^60 with stride 2^61: two windows per axis, both wholly in the padding.
  const Tensor far = forge::conv2d(x, w, Tensor(), {.stride = {k61, k61}, .padding = {k60, k60}});
  CHECK(far.shape() == Shape{1, 1, 2, 2});
  CHECK(far.to_vector<double>() == std::vector<double>(4, 0.0));
  // A dilation of 2^61 on a one-tap axis reads nothing past the input.
  const Tensor tall = forge::conv2d(x, ctx.ones({1, 1, 1, 2}, DType::f64), Tensor(), {.dilation = {k61, 1}});
  CHECK(tall.to_vector<double>() == std::vector<double>{3, 5, 7, 11, 13, 15, 19, 21, 23, 27, 29, 31});
  // A 2^31 x 2^31 pool window with half of it padding: one output whose
  // avg_pool2d divisor counts 2^62 taps, or the 16 real ones without padding.
  const std::int64_t k31 = std::int64_t{1} << 31;
  Pool2dOptions big{.kernel = {k31, k31}, .padding = {k31 / 2, k31 / 2}};
  x.zero_grad();
  Tensor avg = forge::avg_pool2d(x, big);
  REQUIRE(avg.shape() == Shape{1, 1, 1, 1});
  CHECK(avg.item<double>() == std::ldexp(136.0, -62));
  avg.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>(16, std::ldexp(1.0, -62)));
  big.count_include_pad = false;
  CHECK(forge::avg_pool2d(x, big).item<double>() == 136.0 / 16);
  CHECK(forge::max_pool2d(x, big).item<double>() == 16);
  // ceil_mode with a stride of 2^61: the second window would start in the padding.
  CHECK(forge::max_pool2d(x, {.kernel = {2, 2}, .stride = {k61, k61}, .ceil_mode = true}).shape() == Shape{1, 1, 1, 1});
}

TEST_CASE("conv: _into refuses a wrong out (shape, dtype, context, expanded, overlapping)", "[conv]") {
  TestContext ctx, other;
  const Tensor x = ctx.randn({1, 2, 4, 4}), w = ctx.randn({2, 2, 3, 3});
  Tensor wrong_shape = ctx.empty({1, 2, 3, 3});
  FORGE_REQUIRE_ERROR(shape, "conv2d_into", forge::conv2d_into(wrong_shape, x, w));
  Tensor wrong_dtype = ctx.empty({1, 2, 2, 2}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "conv2d_into", forge::conv2d_into(wrong_dtype, x, w));
  Tensor foreign = other.empty({1, 2, 2, 2});
  FORGE_REQUIRE_ERROR(device, "conv2d_into", forge::conv2d_into(foreign, x, w));
  Tensor expanded = ctx.empty({1, 2, 1, 2}).expand({1, 2, 2, 2});
  FORGE_REQUIRE_ERROR(invalid_argument, "conv2d_into", forge::conv2d_into(expanded, x, w));
  Tensor inside = x.slice(2, 0, 2).slice(3, 0, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "conv2d_into", forge::conv2d_into(inside, x, w));
  Tensor pool_out = ctx.empty({1, 2, 2, 2});
  forge::max_pool2d_into(pool_out, x);
  Tensor pool_bad = ctx.empty({1, 2, 2, 2}, DType::f16);
  FORGE_REQUIRE_ERROR(dtype, "max_pool2d_into", forge::max_pool2d_into(pool_bad, x));
  Tensor pool_shape = ctx.empty({1, 2, 2, 3});
  FORGE_REQUIRE_ERROR(shape, "avg_pool2d_into", forge::avg_pool2d_into(pool_shape, x));
  Tensor pool_overlap = x.slice(2, 0, 2).slice(3, 0, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "avg_pool2d_into", forge::avg_pool2d_into(pool_overlap, x));
}

}  // namespace
