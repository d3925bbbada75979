// Reductions and cumsum against naive references written here: the input's
// logical values (read back in row-major order) are grouped per output by
// plain index arithmetic and reduced in double. Random shapes with size-1 and
// zero-size dims, every dim subset, keepdim both ways, packed, transposed,
// stepped and expanded inputs, every dtype each op accepts, the parallel and
// split paths, the _into forms and every error path.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support.h"

namespace {

using forge::DimList;
using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge_test::kAllDTypes;
using forge_test::kFloatDTypes;
using forge_test::TestContext;

struct Rng {
  std::mt19937_64 rng{424242};
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n)); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
};

// Values exactly representable in t (small integers for the integer dtypes).
std::vector<double> random_values(Rng& g, std::int64_t n, DType t, double lo = -4, double hi = 4,
                                  bool quarters = false) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    if (t == DType::boolean)
      x = static_cast<double>(g.below(2));
    else if (t == DType::u8)
      x = static_cast<double>(g.below(6));
    else if (!forge::is_floating(t))
      x = static_cast<double>(g.below(7) - 3);
    else
      x = quarters ? std::round(g.uniform(lo, hi) * 4) / 4 : g.uniform(lo, hi);
  }
  return v;
}

enum class Layout { packed, transposed, stepped, expanded };

// A tensor of logical shape `shape`, dtype t, laid out as asked.
Tensor make(TestContext& ctx, Rng& g, const Shape& shape, DType t, Layout layout, double lo = -4, double hi = 4,
            bool quarters = false) {
  auto fill = [&](const Shape& s) {
    return ctx.from_vector(random_values(g, s.numel(), t, lo, hi, quarters), s).to(t);
  };
  const int r = shape.rank();
  if (layout == Layout::transposed && r >= 2) {
    Shape base = shape;
    std::swap(base[0], base[r - 1]);
    return fill(base).transpose(0, r - 1);
  }
  if (layout == Layout::stepped && r >= 1) {
    Shape base = shape;
    base[r - 1] = 2 * shape[r - 1] + 1;
    return fill(base).slice(-1, 1, base[r - 1], 2);
  }
  if (layout == Layout::expanded && r >= 1 && shape[0] > 1) {
    Shape base = shape;
    base[0] = 1;
    return fill(base).expand(shape);
  }
  return fill(shape);
}

struct Groups {
  Shape out_shape;                        // with keepdim
  std::vector<std::vector<double>> vals;  // per output, in row-major order of the reduced dims
};

Groups group(const Tensor& x, const std::vector<bool>& reduced) {
  Groups g;
  const std::vector<double> xs = x.to_vector<double>();
  const int r = x.dim();
  for (int d = 0; d < r; ++d) g.out_shape.push_back(reduced[static_cast<std::size_t>(d)] ? 1 : x.shape()[d]);
  g.vals.resize(static_cast<std::size_t>(g.out_shape.numel()));
  std::vector<std::int64_t> idx(static_cast<std::size_t>(r), 0);
  for (std::size_t n = 0; n < xs.size(); ++n) {
    std::int64_t o = 0;
    for (int d = 0; d < r; ++d)
      o = o * g.out_shape[d] + (reduced[static_cast<std::size_t>(d)] ? 0 : idx[static_cast<std::size_t>(d)]);
    g.vals[static_cast<std::size_t>(o)].push_back(xs[n]);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < x.shape()[d]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
  return g;
}

enum class Op { sum, mean, prod, amax, amin, var, std, logsumexp, norm1, norm2, all, any };
const char* op_name(Op op) {
  static const char* names[] = {"sum", "mean",      "prod",  "amax",  "amin", "var",
                                "std", "logsumexp", "norm1", "norm2", "all",  "any"};
  return names[static_cast<int>(op)];
}

double reference(Op op, const std::vector<double>& v, std::int64_t correction = 1) {
  const double n = static_cast<double>(v.size());
  double s = 0, m;
  switch (op) {
    case Op::sum:
      for (double x : v) s += x;
      return s;
    case Op::mean:
      for (double x : v) s += x;
      return s / n;
    case Op::prod:
      s = 1;
      for (double x : v) s *= x;
      return s;
    case Op::amax:
    case Op::amin:
      m = v[0];
      for (double x : v) {
        if (std::isnan(x)) return x;
        m = op == Op::amax ? std::max(m, x) : std::min(m, x);
      }
      return m;
    case Op::var:
    case Op::std: {
      double mean = 0;
      for (double x : v) mean += x;
      mean /= n;
      for (double x : v) s += (x - mean) * (x - mean);
      const double div = n - static_cast<double>(correction) > 0 ? n - static_cast<double>(correction) : 0.0;
      return op == Op::var ? s / div : std::sqrt(s / div);
    }
    case Op::logsumexp:
      m = -INFINITY;
      for (double x : v) m = std::max(m, x);
      if (std::isinf(m)) return m;
      for (double x : v) s += std::exp(x - m);
      return m + std::log(s);
    case Op::norm1:
      for (double x : v) s += std::abs(x);
      return s;
    case Op::norm2:
      for (double x : v) s += x * x;
      return std::sqrt(s);
    case Op::all:
      for (double x : v)
        if (x == 0) return 0;
      return 1;
    case Op::any:
      for (double x : v)
        if (x != 0) return 1;
      return 0;
  }
  return 0;
}

// The scale an error is measured against: the sum of magnitudes the op adds up.
double scale(Op op, const std::vector<double>& v, double want) {
  double s = 0;
  for (double x : v) s += op == Op::norm2 || op == Op::var || op == Op::std ? x * x : std::abs(x);
  if (op == Op::mean || op == Op::var) s /= std::max<double>(1.0, static_cast<double>(v.size()) - 1);
  if (op == Op::std || op == Op::norm2) s = std::sqrt(s);
  return std::max({s, std::abs(want), 1e-30});
}

double tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 2e-6;
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 0;
  }
}

Tensor apply(Op op, const Tensor& x, const DimList& dims, bool keepdim, std::int64_t correction = 1) {
  switch (op) {
    case Op::sum:
      return forge::sum(x, dims, keepdim);
    case Op::mean:
      return forge::mean(x, dims, keepdim);
    case Op::prod:
      return forge::prod(x, dims, keepdim);
    case Op::amax:
      return forge::amax(x, dims, keepdim);
    case Op::amin:
      return forge::amin(x, dims, keepdim);
    case Op::var:
      return forge::var(x, dims, correction, keepdim);
    case Op::std:
      return forge::std(x, dims, correction, keepdim);
    case Op::logsumexp:
      return forge::logsumexp(x, dims, keepdim);
    case Op::norm1:
      return forge::norm(x, 1.0, dims, keepdim);
    case Op::norm2:
      return forge::norm(x, 2.0, dims, keepdim);
    case Op::all:
      return forge::all(x, dims, keepdim);
    case Op::any:
      return forge::any(x, dims, keepdim);
  }
  return {};
}

DType expected_dtype(Op op, DType in) {
  if (op == Op::all || op == Op::any) return DType::boolean;
  if ((op == Op::sum || op == Op::prod) && !forge::is_floating(in)) return DType::i64;
  return in;
}

bool accepts(Op op, DType t) {
  switch (op) {
    case Op::sum:
    case Op::prod:
    case Op::amax:
    case Op::amin:
    case Op::all:
    case Op::any:
      return true;
    default:
      return forge::is_floating(t);
  }
}

// Checks out against the reference for x reduced over `reduced`.
void check(Op op, const Tensor& x, const std::vector<bool>& reduced, bool keepdim, const Tensor& out,
           std::int64_t correction = 1) {
  const Groups g = group(x, reduced);
  Shape want_shape;
  for (int d = 0; d < x.dim(); ++d)
    if (!reduced[static_cast<std::size_t>(d)] || keepdim) want_shape.push_back(g.out_shape[d]);
  REQUIRE(out.shape() == want_shape);
  REQUIRE(out.dtype() == expected_dtype(op, x.dtype()));
  const std::vector<double> got = out.to_vector<double>();
  const double tol = tolerance(x.dtype());
  if (op == Op::prod && !forge::is_floating(x.dtype())) {  // wraps around like two's complement i64
    const auto got_i = out.to_vector<std::int64_t>();
    for (std::size_t o = 0; o < got_i.size(); ++o) {
      std::uint64_t p = 1;
      for (double v : g.vals[o]) p *= static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
      CHECK(got_i[o] == static_cast<std::int64_t>(p));
    }
    return;
  }
  const double max_finite = x.dtype() == DType::f16                               ? 65504.0
                            : x.dtype() == DType::f32 || x.dtype() == DType::bf16 ? 3.4e38
                                                                                  : 1e308;
  int bad = 0;
  for (std::size_t o = 0; o < got.size(); ++o) {
    double want = reference(op, g.vals[o], correction);
    if (std::abs(want) > max_finite) want = want > 0 ? INFINITY : -INFINITY;
    bool ok;
    if (std::isnan(want))
      ok = std::isnan(got[o]);
    else if (std::isinf(want))
      ok = got[o] == want;
    else
      ok = std::abs(got[o] - want) <= tol * scale(op, g.vals[o], want) * (op == Op::prod ? 4 : 1);
    if (!ok && bad++ < 3) FAIL_CHECK(op_name(op) << " output " << o << ": got " << got[o] << ", want " << want);
  }
  CHECK(bad == 0);
}

Shape random_shape(Rng& g) {
  static const std::int64_t sizes[] = {0, 1, 1, 2, 3, 3, 4, 5, 7};
  Shape s;
  const int r = static_cast<int>(g.below(5));
  for (int d = 0; d < r; ++d) s.push_back(sizes[g.below(9)]);
  return s;
}

}  // namespace

TEST_CASE("reduce: every op matches a naive reference on random shapes, dims, layouts and dtypes", "[reduce]") {
  TestContext ctx;
  Rng g;
  const Op ops[] = {Op::sum, Op::mean,      Op::prod,  Op::amax,  Op::amin, Op::var,
                    Op::std, Op::logsumexp, Op::norm1, Op::norm2, Op::all,  Op::any};
  const Layout layouts[] = {Layout::packed, Layout::transposed, Layout::stepped, Layout::expanded};
  for (int trial = 0; trial < 60; ++trial) {
    const Shape shape = random_shape(g);
    const Layout layout = layouts[trial % 4];
    const int r = shape.rank();
    // A random subset of dims (empty list: all of them), with negative spellings.
    DimList dims;
    std::vector<bool> reduced(static_cast<std::size_t>(r), false);
    for (int d = 0; d < r; ++d)
      if (g.below(2)) {
        dims.push_back(g.below(2) ? d : d - r);
        reduced[static_cast<std::size_t>(d)] = true;
      }
    if (dims.empty()) reduced.assign(static_cast<std::size_t>(r), true);
    const bool keepdim = g.below(2) != 0;
    std::int64_t empty_reduced = 1;
    for (int d = 0; d < r; ++d)
      if (reduced[static_cast<std::size_t>(d)]) empty_reduced *= shape[d];
    for (DType t : kAllDTypes) {
      const Tensor x = make(ctx, g, shape, t, layout);
      for (Op op : ops) {
        if (!accepts(op, t)) continue;
        if ((op == Op::amax || op == Op::amin) && empty_reduced == 0) continue;
        INFO(op_name(op) << " " << forge::dtype_name(t) << " shape " << shape << " dims " << dims << " keepdim "
                         << keepdim << " layout " << static_cast<int>(layout));
        check(op, x, reduced, keepdim, apply(op, x, dims, keepdim));
      }
    }
  }
}

TEST_CASE("reduce: large reductions take the parallel, split and row-accumulating paths correctly", "[reduce]") {
  TestContext ctx;
  Rng g;
  struct Case {
    Shape shape;
    DimList dims;
    std::vector<bool> reduced;
  };
  const Case cases[] = {
      {{3, 70001}, {1}, {false, true}},   // few outputs, long rows: split reduction
      {{70001, 3}, {0}, {true, false}},   // few outputs, outer axis: split over rows
      {{5000, 300}, {0}, {true, false}},  // outer axis, many tiles
      {{300, 5000}, {1}, {false, true}},  // many rows
      {{64, 33, 40}, {0, 2}, {true, false, true}},
      {{200001}, {}, {true}},  // one long run
      {{2, 3, 40000}, {0, 1}, {true, true, false}},
  };
  for (const Case& c : cases) {
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32}) {
      for (Layout layout : {Layout::packed, Layout::transposed}) {
        const Tensor x = make(ctx, g, c.shape, t, layout);
        for (Op op : {Op::sum, Op::mean, Op::amax, Op::var, Op::any}) {
          if (!accepts(op, t) || (op == Op::sum && t == DType::f16)) continue;  // f16 sums would overflow
          INFO(op_name(op) << " " << forge::dtype_name(t) << " shape " << c.shape << " dims " << c.dims);
          check(op, x, c.reduced, false, apply(op, x, c.dims, false));
        }
      }
    }
  }
}

TEST_CASE("reduce: a 16M-element f32 sum stays accurate where a naive f32 loop drifts", "[reduce]") {
  TestContext ctx;
  const std::int64_t n = std::int64_t{1} << 24;
  std::vector<float> v(static_cast<std::size_t>(n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 0.2f);  // below an ulp of the running f32 sum
  for (auto& x : v) x = u(rng);
  double exact = 0;
  float naive = 0;
  for (float x : v) {
    exact += x;
    naive += x;
  }
  REQUIRE(std::abs(naive - exact) / exact > 1e-3);  // the naive loop does drift
  const Tensor x = ctx.from_vector(v);
  for (int threads : {1, 2}) {
    TestContext c2(forge_test::context_options(threads));
    const Tensor xc = c2.from_vector(v);
    const double got = static_cast<double>(forge::sum(xc).item<float>());
    CHECK(std::abs(got - exact) / exact < 1e-6);
    const double mean = static_cast<double>(forge::mean(xc).item<float>());
    CHECK(std::abs(mean - exact / static_cast<double>(n)) < 1e-6);
  }
  CHECK(std::abs(static_cast<double>(x.sum().item<float>()) - exact) / exact < 1e-6);
}

TEST_CASE("reduce: NaN propagates through amax, amin, max and min, and infinities through logsumexp", "[reduce]") {
  TestContext ctx;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = INFINITY;
  for (DType t : kFloatDTypes) {
    const Tensor x = ctx.from_vector<double>({1, nan, 3, -2, 5, 7}, {2, 3}).to(t);
    auto mx = forge::amax(x, 1).to_vector<double>();
    CHECK(std::isnan(mx[0]));
    CHECK(mx[1] == 7);
    CHECK(std::isnan(forge::max(x).item<double>()));
    CHECK(std::isnan(forge::min(x).item<double>()));
    auto mn = forge::amin(x, 0).to_vector<double>();
    CHECK(mn[0] == -2);
    CHECK(std::isnan(mn[1]));
    CHECK(mn[2] == 3);
    const Tensor y = ctx.from_vector<double>({-inf, -inf, 1, inf, -inf, 0}, {3, 2}).to(t);
    auto lse = forge::logsumexp(y, 1).to_vector<double>();
    CHECK(lse[0] == -inf);
    CHECK(lse[1] == inf);
    CHECK(std::abs(lse[2] - 0) < 1e-6);
  }
}

// The contiguous f32 blocks run a vmaxps / vminps that can drop a NaN,
// checked beside it on the elements' bits (Note [NaN-checked extremes]): a
// NaN in any of the four accumulators, a block's tail or a later block, of
// either sign, must still come out; infinities are not NaNs.
TEST_CASE("reduce: long f32 rows keep a NaN anywhere through amax and amin, and infinities are values", "[reduce]") {
  for (int threads : {1, 2}) {
    TestContext ctx(forge::ExecContextOptions{.threads = threads});
    for (std::int64_t n : {64, 100, 2048, 2049, 5000}) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>((i * 37) % 101) - 50;
      const auto row = [&](const std::vector<float>& w) {
        return ctx.from_vector<float>(w, {1, n}).expand({3, n}).contiguous();
      };
      const Tensor clean = row(v);
      CHECK(forge::amax(clean).item<float>() == 50);
      CHECK(forge::amin(clean, {-1}).to_vector<float>() == std::vector<float>(3, -50));
      // 0, 9, 17 and 31 land in each of the four vector accumulators.
      for (std::int64_t at :
           {std::int64_t{0}, std::int64_t{9}, std::int64_t{17}, std::int64_t{31}, std::int64_t{50}, n - 1, n / 2}) {
        for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
          std::vector<float> w = v;
          w[static_cast<std::size_t>(at)] = nan;
          const Tensor x = row(w);
          INFO("n " << n << " at " << at << " threads " << threads);
          CHECK(std::isnan(forge::amax(x).item<float>()));
          CHECK(std::isnan(forge::amin(x).item<float>()));
          for (float m : forge::amax(x, {-1}).to_vector<float>()) CHECK(std::isnan(m));
          for (float m : forge::amin(x, {-1}).to_vector<float>()) CHECK(std::isnan(m));
        }
        std::vector<float> w(static_cast<std::size_t>(n), -INFINITY);
        w[static_cast<std::size_t>(at)] = 3;
        CHECK(forge::amax(row(w)).item<float>() == 3);
        CHECK(forge::amin(row(w)).item<float>() == -INFINITY);
        w[static_cast<std::size_t>(at)] = INFINITY;
        CHECK(forge::amax(row(w), {-1}).to_vector<float>() == std::vector<float>(3, INFINITY));
      }
    }
    // A tie between +0 and -0 resolves the same way in the vector blocks
    // as in the strided path (a transposed copy of the same values).
    std::vector<float> z(64, -1.0f);
    z[0] = 0.0f;
    z[8] = -0.0f;
    const Tensor zc = ctx.from_vector<float>(z, {1, 64});
    std::vector<float> zz(128, 5.0f);
    for (std::size_t i = 0; i < 64; ++i) zz[2 * i] = z[i];
    const Tensor zt = ctx.from_vector<float>(zz, {64, 2}).slice(1, 0, 1).t();  // the same 64 values, stride 2
    REQUIRE(zt.strides()[1] == 2);
    CHECK(std::signbit(forge::amax(zc).item<float>()) == std::signbit(forge::amax(zt).item<float>()));
  }
}

TEST_CASE("reduce: empty reductions give the identity", "[reduce]") {
  TestContext ctx;
  const Tensor x = ctx.zeros({3, 0});
  CHECK(forge::sum(x, 1).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(forge::prod(x, 1).to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(forge::all(x, 1).to_vector<bool>() == std::vector<bool>{true, true, true});
  CHECK(forge::any(x, 1).to_vector<bool>() == std::vector<bool>{false, false, false});
  CHECK(std::isnan(forge::mean(x).item<float>()));
  CHECK(forge::logsumexp(x, 1).to_vector<double>() == std::vector<double>(3, -INFINITY));
  CHECK(forge::sum(ctx.zeros({0}, DType::i32)).dtype() == DType::i64);
  CHECK(forge::sum(x, 0).shape() == Shape{0});
  CHECK(forge::amax(x, 0).shape() == Shape{0});  // nothing reduced over a size-0 dim
}

TEST_CASE("reduce: var and std divide by N - correction, giving NaN or inf at or below zero", "[reduce]") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<double>({1, 2, 4});
  CHECK(forge::var(x).item<double>() == Approx(7.0 / 3.0));
  CHECK(forge::var(x, {}, 0).item<double>() == Approx(14.0 / 9.0));
  CHECK(forge::std(x, {}, 2).item<double>() == Approx(std::sqrt(14.0 / 3.0)));
  CHECK(std::isinf(forge::var(x, {}, 3).item<double>()));
  CHECK(std::isnan(forge::var(ctx.from_vector<double>({5})).item<double>()));
  CHECK(x.var({0}, 1, true).shape() == Shape{1});
}

TEST_CASE("reduce: 0-d tensors reduce as one element over dim 0 or -1", "[reduce]") {
  TestContext ctx;
  const Tensor s = ctx.full({}, 3.0);
  CHECK(s.sum().item<float>() == 3.0f);
  CHECK(s.sum(0).shape() == Shape{});
  CHECK(s.sum(-1, true).shape() == Shape{});
  CHECK(s.amax(0).item<float>() == 3.0f);
  CHECK(s.argmax(0).item<std::int64_t>() == 0);
  CHECK(s.cumsum(0).item<float>() == 3.0f);
  const auto vi = s.max(0);
  CHECK(vi.values.item<float>() == 3.0f);
  CHECK(vi.indices.item<std::int64_t>() == 0);
  FORGE_REQUIRE_ERROR(out_of_range, "sum", (void)s.sum(1));
}

TEST_CASE("reduce: max and min along a dim give values and first indices, matching a naive scan", "[reduce]") {
  TestContext ctx;
  Rng g;
  const Shape shapes[] = {{5, 7}, {3, 1, 4}, {2, 3, 4, 5}, {9}, {4000, 20}, {20, 4000}, {3, 50000}};
  for (const Shape& shape : shapes) {
    for (DType t : kAllDTypes) {
      for (Layout layout : {Layout::packed, Layout::transposed, Layout::stepped}) {
        // Few distinct values (quarters), so ties are common.
        const Tensor x = make(ctx, g, shape, t, layout, -2, 2, true);
        const std::vector<double> xs = x.to_vector<double>();
        for (int dim = 0; dim < shape.rank(); ++dim) {
          for (bool is_max : {true, false}) {
            INFO(forge::dtype_name(t) << " " << shape << " dim " << dim << (is_max ? " max" : " min"));
            const auto vi = is_max ? forge::max(x, dim) : forge::min(x, dim);
            const Tensor am = is_max ? forge::argmax(x, dim, true) : forge::argmin(x, dim, true);
            const auto vals = vi.values.to_vector<double>();
            const auto idx = vi.indices.to_vector<std::int64_t>();
            const auto idx2 = am.to_vector<std::int64_t>();
            REQUIRE(vi.values.dtype() == t);
            REQUIRE(vi.indices.dtype() == DType::i64);
            std::int64_t outer = 1, inner = 1;
            for (int d = 0; d < dim; ++d) outer *= shape[d];
            for (int d = dim + 1; d < shape.rank(); ++d) inner *= shape[d];
            const std::int64_t n = shape[dim];
            int bad = 0;
            for (std::int64_t o = 0; o < outer; ++o)
              for (std::int64_t i = 0; i < inner; ++i) {
                std::int64_t best = 0;
                for (std::int64_t k = 1; k < n; ++k) {
                  const double v = xs[static_cast<std::size_t>((o * n + k) * inner + i)];
                  const double b = xs[static_cast<std::size_t>((o * n + best) * inner + i)];
                  if (is_max ? v > b : v < b) best = k;
                }
                const auto at = static_cast<std::size_t>(o * inner + i);
                if (idx[at] != best || idx2[at] != best ||
                    vals[at] != xs[static_cast<std::size_t>((o * n + best) * inner + i)])
                  ++bad;
              }
            CHECK(bad == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("reduce: argmax and argmin of the flattened tensor, ties and NaN", "[reduce]") {
  TestContext ctx;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = ctx.from_vector<double>({1, 5, 5, -3, -3, 2}, {2, 3});
  CHECK(x.argmax().item<std::int64_t>() == 1);
  CHECK(x.argmin().item<std::int64_t>() == 3);
  CHECK(x.argmax().shape() == Shape{});
  CHECK(x.t().argmax().item<std::int64_t>() == 2);  // flattened in the view's own order
  const Tensor y = ctx.from_vector<double>({1, nan, 9, nan}).to(DType::f32);
  CHECK(y.argmax().item<std::int64_t>() == 1);
  CHECK(y.argmin().item<std::int64_t>() == 1);
  // A long vector takes the split path; the first of equal maxima still wins.
  std::vector<float> v(300000, 0.0f);
  v[123457] = 2;
  v[250000] = 2;
  v[17] = -1;
  v[260000] = -1;
  const Tensor z = ctx.from_vector(v);
  CHECK(z.argmax().item<std::int64_t>() == 123457);
  CHECK(z.argmin().item<std::int64_t>() == 17);
  CHECK(z.max().item<float>() == 2);
}

// Contiguous f32 rows take a vectorized scan (a block's max, then its first
// index); f64 takes the scalar loop. Rows of small integers (ties), some
// with NaNs, lengths around the 16-lane and 2048-value blocks, both ways,
// along the last dim and flattened, on one and two threads.
TEST_CASE("reduce: f32 argmax and argmin of contiguous rows match the scalar scan, ties and NaN", "[reduce]") {
  for (const int threads : {1, 2}) {
    TestContext ctx(forge_test::context_options(threads));
    std::mt19937 rng(11);
    for (const std::int64_t n : {1, 15, 16, 17, 2047, 2048, 2049, 5000}) {
      for (const bool with_nan : {false, true}) {
        INFO(threads << " thread(s), row length " << n << (with_nan ? ", NaNs" : ""));
        const std::int64_t rows = 3;
        std::vector<double> v(static_cast<std::size_t>(rows * n));
        for (double& e : v) e = static_cast<double>(rng() % 9) - 4;
        if (with_nan) v[v.size() / 2] = v[v.size() - 1] = std::numeric_limits<double>::quiet_NaN();
        const Tensor x64 = ctx.from_vector<double>(v, {rows, n});
        const Tensor x32 = x64.to(DType::f32);
        CHECK(x32.argmax(-1).to_vector<std::int64_t>() == x64.argmax(-1).to_vector<std::int64_t>());
        CHECK(x32.argmin(-1).to_vector<std::int64_t>() == x64.argmin(-1).to_vector<std::int64_t>());
        CHECK(x32.argmax().item<std::int64_t>() == x64.argmax().item<std::int64_t>());
        CHECK(x32.argmin().item<std::int64_t>() == x64.argmin().item<std::int64_t>());
      }
    }
  }
}

TEST_CASE("reduce: cumsum matches a running sum along every dim, integers and bool give i64", "[reduce]") {
  TestContext ctx;
  Rng g;
  const Shape shapes[] = {{6}, {3, 4}, {2, 3, 5}, {0, 3}, {3000, 20}, {20, 3000}};
  for (const Shape& shape : shapes) {
    for (DType t : kAllDTypes) {
      for (Layout layout : {Layout::packed, Layout::transposed}) {
        const Tensor x = make(ctx, g, shape, t, layout);
        const std::vector<double> xs = x.to_vector<double>();
        for (int dim = 0; dim < shape.rank(); ++dim) {
          INFO(forge::dtype_name(t) << " " << shape << " dim " << dim);
          const Tensor c = x.cumsum(dim - (dim % 2) * shape.rank());
          REQUIRE(c.dtype() == (forge::is_floating(t) ? t : DType::i64));
          REQUIRE(c.shape() == shape);
          const auto got = c.to_vector<double>();
          std::int64_t outer = 1, inner = 1;
          for (int d = 0; d < dim; ++d) outer *= shape[d];
          for (int d = dim + 1; d < shape.rank(); ++d) inner *= shape[d];
          int bad = 0;
          for (std::int64_t o = 0; o < outer; ++o)
            for (std::int64_t i = 0; i < inner; ++i) {
              double s = 0, mag = 0;
              for (std::int64_t k = 0; k < shape[dim]; ++k) {
                const auto at = static_cast<std::size_t>((o * shape[dim] + k) * inner + i);
                s += xs[at];
                mag += std::abs(xs[at]);
                if (std::abs(got[at] - s) > tolerance(t) * std::max(1.0, mag) * 2) ++bad;
              }
            }
          CHECK(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("reduce: _into forms write into the caller's tensor, strided too", "[reduce]") {
  TestContext ctx;
  Rng g;
  const Tensor x = make(ctx, g, {4, 6}, DType::f32, Layout::transposed);
  Tensor out = ctx.zeros({2, 6});
  Tensor col = out.select(0, 1);  // stride 1 but not at offset 0
  forge::sum_into(col, x, 0);
  check(Op::sum, x, {true, false}, false, col);
  Tensor strided = ctx.zeros({4, 3}).t();  // [3, 4] transposed
  Tensor xs = make(ctx, g, {3, 4, 5}, DType::f64, Layout::packed);
  Tensor s2 = ctx.zeros({4, 3}, DType::f64).t();
  forge::mean_into(s2, xs, 2);
  check(Op::mean, xs, {false, false, true}, false, s2);
  (void)strided;
  for (Op op :
       {Op::prod, Op::amax, Op::amin, Op::var, Op::std, Op::logsumexp, Op::norm1, Op::norm2, Op::all, Op::any}) {
    Tensor o = ctx.zeros({3, 1, 5}, expected_dtype(op, DType::f64));
    switch (op) {
      case Op::prod:
        forge::prod_into(o, xs, 1, true);
        break;
      case Op::amax:
        forge::amax_into(o, xs, 1, true);
        break;
      case Op::amin:
        forge::amin_into(o, xs, 1, true);
        break;
      case Op::var:
        forge::var_into(o, xs, 1, 1, true);
        break;
      case Op::std:
        forge::std_into(o, xs, 1, 1, true);
        break;
      case Op::logsumexp:
        forge::logsumexp_into(o, xs, 1, true);
        break;
      case Op::norm1:
        forge::norm_into(o, xs, 1.0, 1, true);
        break;
      case Op::norm2:
        forge::norm_into(o, xs, 2.0, 1, true);
        break;
      case Op::all:
        forge::all_into(o, xs, 1, true);
        break;
      case Op::any:
        forge::any_into(o, xs, 1, true);
        break;
      default:
        break;
    }
    INFO(op_name(op));
    check(op, xs, {false, true, false}, true, o);
  }
  Tensor am = ctx.zeros({3, 5}, DType::i64);
  forge::argmax_into(am, xs, 1);
  CHECK(am.to_vector<std::int64_t>() == forge::argmax(xs, 1).to_vector<std::int64_t>());
  forge::argmin_into(am, xs, -2);
  CHECK(am.to_vector<std::int64_t>() == forge::argmin(xs, 1).to_vector<std::int64_t>());
  Tensor cs = ctx.zeros({3, 4, 5}, DType::f64);
  forge::cumsum_into(cs, xs, 1);
  CHECK(cs.to_vector<double>() == forge::cumsum(xs, 1).to_vector<double>());
  // Exactly in place: cumsum of x into x.
  Tensor inplace = xs.clone();
  const auto before = forge::cumsum(inplace, 2).to_vector<double>();
  forge::cumsum_into(inplace, inplace, 2);
  CHECK(inplace.to_vector<double>() == before);
}

TEST_CASE("reduce: bad arguments are errors naming the op, and leak nothing", "[reduce]") {
  TestContext ctx;
  const Tensor x = ctx.ones({2, 3});
  const Tensor xi = ctx.ones({2, 3}, DType::i32);
  const Tensor e = ctx.zeros({2, 0});
  Tensor o = ctx.zeros({3});
  Tensor oi = ctx.zeros({2}, DType::i32);
  Tensor big = ctx.zeros({8});
  Tensor expanded = ctx.zeros({1}).expand({2});
  const std::int64_t held = ctx.pool().outstanding();
  FORGE_REQUIRE_ERROR(out_of_range, "sum", (void)forge::sum(x, 2));
  FORGE_REQUIRE_ERROR(out_of_range, "sum", (void)forge::sum(x, {0, -3}));
  FORGE_REQUIRE_ERROR(invalid_argument, "sum", (void)forge::sum(x, {1, -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "sum", (void)forge::sum(Tensor()));
  FORGE_REQUIRE_ERROR(dtype, "mean", (void)forge::mean(xi));
  FORGE_REQUIRE_ERROR(dtype, "var", (void)forge::var(xi));
  FORGE_REQUIRE_ERROR(dtype, "std", (void)forge::std(xi));
  FORGE_REQUIRE_ERROR(dtype, "logsumexp", (void)forge::logsumexp(xi, 0));
  FORGE_REQUIRE_ERROR(dtype, "norm", (void)forge::norm(xi));
  FORGE_REQUIRE_ERROR(invalid_argument, "norm", (void)forge::norm(x, 3.0));
  FORGE_REQUIRE_ERROR(invalid_argument, "norm", (void)forge::norm(x, 0.5));
  FORGE_REQUIRE_ERROR(invalid_argument, "amax", (void)forge::amax(e, 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "amin", (void)forge::amin(e));
  FORGE_REQUIRE_ERROR(invalid_argument, "max", (void)forge::max(e));
  FORGE_REQUIRE_ERROR(invalid_argument, "min", (void)forge::min(e, 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "argmax", (void)forge::argmax(e));
  FORGE_REQUIRE_ERROR(invalid_argument, "argmin", (void)forge::argmin(e, 1));
  FORGE_REQUIRE_ERROR(out_of_range, "argmax", (void)forge::argmax(x, 2));
  FORGE_REQUIRE_ERROR(out_of_range, "max", (void)forge::max(x, -3));
  FORGE_REQUIRE_ERROR(out_of_range, "cumsum", (void)forge::cumsum(x, 2));
  // _into: shape, dtype, context, overlap, expanded out.
  FORGE_REQUIRE_ERROR(shape, "sum_into", forge::sum_into(o, x, 1));
  FORGE_REQUIRE_ERROR(shape, "sum_into", forge::sum_into(o, x, 0, true));
  FORGE_REQUIRE_ERROR(dtype, "sum_into", forge::sum_into(oi, xi, 1));  // i32 sums give i64
  FORGE_REQUIRE_ERROR(dtype, "all_into", forge::all_into(oi, xi, 1));
  FORGE_REQUIRE_ERROR(dtype, "argmax_into", forge::argmax_into(oi, xi, 1));
  FORGE_REQUIRE_ERROR(dtype, "cumsum_into", forge::cumsum_into(o, x.select(0, 0).to(DType::u8), 0));
  Tensor part = big.narrow(0, 0, 2);
  const Tensor overlapping = big.view({2, 4}).narrow(1, 1, 3);
  FORGE_REQUIRE_ERROR(invalid_argument, "sum_into", forge::sum_into(part, overlapping, 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "sum_into", forge::sum_into(expanded, x, 1));
  {
    TestContext other;
    Tensor foreign = other.zeros({2});
    FORGE_REQUIRE_ERROR(device, "sum_into", forge::sum_into(foreign, x, 1));
    FORGE_REQUIRE_ERROR(device, "cumsum_into", forge::cumsum_into(foreign, x.select(0, 0).narrow(0, 0, 2), 0));
  }
  FORGE_REQUIRE_ERROR(invalid_argument, "var_into", forge::var_into(o, Tensor(), 1));
  CHECK(ctx.pool().outstanding() == held);
}
