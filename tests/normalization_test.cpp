// softmax, log_softmax, layer_norm and rms_norm against naive double
// references written here, over every dim, every float dtype, packed and
// strided inputs and outputs, rows long enough for the parallel path, the
// special values (-inf masks, NaN, huge logits) and every error path.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "support.h"

namespace {

using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge_test::kFloatDTypes;
using forge_test::TestContext;

std::vector<double> randoms(std::mt19937_64& rng, std::int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

double tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 3e-6;
    case DType::f16:
      return 2e-3;
    default:
      return 1.6e-2;
  }
}

// Softmax along `dim` of row-major values of `shape`, in double.
std::vector<double> reference_softmax(const std::vector<double>& xs, const Shape& shape, int dim, bool log) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (int d = dim + 1; d < shape.rank(); ++d) inner *= shape[d];
  const std::int64_t n = shape.rank() == 0 ? 1 : shape[dim];
  std::vector<double> out(xs.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t k) { return static_cast<std::size_t>((o * n + k) * inner + i); };
      double m = -INFINITY, s = 0;
      for (std::int64_t k = 0; k < n; ++k) m = std::max(m, xs[at(k)]);
      for (std::int64_t k = 0; k < n; ++k) s += std::exp(xs[at(k)] - m);
      for (std::int64_t k = 0; k < n; ++k) out[at(k)] = log ? xs[at(k)] - m - std::log(s) : std::exp(xs[at(k)] - m) / s;
    }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol, double floor = 1.0) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i])   ? std::isnan(got[i])
                    : std::isinf(want[i]) ? got[i] == want[i]
                                          : std::abs(got[i] - want[i]) <= tol * std::max(floor, std::abs(want[i]));
    if (!ok && bad++ < 3) FAIL_CHECK("at " << i << ": got " << got[i] << ", want " << want[i]);
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("normalization: softmax and log_softmax match a double reference over every dim, dtype and layout",
          "[normalization]") {
  TestContext ctx;
  std::mt19937_64 rng(99);
  const Shape shapes[] = {{7}, {3, 5}, {2, 3, 4}, {4, 1, 6}, {0, 3}, {3, 0}, {}, {2, 70, 300}, {600, 130}};
  for (const Shape& shape : shapes) {
    for (DType t : kFloatDTypes) {
      for (bool transposed : {false, true}) {
        if (transposed && shape.rank() < 2) continue;
        Shape base = shape;
        if (transposed) std::swap(base[0], base[base.rank() - 1]);
        Tensor x = ctx.from_vector(randoms(rng, base.numel(), -6, 6), base).to(t);
        if (transposed) x = x.transpose(0, shape.rank() - 1);
        const std::vector<double> xs = x.to_vector<double>();
        for (int dim = 0; dim < std::max(1, shape.rank()); ++dim) {
          for (bool log : {false, true}) {
            INFO(forge::dtype_name(t) << " " << shape << (transposed ? " transposed" : "") << " dim " << dim
                                      << (log ? " log_softmax" : " softmax"));
            const Tensor y = log ? forge::log_softmax(x, dim - shape.rank() * (dim % 2)) : x.softmax(dim);
            REQUIRE(y.dtype() == t);
            REQUIRE(y.shape() == shape);
            // Compare against the reference of the rounded input, with a tolerance of
            // the output dtype (an f16 log_softmax of magnitude ~10 carries its ulp).
            check_close(y.to_vector<double>(), reference_softmax(xs, shape, dim, log), tolerance(t) * (log ? 4 : 1),
                        log ? 1.0 : 1e-3);
          }
        }
      }
    }
  }
}

TEST_CASE("normalization: softmax keeps -inf masks at exactly 0, NaN rows NaN, and huge logits finite",
          "[normalization]") {
  TestContext ctx;
  const double inf = INFINITY, nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : kFloatDTypes) {
    const Tensor x = ctx.from_vector<double>({1, -inf, 2, -inf, 0, 0, nan, 1, 3e4, 3e4 - 1, -3e4, 0}, {3, 4}).to(t);
    const auto y = forge::softmax(x, 1).to_vector<double>();
    CHECK(y[1] == 0);
    CHECK(y[3] == 0);
    CHECK(y[0] == Approx(1 / (1 + std::exp(1.0))).epsilon(tolerance(t) * 4));
    CHECK(std::isnan(y[4]));
    CHECK(std::isnan(y[7]));
    if (t != DType::f16 && t != DType::bf16) {  // 3e4 - 1 is not distinct from 3e4 in the 16-bit formats
      CHECK(y[8] == Approx(1 / (1 + std::exp(-1.0))).epsilon(1e-5));
      CHECK(y[10] == 0);
    }
    const auto ly = forge::log_softmax(x, 1).to_vector<double>();
    CHECK(ly[1] == -inf);
    CHECK(std::isnan(ly[5]));
  }
}

TEST_CASE("normalization: f32 softmax over long rows sums to one with the vectorized exp", "[normalization]") {
  TestContext ctx;
  std::mt19937_64 rng(5);
  const Tensor x = ctx.from_vector(randoms(rng, 64 * 4099, -30, 30), {64, 4099}).to(DType::f32);
  const auto y = forge::softmax(x, -1).to_vector<double>();
  const auto want = reference_softmax(x.to_vector<double>(), x.shape(), 1, false);
  for (std::int64_t r = 0; r < 64; ++r) {
    double s = 0;
    for (std::int64_t k = 0; k < 4099; ++k) s += y[static_cast<std::size_t>(r * 4099 + k)];
    CHECK(std::abs(s - 1) < 1e-5);
  }
  check_close(y, want, 1e-5, 1e-30);  // relative, even for tiny probabilities
}

namespace {

// layer_norm (or rms_norm) of row-major values over rows of n, in double.
std::vector<double> reference_norm(const std::vector<double>& xs, std::int64_t n, const std::vector<double>* w,
                                   const std::vector<double>* b, double eps, bool rms) {
  std::vector<double> out(xs.size());
  for (std::size_t r = 0; n > 0 && r < xs.size() / static_cast<std::size_t>(n); ++r) {
    const double* x = xs.data() + r * static_cast<std::size_t>(n);
    double mean = 0, var = 0;
    if (!rms) {
      for (std::int64_t i = 0; i < n; ++i) mean += x[i];
      mean /= static_cast<double>(n);
    }
    for (std::int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1 / std::sqrt(var + eps);
    for (std::int64_t i = 0; i < n; ++i) {
      double y = (x[i] - mean) * rstd;
      if (w) y *= (*w)[static_cast<std::size_t>(i)];
      if (b) y += (*b)[static_cast<std::size_t>(i)];
      out[r * static_cast<std::size_t>(n) + static_cast<std::size_t>(i)] = y;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("normalization: layer_norm and rms_norm match a double reference, with and without weight and bias",
          "[normalization]") {
  TestContext ctx;
  std::mt19937_64 rng(11);
  struct Case {
    Shape shape;
    Shape normalized;
  };
  const Case cases[] = {{{4, 6}, {6}}, {{2, 3, 5}, {3, 5}}, {{7}, {7}},         {{0, 4}, {4}},
                        {{3, 1}, {1}}, {{300, 257}, {257}}, {{2, 5000}, {5000}}};
  for (const Case& c : cases) {
    for (DType t : kFloatDTypes) {
      for (bool transposed : {false, true}) {
        if (transposed && c.shape.rank() < 2) continue;
        Shape base = c.shape;
        if (transposed) std::swap(base[0], base[base.rank() - 1]);
        // An offset mean, so that a one-pass variance would lose digits.
        Tensor x = ctx.from_vector(randoms(rng, base.numel(), 90, 110), base).to(t);
        if (transposed) x = x.transpose(0, c.shape.rank() - 1);
        const std::int64_t n = c.normalized.numel();
        const Tensor w = ctx.from_vector(randoms(rng, n, 0.5, 2), c.normalized).to(t);
        const Tensor b = ctx.from_vector(randoms(rng, n, -1, 1), c.normalized).to(t);
        const auto xs = x.to_vector<double>(), ws = w.to_vector<double>(), bs = b.to_vector<double>();
        INFO(forge::dtype_name(t) << " " << c.shape << " over " << c.normalized << (transposed ? " transposed" : ""));
        const double tol = tolerance(t) * (t == DType::f32 ? 30 : 4);  // the input's rounding, amplified by 1/std
        check_close(forge::layer_norm(x, c.normalized, w, b).to_vector<double>(),
                    reference_norm(xs, n, &ws, &bs, 1e-5, false), tol);
        check_close(forge::layer_norm(x, c.normalized).to_vector<double>(),
                    reference_norm(xs, n, nullptr, nullptr, 1e-5, false), tol);
        check_close(forge::layer_norm(x, c.normalized, w, Tensor(), 1e-3).to_vector<double>(),
                    reference_norm(xs, n, &ws, nullptr, 1e-3, false), tol);
        check_close(forge::layer_norm(x, c.normalized, Tensor(), b).to_vector<double>(),
                    reference_norm(xs, n, nullptr, &bs, 1e-5, false), tol);
        const double eps = t == DType::f64   ? 2.220446049250313e-16
                           : t == DType::f32 ? 1.1920928955078125e-07
                           : t == DType::f16 ? 0.0009765625
                                             : 0.0078125;
        check_close(forge::rms_norm(x, c.normalized, w).to_vector<double>(),
                    reference_norm(xs, n, &ws, nullptr, eps, true), tolerance(t) * 2);
        check_close(forge::rms_norm(x, c.normalized, Tensor(), 0.5).to_vector<double>(),
                    reference_norm(xs, n, nullptr, nullptr, 0.5, true), tolerance(t) * 2);
      }
    }
  }
}

namespace {

// reference_norm in long double, whose range holds the squares of f64 values
// up to 1e300 (x87's 15-bit exponent).
std::vector<double> wide_reference_norm(const std::vector<double>& xs, std::int64_t n, const std::vector<double>& w,
                                        const std::vector<double>& b, double eps, bool rms) {
  std::vector<double> out(xs.size());
  for (std::size_t r = 0; r < xs.size() / static_cast<std::size_t>(n); ++r) {
    const double* x = xs.data() + r * static_cast<std::size_t>(n);
    long double mean = 0, var = 0;
    if (!rms) {
      for (std::int64_t i = 0; i < n; ++i) mean += x[i];
      mean /= static_cast<long double>(n);
    }
    for (std::int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    const long double rstd = 1 / std::sqrt(var / static_cast<long double>(n) + eps);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      out[r * static_cast<std::size_t>(n) + k] = static_cast<double>((x[i] - mean) * rstd * w[k] + (rms ? 0 : b[k]));
    }
  }
  return out;
}

// rows x n values of magnitude in [lo, hi] and random signs; row 0 stays
// ordinary (in [-2, 2]) so that huge rows sit next to a fast one.
std::vector<double> huge_rows(std::mt19937_64& rng, std::int64_t rows, std::int64_t n, double lo, double hi) {
  std::vector<double> v = randoms(rng, rows * n, lo, hi);
  std::bernoulli_distribution sign(0.5);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = i < static_cast<std::size_t>(n) ? v[i] / hi * 2 : sign(rng) ? -v[i] : v[i];
  return v;
}

}  // namespace

TEST_CASE("normalization: finite rows whose squares or sums overflow still give finite, correct results",
          "[normalization]") {
  TestContext ctx;
  std::mt19937_64 rng(5);
  struct Case {
    DType dtype;
    double lo, hi;  // magnitudes
    double tol;
  };
  // f32 squares overflow above ~1.8e19 and sums near 3.4e38; f64 squares above ~1e154.
  const Case cases[] = {{DType::f32, 1e37, 3e38, 3e-5},
                        {DType::f32, 1e20, 1e30, 3e-5},
                        {DType::bf16, 1e37, 3e38, 3e-2},
                        {DType::f64, 1e200, 1e300, 1e-12}};
  for (const Case& c : cases) {
    for (std::int64_t n : {7, 1000, 5000}) {  // 5000: more than one block of partial sums
      INFO(forge::dtype_name(c.dtype) << " rows of " << n << " in [" << c.lo << ", " << c.hi << "]");
      const Tensor x = ctx.from_vector(huge_rows(rng, 3, n, c.lo, c.hi), {3, n}).to(c.dtype);
      const Tensor w = ctx.from_vector(randoms(rng, n, 0.5, 2), {n}).to(c.dtype);
      const Tensor b = ctx.from_vector(randoms(rng, n, -1, 1), {n}).to(c.dtype);
      const auto xs = x.to_vector<double>(), ws = w.to_vector<double>(), bs = b.to_vector<double>();
      const double rms_eps = c.dtype == DType::f64   ? 2.220446049250313e-16
                             : c.dtype == DType::f32 ? 1.1920928955078125e-07
                                                     : 0.0078125;  // the dtype's epsilon
      check_close(forge::layer_norm(x, {n}, w, b).to_vector<double>(), wide_reference_norm(xs, n, ws, bs, 1e-5, false),
                  c.tol);
      check_close(forge::rms_norm(x, {n}, w).to_vector<double>(), wide_reference_norm(xs, n, ws, bs, rms_eps, true),
                  c.tol);
    }
  }
  // A constant row of 3e38 (its f32 sum overflows) has no deviation: exactly the bias.
  const Tensor flat = ctx.full({2, 4096}, 3e38);
  const Tensor bias = ctx.full({4096}, 0.25);
  for (double v : forge::layer_norm(flat, {4096}, Tensor(), bias).to_vector<double>()) CHECK(v == 0.25);
  // A row that holds inf or NaN is not finite: NaN, as in libtorch.
  const Tensor special = ctx.from_vector(std::vector<float>{1, INFINITY, 2, 3, 1, NAN, 2, 3}, {2, 4});
  for (double v : forge::layer_norm(special, {4}).to_vector<double>()) CHECK(std::isnan(v));
}

TEST_CASE("normalization: _into forms write packed and strided outputs, and exactly in place", "[normalization]") {
  TestContext ctx;
  std::mt19937_64 rng(3);
  const Tensor x = ctx.from_vector(randoms(rng, 24, -3, 3), {4, 6}).to(DType::f32);
  Tensor out = ctx.zeros({6, 4}).t();  // strided
  forge::softmax_into(out, x, 1);
  check_close(out.to_vector<double>(), forge::softmax(x, 1).to_vector<double>(), 0);
  forge::log_softmax_into(out, x, 0);
  check_close(out.to_vector<double>(), forge::log_softmax(x, 0).to_vector<double>(), 0);
  const Tensor w = ctx.ones({6}), b = ctx.zeros({6});
  forge::layer_norm_into(out, x, {6}, w, b);
  check_close(out.to_vector<double>(), forge::layer_norm(x, {6}).to_vector<double>(), 0);
  forge::rms_norm_into(out, x, {6}, w, 1e-6);
  check_close(out.to_vector<double>(), forge::rms_norm(x, {6}, Tensor(), 1e-6).to_vector<double>(), 0);
  Tensor inplace = x.clone();
  const auto want = forge::softmax(inplace, 1).to_vector<double>();
  forge::softmax_into(inplace, inplace, 1);
  check_close(inplace.to_vector<double>(), want, 0);
}

TEST_CASE("normalization: bad arguments are errors naming the op, and leak nothing", "[normalization]") {
  TestContext ctx;
  const Tensor x = ctx.ones({2, 3});
  const Tensor xi = ctx.ones({2, 3}, DType::i64);
  Tensor out = ctx.zeros({2, 3});
  Tensor wrong = ctx.zeros({3, 2});
  Tensor wrong_dtype = ctx.zeros({2, 3}, DType::f64);
  const Tensor w3 = ctx.ones({3}), w2 = ctx.ones({2}), w3d = ctx.ones({3}, DType::f64);
  Tensor big = ctx.zeros({12});
  const std::int64_t held = ctx.pool().outstanding();
  FORGE_REQUIRE_ERROR(dtype, "softmax", (void)forge::softmax(xi, 1));
  FORGE_REQUIRE_ERROR(dtype, "log_softmax", (void)forge::log_softmax(xi, 0));
  FORGE_REQUIRE_ERROR(out_of_range, "softmax", (void)forge::softmax(x, 2));
  FORGE_REQUIRE_ERROR(out_of_range, "log_softmax", (void)x.log_softmax(-3));
  FORGE_REQUIRE_ERROR(invalid_argument, "softmax", (void)forge::softmax(Tensor(), 0));
  FORGE_REQUIRE_ERROR(shape, "softmax_into", forge::softmax_into(wrong, x, 1));
  FORGE_REQUIRE_ERROR(dtype, "log_softmax_into", forge::log_softmax_into(wrong_dtype, x, 1));
  Tensor part = big.narrow(0, 0, 6).view({2, 3});
  const Tensor overlapping = big.narrow(0, 3, 6).view({2, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "softmax_into", forge::softmax_into(part, overlapping, 1));
  FORGE_REQUIRE_ERROR(dtype, "layer_norm", (void)forge::layer_norm(xi, {3}));
  FORGE_REQUIRE_ERROR(shape, "layer_norm", (void)forge::layer_norm(x, {2}));
  FORGE_REQUIRE_ERROR(shape, "layer_norm", (void)forge::layer_norm(x, {4, 2, 3}));
  FORGE_REQUIRE_ERROR(invalid_argument, "layer_norm", (void)forge::layer_norm(x, Shape{}));
  FORGE_REQUIRE_ERROR(shape, "layer_norm", (void)forge::layer_norm(x, {3}, w2));
  FORGE_REQUIRE_ERROR(shape, "layer_norm", (void)forge::layer_norm(x, {3}, w3, w2));
  FORGE_REQUIRE_ERROR(dtype, "layer_norm", (void)forge::layer_norm(x, {3}, w3d));
  FORGE_REQUIRE_ERROR(shape, "layer_norm_into", forge::layer_norm_into(wrong, x, {3}));
  FORGE_REQUIRE_ERROR(dtype, "rms_norm", (void)forge::rms_norm(xi, {3}));
  FORGE_REQUIRE_ERROR(shape, "rms_norm", (void)forge::rms_norm(x, {2, 3}, w3));
  FORGE_REQUIRE_ERROR(dtype, "rms_norm_into", forge::rms_norm_into(wrong_dtype, x, {3}));
  FORGE_REQUIRE_ERROR(invalid_argument, "rms_norm_into", forge::rms_norm_into(part, overlapping, {3}));
  {
    TestContext other;
    Tensor foreign = other.zeros({2, 3});
    const Tensor foreign_w = other.ones({3});
    FORGE_REQUIRE_ERROR(device, "softmax_into", forge::softmax_into(foreign, x, 1));
    FORGE_REQUIRE_ERROR(device, "layer_norm", (void)forge::layer_norm(x, {3}, foreign_w));
  }
  CHECK(ctx.pool().outstanding() == held);
}
