// cross_entropy, nll_loss and mse_loss against naive f64 loops written here
// (log-softmax by its definition, libtorch 1.13's label smoothing and
// ignore_index rules restated), reading inputs straight from their buffers.
// Every floating dtype with a tolerance per dtype, i64 and i32 targets, random
// shapes with empty and single rows, transposed and stepped logits, every
// reduction, broadcasting and mixed dtypes for mse, and every error path.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "reference.h"
#include "support.h"

namespace {

using forge::BFloat16;
using forge::Dims;
using forge::DType;
using forge::Half;
using forge::Shape;
using forge::Tensor;
using forge_test::kFloatDTypes;
using forge_test::TestContext;
using namespace forge_test::reference;

// Real values in [-4, 4) (rounded to t when t is narrower than f64).
Tensor make(TestContext& ctx, std::mt19937_64& rng, const Shape& shape, DType t, int layout) {
  std::uniform_real_distribution<double> u(-4, 4);
  return make_with(ctx, shape, t, layout, [&] { return u(rng); });
}

using forge::Reduction;
const Reduction kReductions[] = {Reduction::none, Reduction::mean, Reduction::sum};

double tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-10;
    case DType::f32:
      return 2e-5;
    case DType::f16:
      return 2e-3;
    default:
      return 1.6e-2;  // bf16
  }
}

bool close(double got, double want, DType t) {
  if (std::isnan(want)) return std::isnan(got);
  return std::abs(got - want) <= tolerance(t) * (1 + std::abs(want));
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Per-row losses of a class-index loss (0 for ignored rows), then reduced.
struct Expected {
  std::vector<double> rows;
  std::int64_t counted = 0;
  double reduced(Reduction r) const {
    double total = 0;
    for (double v : rows) total += v;
    return r == Reduction::sum ? total : total / static_cast<double>(counted);
  }
};

// Rows in the targets' row-major order: [C] is one row, [N, C, d1, ...] one
// per target index (n, d1, ...), its classes along dim 1.
template <typename RowFn>
Expected expected_rows(const Tensor& input, const Tensor& target, std::int64_t ignore_index, RowFn&& row) {
  Expected e;
  const int class_dim = input.dim() == 1 ? 0 : 1;
  const std::int64_t c = input.size(class_dim);
  auto one = [&](const Dims& tidx) {
    const auto t = static_cast<std::int64_t>(at(target, tidx));
    Dims xidx;
    for (int d = 0; d < input.dim(); ++d) xidx.push_back(d == class_dim ? 0 : tidx[d < class_dim ? d : d - 1]);
    std::vector<double> x(static_cast<std::size_t>(c));
    for (std::int64_t j = 0; j < c; ++j) {
      xidx[class_dim] = j;
      x[static_cast<std::size_t>(j)] = at(input, xidx);
    }
    if (t == ignore_index) {
      e.rows.push_back(0);
    } else {
      e.rows.push_back(row(x, t));
      ++e.counted;
    }
  };
  if (target.dim() == 0)
    one(Dims{});
  else
    each_index(target.shape(), one);
  return e;
}

double reference_cross_entropy(const std::vector<double>& x, std::int64_t t, double ls) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) m = std::max(m, v);
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  const double lse = m + std::log(s);
  double smooth = 0;
  for (double v : x) smooth -= (v - lse);
  smooth /= static_cast<double>(x.size());
  return (1 - ls) * (lse - x[static_cast<std::size_t>(t)]) + ls * smooth;
}

void check_loss(const Tensor& out, const Expected& e, Reduction r, const Shape& target_shape, DType t) {
  REQUIRE(out.dtype() == t);
  if (r == Reduction::none) {
    REQUIRE(out.shape() == target_shape);
    std::size_t i = 0;
    auto one = [&](const Dims& idx) {
      const double got = at(out, idx);
      if (!close(got, e.rows[i], t)) FAIL_CHECK("row " << i << " got " << got << " want " << e.rows[i]);
      ++i;
    };
    if (out.dim() == 0)
      one(Dims{});
    else
      each_index(out.shape(), one);
    CHECK(i == e.rows.size());
  } else {
    REQUIRE(out.shape() == Shape{});
    const double got = at(out, {}), want = e.reduced(r);
    INFO("got " << got << " want " << want);
    CHECK(close(got, want, t));
  }
}

// ---- cross_entropy ----

TEST_CASE("cross_entropy: every float dtype, reduction, ignore_index and label_smoothing", "[loss]") {
  TestContext ctx;
  std::mt19937_64 rng(201);
  const double smoothings[] = {0.0, 0.1, 0.5, 1.0};
  for (int iter = 0; iter < 240; ++iter) {
    const DType t = kFloatDTypes[iter % 4];
    const DType it = (iter / 4) % 2 ? DType::i32 : DType::i64;
    const Reduction r = kReductions[(iter / 8) % 3];
    const double ls = smoothings[rng() % 4];
    const std::int64_t ignore = rng() % 2 ? -100 : 1;
    const bool batched = iter % 7 != 0;
    const std::int64_t n = batched ? pick(rng, 0, 7) : 1, c = iter % 13 == 0 ? 300 : pick(rng, 1, 9);
    const Tensor logits = make(ctx, rng, batched ? Shape{n, c} : Shape{c}, t, static_cast<int>(rng() % 3));
    // targets in range, some of them the ignore_index
    const Tensor target = make_with(ctx, batched ? Shape{n} : Shape{}, it, static_cast<int>(rng() % 3),
                                    [&] { return static_cast<double>(rng() % 4 == 0 ? ignore : pick(rng, 0, c - 1)); });
    INFO("iter " << iter << " dtype " << forge::dtype_name(t) << " logits " << logits.shape() << " smoothing " << ls
                 << " ignore " << ignore << " reduction " << static_cast<int>(r));
    const forge::CrossEntropyOptions options{.reduction = r, .ignore_index = ignore, .label_smoothing = ls};
    const Expected e = expected_rows(logits, target, ignore, [&](const std::vector<double>& x, std::int64_t k) {
      return reference_cross_entropy(x, k, ls);
    });
    const Tensor out = forge::cross_entropy(logits, target, options);
    check_loss(out, e, r, target.shape(), t);
    Tensor into = ctx.zeros(out.shape(), t);
    forge::cross_entropy_into(into, logits, target, options);
    check_loss(into, e, r, target.shape(), t);
  }
}

TEST_CASE("cross_entropy and nll_loss: [N, C, d1, ...] inputs with [N, d1, ...] targets", "[loss]") {
  TestContext ctx;
  std::mt19937_64 rng(205);
  const double smoothings[] = {0.0, 0.1, 1.0};
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kFloatDTypes[iter % 4];
    const Reduction r = kReductions[(iter / 4) % 3];
    const double ls = smoothings[rng() % 3];
    const std::int64_t ignore = rng() % 2 ? -100 : 1;
    // [N, C, d1, ..., dk], k in 1..3, any extent 0 to 5 but C >= 1.
    Shape shape = random_shape(rng, 3 + static_cast<int>(iter % 3));
    shape[1] = pick(rng, 1, 6);
    // Packed, stepped, offset, or a [N, d1, ..., C] tensor with C moved to
    // dim 1 (a transformer's [B, T, V] logits as libtorch takes them).
    const int layout = static_cast<int>(rng() % 4);
    Tensor input;
    if (layout == 3) {
      Shape last = shape;
      last.erase(1);
      last.push_back(shape[1]);
      Dims order{0, last.rank() - 1};
      for (int d = 1; d + 1 < last.rank(); ++d) order.push_back(d);
      input = make(ctx, rng, last, t, packed).permute(order);
    } else {
      input = make(ctx, rng, shape, t, layout == 0 ? packed : layout == 1 ? stepped : offset);
    }
    Shape target_shape = shape;
    target_shape.erase(1);
    const Tensor target = make_with(ctx, target_shape, DType::i64, packed, [&] {
      return static_cast<double>(rng() % 4 == 0 ? ignore : pick(rng, 0, shape[1] - 1));
    });
    INFO("iter " << iter << " dtype " << forge::dtype_name(t) << " input " << input.shape() << " strides "
                 << input.strides() << " smoothing " << ls << " ignore " << ignore << " reduction "
                 << static_cast<int>(r));
    const forge::CrossEntropyOptions options{.reduction = r, .ignore_index = ignore, .label_smoothing = ls};
    const Expected ce = expected_rows(input, target, ignore, [&](const std::vector<double>& x, std::int64_t k) {
      return reference_cross_entropy(x, k, ls);
    });
    check_loss(forge::cross_entropy(input, target, options), ce, r, target_shape, t);
    const Expected nll = expected_rows(input, target, ignore, [](const std::vector<double>& x, std::int64_t k) {
      return -x[static_cast<std::size_t>(k)];
    });
    check_loss(forge::nll_loss(input, target, r, ignore), nll, r, target_shape, t);
    Tensor into = ctx.zeros(r == Reduction::none ? target_shape : Shape{}, t);
    if (r == Reduction::none && into.dim() >= 2)  // a strided out
      into = ctx.zeros(target_shape, t).transpose(0, 1).contiguous().transpose(0, 1);
    forge::cross_entropy_into(into, input, target, options);
    check_loss(into, ce, r, target_shape, t);
  }
  // The target must have the input's dims but the class dim.
  const Tensor x = ctx.zeros({2, 3, 4});
  const std::string msg =
      FORGE_REQUIRE_ERROR(shape, "cross_entropy", (void)forge::cross_entropy(x, ctx.zeros({2, 3}, DType::i64)));
  CHECK(contains(msg, "needs [2, 4] (the classes are dim 1)"));
  FORGE_REQUIRE_ERROR(shape, "nll_loss", (void)forge::nll_loss(x, ctx.zeros({2, 4, 1}, DType::i64)));
  const Tensor bad = ctx.from_vector(std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 3, 0}, {2, 4});
  const std::string range = FORGE_REQUIRE_ERROR(out_of_range, "nll_loss", (void)forge::nll_loss(x, bad));
  CHECK(contains(range, "target 3 at position [1, 2] is out of range for 3 classes"));
}

TEST_CASE("cross_entropy: a mean over only ignored targets is NaN, as in libtorch", "[loss]") {
  TestContext ctx;
  const Tensor logits = ctx.zeros({2, 3});
  const Tensor target = ctx.full({2}, -100, DType::i64);
  CHECK(std::isnan(forge::cross_entropy(logits, target).item<float>()));
  CHECK(forge::cross_entropy(logits, target, {.reduction = Reduction::sum}).item<float>() == 0.0f);
}

TEST_CASE("cross_entropy: extreme logits stay finite (max subtracted)", "[loss]") {
  TestContext ctx;
  const Tensor logits = ctx.from_vector(std::vector<float>{1000.0f, 0.0f, -1000.0f, 990.0f}, {2, 2});
  const Tensor target = ctx.from_vector(std::vector<std::int64_t>{0, 1});
  const auto rows = forge::cross_entropy(logits, target, {.reduction = Reduction::none}).to_vector<float>();
  CHECK(rows[0] == Approx(std::log1p(std::exp(-1000.0))).margin(1e-6));
  CHECK(rows[1] == Approx(0.0).margin(1e-4));
}

TEST_CASE("cross_entropy: many rows give the same reduction on one thread and on four", "[loss]") {
  TestContext one(forge_test::context_options(1)), four(forge_test::context_options(4));
  std::mt19937_64 r1(211), r4(211);
  const Tensor l1 = make(one, r1, {3000, 50}, DType::f32, packed), l4 = make(four, r4, {3000, 50}, DType::f32, packed);
  std::mt19937_64 rt(212);
  std::vector<std::int64_t> tv(3000);
  for (auto& v : tv) v = pick(rt, 0, 49);
  const Tensor t1 = one.from_vector(tv), t4 = four.from_vector(tv);
  const float a = forge::cross_entropy(l1, t1, {.label_smoothing = 0.2}).item<float>();
  const float b = forge::cross_entropy(l4, t4, {.label_smoothing = 0.2}).item<float>();
  CHECK(a == b);
  const Expected e = expected_rows(
      l1, t1, -100, [](const std::vector<double>& x, std::int64_t k) { return reference_cross_entropy(x, k, 0.2); });
  CHECK(close(a, e.reduced(Reduction::mean), DType::f32));
}

TEST_CASE("cross_entropy: bad input", "[loss]") {
  TestContext ctx;
  const Tensor logits = ctx.zeros({4, 5});
  const Tensor target = ctx.from_vector(std::vector<std::int64_t>{0, 1, 2, 7});
  const std::string msg =
      FORGE_REQUIRE_ERROR(out_of_range, "cross_entropy", (void)forge::cross_entropy(logits, target));
  CHECK(contains(msg, "target 7 at position [3] is out of range for 5 classes"));
  const Tensor neg = ctx.from_vector(std::vector<std::int32_t>{0, -1, 2, 3});
  FORGE_REQUIRE_ERROR(out_of_range, "cross_entropy", (void)forge::cross_entropy(logits, neg));
  // -1 is fine when it is the ignore_index
  CHECK_NOTHROW(forge::cross_entropy(logits, neg, {.ignore_index = -1}));
  const Tensor good = ctx.zeros({4}, DType::i64);
  FORGE_REQUIRE_ERROR(invalid_argument, "cross_entropy",
                      (void)forge::cross_entropy(logits, good, {.label_smoothing = -0.1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "cross_entropy",
                      (void)forge::cross_entropy(logits, good, {.label_smoothing = 1.5}));
  FORGE_REQUIRE_ERROR(invalid_argument, "cross_entropy",
                      (void)forge::cross_entropy(logits, good, {.label_smoothing = std::nan("")}));
  FORGE_REQUIRE_ERROR(dtype, "cross_entropy", (void)forge::cross_entropy(logits, ctx.zeros({4})));
  FORGE_REQUIRE_ERROR(dtype, "cross_entropy", (void)forge::cross_entropy(ctx.zeros({4, 5}, DType::i32), good));
  FORGE_REQUIRE_ERROR(shape, "cross_entropy", (void)forge::cross_entropy(ctx.zeros({4, 5, 2}), good));
  FORGE_REQUIRE_ERROR(shape, "cross_entropy", (void)forge::cross_entropy(logits, ctx.zeros({3}, DType::i64)));
  FORGE_REQUIRE_ERROR(shape, "cross_entropy", (void)forge::cross_entropy(ctx.zeros({5}), good));
  FORGE_REQUIRE_ERROR(invalid_argument, "cross_entropy", (void)forge::cross_entropy(Tensor(), good));
  Tensor scalar = ctx.zeros({});
  FORGE_REQUIRE_ERROR(shape, "cross_entropy_into",
                      forge::cross_entropy_into(scalar, logits, good, {.reduction = Reduction::none}));
  Tensor wrong = ctx.zeros({}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "cross_entropy_into", forge::cross_entropy_into(wrong, logits, good));
  Tensor inside = logits.select(0, 0).select(0, 0);
  FORGE_REQUIRE_ERROR(invalid_argument, "cross_entropy_into", forge::cross_entropy_into(inside, logits, good));
  Tensor fine = ctx.zeros({});
  FORGE_REQUIRE_ERROR(out_of_range, "cross_entropy_into", forge::cross_entropy_into(fine, logits, target));
}

// ---- nll_loss ----

TEST_CASE("nll_loss: every float dtype, reduction and ignore_index", "[loss]") {
  TestContext ctx;
  std::mt19937_64 rng(221);
  for (int iter = 0; iter < 120; ++iter) {
    const DType t = kFloatDTypes[iter % 4];
    const DType it = (iter / 4) % 2 ? DType::i32 : DType::i64;
    const Reduction r = kReductions[(iter / 8) % 3];
    const std::int64_t ignore = rng() % 2 ? -100 : 0;
    const bool batched = iter % 5 != 0;
    const std::int64_t n = batched ? pick(rng, 0, 7) : 1, c = pick(rng, 1, 9);
    const Tensor lp = make(ctx, rng, batched ? Shape{n, c} : Shape{c}, t, static_cast<int>(rng() % 3));
    const Tensor target = make_with(ctx, batched ? Shape{n} : Shape{}, it, static_cast<int>(rng() % 3),
                                    [&] { return static_cast<double>(rng() % 4 == 0 ? ignore : pick(rng, 0, c - 1)); });
    INFO("iter " << iter << " dtype " << forge::dtype_name(t) << " log_probs " << lp.shape());
    const Expected e = expected_rows(lp, target, ignore, [](const std::vector<double>& x, std::int64_t k) {
      return -x[static_cast<std::size_t>(k)];
    });
    const Tensor out = forge::nll_loss(lp, target, r, ignore);
    check_loss(out, e, r, target.shape(), t);
    Tensor into = ctx.zeros(out.shape(), t);
    forge::nll_loss_into(into, lp, target, r, ignore);
    check_loss(into, e, r, target.shape(), t);
  }
}

TEST_CASE("nll_loss: bad input", "[loss]") {
  TestContext ctx;
  const Tensor lp = ctx.zeros({2, 3});
  const Tensor target = ctx.from_vector(std::vector<std::int64_t>{3, 0});
  const std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "nll_loss", (void)forge::nll_loss(lp, target));
  CHECK(contains(msg, "target 3 at position [0]"));
  FORGE_REQUIRE_ERROR(dtype, "nll_loss", (void)forge::nll_loss(lp, ctx.zeros({2}, DType::u8)));
  FORGE_REQUIRE_ERROR(shape, "nll_loss", (void)forge::nll_loss(lp, ctx.zeros({2, 1}, DType::i64)));
  Tensor out = ctx.zeros({2});
  FORGE_REQUIRE_ERROR(shape, "nll_loss_into", forge::nll_loss_into(out, lp, ctx.zeros({2}, DType::i64)));
}

// ---- mse_loss ----

TEST_CASE("mse_loss: broadcasting, mixed dtypes and every reduction", "[loss]") {
  TestContext ctx;
  std::mt19937_64 rng(231);
  const DType pairs[][2] = {{DType::f32, DType::f32},   {DType::f64, DType::f64}, {DType::f16, DType::f16},
                            {DType::bf16, DType::bf16}, {DType::f32, DType::f64}, {DType::f16, DType::bf16},
                            {DType::f32, DType::i32}};
  for (int iter = 0; iter < 140; ++iter) {
    const auto& p = pairs[iter % 7];
    const Reduction r = kReductions[(iter / 7) % 3];
    const int rank = static_cast<int>(pick(rng, 0, 3));
    const Shape s = random_shape(rng, rank);
    Shape sb = s;
    for (int d = 0; d < rank; ++d)
      if (rng() % 3 == 0) sb[d] = 1;
    if (rank > 0 && rng() % 3 == 0) sb.erase(0);
    const bool swap = rng() % 2;
    const Tensor a = make(ctx, rng, swap ? sb : s, p[0], static_cast<int>(rng() % kLayouts));
    const Tensor b = p[1] == DType::i32 ? make_with(ctx, swap ? s : sb, p[1], packed,
                                                    [&] { return static_cast<double>(pick(rng, -3, 3)); })
                                        : make(ctx, rng, swap ? s : sb, p[1], static_cast<int>(rng() % kLayouts));
    const DType t = p[0] == p[1] ? p[0] : (p[1] == DType::f64 ? DType::f64 : DType::f32);
    INFO("iter " << iter << " a " << a.shape() << " b " << b.shape() << " reduction " << static_cast<int>(r));
    std::vector<double> sq;
    each_index(s, [&](const Dims& idx) {
      auto read = [&](const Tensor& x) {
        Dims in = Dims::filled(x.dim(), 0);
        for (int d = 0; d < x.dim(); ++d) in[d] = x.shape()[d] == 1 ? 0 : idx[d + s.rank() - x.dim()];
        return at(x, in);
      };
      const double d = read(a) - read(b);
      sq.push_back(d * d);
    });
    auto check = [&](const Tensor& out) {
      REQUIRE(out.dtype() == t);
      if (r == Reduction::none) {
        REQUIRE(out.shape() == s);
        std::size_t k = 0;
        int bad = 0;
        each_index(s, [&](const Dims& idx) {
          if (!close(at(out, idx), sq[k++], t) && bad++ < 3) FAIL_CHECK("at " << idx);
        });
      } else {
        REQUIRE(out.shape() == Shape{});
        double total = 0;
        for (double v : sq) total += v;
        const double want = r == Reduction::sum ? total : total / static_cast<double>(sq.size());
        CHECK(close(at(out, {}), want, t));
      }
    };
    const Tensor out = forge::mse_loss(a, b, r);
    check(out);
    Tensor into = ctx.zeros(out.shape(), t);
    forge::mse_loss_into(into, a, b, r);
    check(into);
  }
}

TEST_CASE("mse_loss: a large sum is the same on one thread and on four", "[loss]") {
  TestContext one(forge_test::context_options(1)), four(forge_test::context_options(4));
  std::mt19937_64 r1(241), r4(241);
  const Tensor a1 = make(one, r1, {300, 500}, DType::f32, transposed), b1 = make(one, r1, {500}, DType::f32, packed);
  const Tensor a4 = make(four, r4, {300, 500}, DType::f32, transposed), b4 = make(four, r4, {500}, DType::f32, packed);
  CHECK(forge::mse_loss(a1, b1, Reduction::sum).item<float>() == forge::mse_loss(a4, b4, Reduction::sum).item<float>());
  const Tensor empty = one.zeros({0, 3});
  CHECK(std::isnan(forge::mse_loss(empty, empty).item<float>()));
}

TEST_CASE("mse_loss: bad input", "[loss]") {
  TestContext ctx;
  const Tensor a = ctx.zeros({2, 3});
  FORGE_REQUIRE_ERROR(dtype, "mse_loss", (void)forge::mse_loss(ctx.zeros({2}, DType::i32), ctx.zeros({2}, DType::i64)));
  FORGE_REQUIRE_ERROR(shape, "mse_loss", (void)forge::mse_loss(a, ctx.zeros({3, 2})));
  FORGE_REQUIRE_ERROR(invalid_argument, "mse_loss", (void)forge::mse_loss(a, Tensor()));
  Tensor out = ctx.zeros({2, 3});
  FORGE_REQUIRE_ERROR(shape, "mse_loss_into", forge::mse_loss_into(out, a, a));
  Tensor wrong = ctx.zeros({2, 3}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "mse_loss_into", forge::mse_loss_into(wrong, a, a, Reduction::none));
  Tensor big = ctx.zeros({3, 3});
  Tensor shifted = big.narrow(0, 1, 2);
  const Tensor base = big.narrow(0, 0, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "mse_loss_into", forge::mse_loss_into(shifted, base, a, Reduction::none));
}

}  // namespace
