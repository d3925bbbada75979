// Sorting, selection and sampling (forge/ops/sort.h) and the integer draws
// randint / randperm: sort, argsort and topk against std::stable_sort in
// every dtype (ties, NaN, dims other than the last, strided inputs and
// outputs), searchsorted against hand-derived bounds, multinomial's
// frequencies against chi-square bounds, seeds, gradients and every refusal.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/device_runtime.h"
#include "backend/kernels.h"
#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge_test::TestContext;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<DType> kRealDTypes = {DType::f32, DType::f64, DType::f16,     DType::bf16, DType::i32,
                                        DType::i64, DType::u8,  DType::boolean, DType::i8};

std::vector<double> doubles(const Tensor& t) { return t.to_vector<double>(); }
std::vector<std::int64_t> longs(const Tensor& t) { return t.to_vector<std::int64_t>(); }

// The stable order of v, NaN after every number (first when descending), as libtorch sorts.
std::vector<std::int64_t> reference_order(const std::vector<double>& v, bool descending) {
  std::vector<std::int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  const auto less = [](double a, double b) { return a < b || (std::isnan(b) && !std::isnan(a)); };
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return descending ? less(v[static_cast<std::size_t>(b)], v[static_cast<std::size_t>(a)])
                      : less(v[static_cast<std::size_t>(a)], v[static_cast<std::size_t>(b)]);
  });
  return order;
}

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// [rows, n] values of `dtype` with many ties (and NaN, ±inf for floating dtypes).
Tensor tied_values(TestContext& ctx, std::int64_t rows, std::int64_t n, DType dtype, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int> pick(-6, 6);
  std::vector<double> v(static_cast<std::size_t>(rows * n));
  for (double& x : v) {
    const int r = pick(g);
    x = r == 6 && forge::is_floating(dtype) ? kNaN : r == -6 && forge::is_floating(dtype) ? -kInf : r;
  }
  return ctx.from_vector(v, {rows, n}).to(dtype);
}

// Checks values/indices of a selection of the first k along the last dim of x
// ([rows, n]) against the stable reference order.
void check_rows_against_reference(const Tensor& x, const Tensor& values, const Tensor& indices, std::int64_t k,
                                  bool descending, bool in_index_order) {
  const std::int64_t rows = x.size(0), n = x.size(1);
  const std::vector<double> xv = doubles(x), vv = doubles(values);
  const std::vector<std::int64_t> iv = longs(indices);
  REQUIRE(indices.shape() == Shape{rows, k});
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::vector<double> row(xv.begin() + r * n, xv.begin() + (r + 1) * n);
    std::vector<std::int64_t> want = reference_order(row, descending);
    want.resize(static_cast<std::size_t>(k));
    if (in_index_order) std::sort(want.begin(), want.end());
    for (std::int64_t j = 0; j < k; ++j) {
      INFO("row " << r << " position " << j);
      const auto at = static_cast<std::size_t>(r * k + j);
      CHECK(iv[at] == want[static_cast<std::size_t>(j)]);
      if (values.defined()) CHECK(same(vv[at], row[static_cast<std::size_t>(want[static_cast<std::size_t>(j)])]));
    }
  }
}

// Pearson's chi-square statistic of observed counts against expected probabilities.
double chi_square(const std::vector<std::int64_t>& counts, const std::vector<double>& p, std::int64_t draws) {
  double stat = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double e = p[i] * static_cast<double>(draws);
    stat += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return stat;
}
// The chi-square quantiles at p = 0.001 (upper tail) by degrees of freedom.
const std::map<int, double> kChiSquare999 = {{3, 16.266}, {5, 20.515}, {9, 27.877}};

}  // namespace

// ---- sort / argsort ----

TEST_CASE("sort: ascending and descending rows match std::stable_sort in every dtype, ties and NaN included",
          "[sort]") {
  TestContext ctx;
  // 41 sorts by comparison, 300 and 5000 by radix (keys of 32 bits or fewer) or comparison (f64, i64).
  for (const std::int64_t n : {41, 300, 5000}) {
    for (const DType dtype : kRealDTypes) {
      const Tensor x = tied_values(ctx, n > 1000 ? 2 : 6, n, dtype, static_cast<std::uint64_t>(n));
      for (const bool descending : {false, true}) {
        for (const bool stable : {false, true}) {
          INFO(forge::dtype_name(dtype) << " n " << n << (descending ? " descending" : " ascending")
                                        << (stable ? " stable" : ""));
          const auto [values, indices] = forge::sort(x, -1, descending, stable);
          CHECK(values.dtype() == dtype);
          CHECK(indices.dtype() == DType::i64);
          check_rows_against_reference(x, values, indices, n, descending, false);
          CHECK(longs(forge::argsort(x, 1, descending, stable)) == longs(indices));
        }
      }
    }
  }
  // Distinct keys over the whole f32 range, both zeros and both infinities: every digit of the radix moves.
  std::vector<float> wide = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 3e38f, -3e38f};
  std::mt19937_64 g(5);
  std::uniform_real_distribution<float> exponent(-40, 38);
  for (int i = 0; i < 600; ++i) wide.push_back((i % 2 ? -1.0f : 1.0f) * std::pow(10.0f, exponent(g)));
  const Tensor w = ctx.from_vector(wide, {1, static_cast<std::int64_t>(wide.size())});
  for (const bool descending : {false, true}) {
    const auto [values, indices] = forge::sort(w, 1, descending);
    check_rows_against_reference(w, values, indices, w.size(1), descending, false);
  }
}

TEST_CASE("sort: NaN goes last ascending and first descending, and equal values (-0 and 0 too) keep input order",
          "[sort]") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>({3, NAN, 1, 3, -INFINITY, NAN, 0, -0.0f});
  const auto [up, up_idx] = forge::sort(x);
  CHECK(longs(up_idx) == std::vector<std::int64_t>{4, 6, 7, 2, 0, 3, 1, 5});
  const std::vector<double> u = doubles(up);
  CHECK(u[0] == -kInf);
  CHECK(std::isnan(u[6]));
  CHECK(std::isnan(u[7]));
  const auto [down, down_idx] = forge::sort(x, 0, /*descending=*/true);
  CHECK(longs(down_idx) == std::vector<std::int64_t>{1, 5, 0, 3, 2, 6, 7, 4});
  CHECK(doubles(down)[2] == 3);
}

TEST_CASE("sort: along dims other than the last, of strided inputs, match the lines sorted one by one", "[sort]") {
  TestContext ctx;
  // [5, 4, 6] viewed from a [6, 4, 5] buffer: no dim is contiguous.
  const Tensor base = tied_values(ctx, 6 * 4, 5, DType::f32, 11).reshape({6, 4, 5});
  const Tensor x = base.permute({2, 1, 0});
  REQUIRE(!x.is_contiguous());
  for (int dim = 0; dim < 3; ++dim) {
    for (const bool descending : {false, true}) {
      INFO("dim " << dim << (descending ? " descending" : ""));
      const auto [values, indices] = forge::sort(x, dim, descending);
      // The same sort of the packed tensor with dim moved last.
      const Tensor moved = x.transpose(dim, 2).contiguous();
      const Tensor lines = moved.reshape({moved.numel() / moved.size(2), moved.size(2)});
      const auto [rv, ri] = forge::sort(lines, 1, descending);
      check_rows_against_reference(lines, rv, ri, lines.size(1), descending, false);
      CHECK(longs(indices.transpose(dim, 2).contiguous()) == longs(ri));
      const std::vector<double> got = doubles(values.transpose(dim, 2).contiguous()), want = doubles(rv);
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(same(got[i], want[i]));
    }
  }
}

TEST_CASE("sort: a 0-d tensor, an empty dim and a size-1 dim", "[sort]") {
  TestContext ctx;
  const auto [v, i] = forge::sort(ctx.full({}, 2.5));
  CHECK(v.dim() == 0);
  CHECK(v.item<float>() == 2.5f);
  CHECK(i.item<std::int64_t>() == 0);
  const auto [ev, ei] = forge::sort(ctx.zeros({3, 0}), 1);
  CHECK(ev.shape() == Shape{3, 0});
  CHECK(ei.shape() == Shape{3, 0});
  CHECK(longs(forge::argsort(ctx.ones({4, 1}), 1)) == std::vector<std::int64_t>{0, 0, 0, 0});
}

// ---- topk ----

TEST_CASE("topk: largest and smallest, sorted or in index order, are the first k of a stable sort", "[sort]") {
  TestContext ctx;
  for (const DType dtype : kRealDTypes) {
    for (const std::int64_t n : {1, 9, 200, 300}) {
      const Tensor x = tied_values(ctx, 3, n, dtype, static_cast<std::uint64_t>(n));
      // 1 and n / 10 take the heap (k * 8 <= n); n / 2 and n partition (300 sorted: radix).
      for (const std::int64_t k : std::set<std::int64_t>{0, 1, n / 10, n / 2, n}) {
        for (const bool largest : {true, false}) {
          for (const bool sorted : {true, false}) {
            INFO(forge::dtype_name(dtype) << " n " << n << " k " << k << (largest ? " largest" : " smallest")
                                          << (sorted ? " sorted" : " index order"));
            const auto [values, indices] = forge::topk(x, k, 1, largest, sorted);
            CHECK(values.shape() == Shape{3, k});
            check_rows_against_reference(x, values, indices, k, largest, !sorted);
          }
        }
      }
    }
  }
}

TEST_CASE("topk: ties go to the lowest indices, NaN counts as the largest", "[sort]") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>({1, 2, 2, 2, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2});
  const auto [v, i] = forge::topk(x, 2);
  CHECK(doubles(v) == std::vector<double>{2, 2});
  CHECK(longs(i) == std::vector<std::int64_t>{1, 2});
  CHECK(longs(std::get<1>(forge::topk(x, 1, 0, /*largest=*/false))) == std::vector<std::int64_t>{4});
  const Tensor y = ctx.from_vector<double>({5, kNaN, 7, kNaN, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(longs(std::get<1>(forge::topk(y, 3))) == std::vector<std::int64_t>{1, 3, 2});
  CHECK(longs(std::get<1>(forge::topk(y, 2, 0, false))) == std::vector<std::int64_t>{4, 5});
}

TEST_CASE("topk: along dim 0 of a transposed input, of a 0-d tensor, k = 0", "[sort]") {
  TestContext ctx;
  // (A constant {a, a, 0, 0} of int64 is miscompiled by GCC 12.2 at -O3 -march=native into
  // {a, a, a, a}: the data below keeps the expected indices off that pattern.)
  const Tensor x = ctx.from_vector<std::int32_t>({4, 1, 9, 7, 8, 3}, {2, 3}).t();  // [[4, 7], [1, 8], [9, 3]]
  const auto [v, i] = forge::topk(x, 2, 0);
  CHECK(doubles(v) == std::vector<double>{9, 8, 4, 7});
  CHECK(longs(i) == std::vector<std::int64_t>{2, 1, 0, 0});
  const auto [sv, si] = forge::topk(ctx.full({}, 3.0), 1);
  CHECK(sv.item<float>() == 3.0f);
  CHECK(si.item<std::int64_t>() == 0);
  const auto [zv, zi] = forge::topk(x, 0, 1);
  CHECK(zv.shape() == Shape{3, 0});
  CHECK(zi.shape() == Shape{3, 0});
}

// ---- _into forms ----

TEST_CASE("sort: topk_into, sort_into and argsort_into write strided outputs and match the allocating forms",
          "[sort]") {
  TestContext ctx;
  const Tensor x = tied_values(ctx, 5, 30, DType::f32, 3);
  // Outputs as transposed views of [k, 5] buffers.
  Tensor tv = ctx.zeros({4, 5}).t(), ti = ctx.zeros({4, 5}, DType::i64).t();
  forge::topk_into(tv, ti, x, 4, 1, true, true);
  const auto [v, i] = forge::topk(x, 4, 1);
  CHECK(longs(ti) == longs(i));
  const std::vector<double> a = doubles(tv), b = doubles(v);
  for (std::size_t j = 0; j < a.size(); ++j) CHECK(same(a[j], b[j]));

  Tensor sv = ctx.zeros({30, 5}).t(), si = ctx.zeros({30, 5}, DType::i64).t();
  forge::sort_into(sv, si, x, 1, true);
  CHECK(longs(si) == longs(std::get<1>(forge::sort(x, 1, true))));
  Tensor ai = ctx.zeros({5, 30}, DType::i64);
  forge::argsort_into(ai, x, -1, true, true);
  CHECK(longs(ai) == longs(si));
}

// ---- errors ----

TEST_CASE("sort: bad dims, k out of range and wrong outputs are refused, naming the op and the values", "[sort]") {
  TestContext ctx;
  const Tensor x = ctx.randn({3, 4});
  FORGE_REQUIRE_ERROR(out_of_range, "sort", (void)forge::sort(x, 2));
  FORGE_REQUIRE_ERROR(out_of_range, "argsort", (void)forge::argsort(x, -3));
  FORGE_REQUIRE_ERROR(out_of_range, "topk", (void)forge::topk(x, 2, 5));
  const std::string big = FORGE_REQUIRE_ERROR(out_of_range, "topk", (void)forge::topk(x, 5));
  CHECK(big.find("k = 5") != std::string::npos);
  CHECK(big.find("size 4") != std::string::npos);
  FORGE_REQUIRE_ERROR(out_of_range, "topk", (void)forge::topk(x, -1));
  FORGE_REQUIRE_ERROR(out_of_range, "topk", (void)forge::topk(ctx.full({}, 1.0), 2));
  FORGE_REQUIRE_ERROR(invalid_argument, "topk", (void)forge::topk(Tensor(), 1));

  Tensor v = ctx.zeros({3, 2}), i = ctx.zeros({3, 2}, DType::i64);
  Tensor wrong_shape = ctx.zeros({3, 3}), wrong_dtype = ctx.zeros({3, 2}, DType::i32);
  FORGE_REQUIRE_ERROR(shape, "topk_into", forge::topk_into(wrong_shape, i, x, 2));
  FORGE_REQUIRE_ERROR(dtype, "topk_into", forge::topk_into(v, wrong_dtype, x, 2));
  Tensor y = ctx.randn({3, 4});
  Tensor view = y.narrow(1, 0, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "topk_into", forge::topk_into(view, i, y, 2));  // out overlaps x
  Tensor si = ctx.zeros({3, 4}, DType::i64);
  FORGE_REQUIRE_ERROR(shape, "sort_into", forge::sort_into(v, si, x));
  Tensor needs_grad = ctx.randn({3, 4}).requires_grad_();
  Tensor sv = ctx.zeros({3, 4});
  FORGE_REQUIRE_ERROR(backward, "sort_into", forge::sort_into(sv, si, needs_grad));
  Tensor ai = ctx.zeros({3, 4}, DType::i32);
  FORGE_REQUIRE_ERROR(dtype, "argsort_into", forge::argsort_into(ai, x));
}

TEST_CASE("sort: an empty kernel entry says the op is not supported on the device", "[sort]") {
  TestContext ctx(forge_test::context_options(1));
  forge::backend::Kernels table = *forge::backend::cpu_backend().kernels;
  table.sort.topk = {};
  ctx.runtime().host().replace_kernels_for_testing(&table);
  const Tensor x = ctx.randn({2, 5});
  const std::string message = FORGE_REQUIRE_ERROR(device, "topk", (void)forge::topk(x, 2));
  CHECK(message.find("not supported on cpu") != std::string::npos);
  CHECK(message.find("f32") != std::string::npos);
  CHECK(longs(std::get<1>(forge::sort(x))).size() == 10);  // the other entries still run
  ctx.runtime().host().replace_kernels_for_testing(nullptr);
  CHECK(std::get<1>(forge::topk(x, 2)).shape() == Shape{2, 2});
}

// ---- gradients ----

TEST_CASE("sort: gradients of topk and sort values flow back to the selected positions", "[sort]") {
  TestContext ctx;
  using In = std::vector<Tensor>;
  const auto leaf = [&] {
    Tensor x = ctx.randn({5, 4}, DType::f64).t();  // [4, 5], strided
    x.requires_grad_();
    return x;
  };
  for (const bool largest : {true, false}) {
    forge_test::check_gradients([&](const In& in) { return std::get<0>(forge::topk(in[0], 2, 1, largest)); }, {leaf()});
    forge_test::check_gradients([&](const In& in) { return std::get<0>(forge::topk(in[0], 3, 0, largest, false)); },
                                {leaf()});
    forge_test::check_gradients([&](const In& in) { return std::get<0>(forge::sort(in[0], 0, largest)); }, {leaf()});
    forge_test::check_gradients([&](const In& in) { return std::get<0>(forge::sort(in[0], -1, largest)); }, {leaf()});
  }
  // Hand-derived: the weights of the outputs land where the indices point.
  Tensor x = ctx.from_vector<double>({3, 1, 2, 5}).requires_grad_();
  const auto [v, i] = forge::topk(x, 2);  // 5 (3), 3 (0)
  (v * ctx.from_vector<double>({10, 20})).sum().backward();
  CHECK(doubles(x.grad()) == std::vector<double>{20, 0, 0, 10});
  CHECK(!i.requires_grad());
  CHECK(!forge::argsort(x).requires_grad());
}

// ---- searchsorted ----

TEST_CASE("searchsorted: left and right bounds into a 1-D sequence, hand-derived, i64 and i32", "[sort]") {
  TestContext ctx;
  const Tensor seq = ctx.from_vector<double>({1, 3, 3, 5, 7});
  const Tensor values = ctx.from_vector<double>({0, 1, 3, 4, 7, 8, kNaN}, {7});
  CHECK(longs(forge::searchsorted(seq, values)) == std::vector<std::int64_t>{0, 0, 1, 3, 4, 5, 5});
  CHECK(longs(forge::searchsorted(seq, values, true)) == std::vector<std::int64_t>{0, 1, 3, 3, 5, 5, 5});
  const Tensor i32 = forge::searchsorted(seq, values.reshape({7, 1}), false, true);
  CHECK(i32.dtype() == DType::i32);
  CHECK(i32.shape() == Shape{7, 1});
  CHECK(longs(i32) == std::vector<std::int64_t>{0, 0, 1, 3, 4, 5, 5});
  const Tensor scalar = forge::searchsorted(seq, ctx.full({}, 4.0, DType::f64));
  CHECK(scalar.dim() == 0);
  CHECK(scalar.item<std::int64_t>() == 3);
}

TEST_CASE("searchsorted: a batched sequence, strided operands and _into, integer dtypes", "[sort]") {
  TestContext ctx;
  // Rows [0, 2, 4, 6] and [10, 20, 30, 40], stored transposed.
  const Tensor seq = ctx.from_vector<std::int32_t>({0, 10, 2, 20, 4, 30, 6, 40}, {4, 2}).t();
  const Tensor values =
      ctx.from_vector<std::int32_t>({3, 25, 6, 40, -1, 99}, {3, 2}).t();  // [[3, 6, -1], [25, 40, 99]]
  CHECK(longs(forge::searchsorted(seq, values)) == std::vector<std::int64_t>{2, 3, 0, 2, 3, 4});
  Tensor out = ctx.zeros({3, 2}, DType::i32).t();
  forge::searchsorted_into(out, seq, values, true);
  CHECK(longs(out) == std::vector<std::int64_t>{2, 4, 0, 2, 4, 4});
  const Tensor u8 = ctx.from_vector<std::uint8_t>({1, 1, 2, 250});
  CHECK(longs(forge::searchsorted(u8, ctx.from_vector<std::uint8_t>({1, 255}), true)) ==
        std::vector<std::int64_t>{2, 4});
}

TEST_CASE("searchsorted: mismatched dtypes and leading dims, and bad outputs, are refused", "[sort]") {
  TestContext ctx;
  const Tensor seq = ctx.from_vector<float>({1, 2, 3, 4}, {2, 2});
  FORGE_REQUIRE_ERROR(dtype, "searchsorted", (void)forge::searchsorted(seq, ctx.zeros({2, 3}, DType::f64)));
  FORGE_REQUIRE_ERROR(shape, "searchsorted", (void)forge::searchsorted(seq, ctx.zeros({3, 3})));
  FORGE_REQUIRE_ERROR(shape, "searchsorted", (void)forge::searchsorted(seq, ctx.zeros({3})));
  FORGE_REQUIRE_ERROR(shape, "searchsorted", (void)forge::searchsorted(ctx.full({}, 1.0), ctx.zeros({3})));
  Tensor f32_out = ctx.zeros({2, 3});
  FORGE_REQUIRE_ERROR(dtype, "searchsorted_into", forge::searchsorted_into(f32_out, seq, ctx.zeros({2, 3})));
  Tensor small = ctx.zeros({2, 2}, DType::i64);
  FORGE_REQUIRE_ERROR(shape, "searchsorted_into", forge::searchsorted_into(small, seq, ctx.zeros({2, 3})));
}

// ---- multinomial ----

TEST_CASE("multinomial: with replacement, 20000 draws over 6 categories pass a chi-square test at p = 0.001",
          "[sort]") {
  TestContext ctx(forge_test::context_options(2, 1234));
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.15, 0.05, 0.2};
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    // Unnormalised weights (x 3): only the ratios matter.
    std::vector<double> w;
    for (double q : p) w.push_back(3 * q);
    const Tensor probs = ctx.from_vector(w).to(dtype);
    const std::int64_t draws = 20000;
    const Tensor s = forge::multinomial(probs, draws, true);
    REQUIRE(s.shape() == Shape{draws});
    REQUIRE(s.dtype() == DType::i64);
    std::vector<std::int64_t> counts(6, 0);
    for (const std::int64_t c : longs(s)) {
      REQUIRE(c >= 0);
      REQUIRE(c < 6);
      ++counts[static_cast<std::size_t>(c)];
    }
    // bf16 rounds the weights: test against what it holds.
    std::vector<double> held = doubles(probs);
    const double total = std::accumulate(held.begin(), held.end(), 0.0);
    for (double& q : held) q /= total;
    INFO(forge::dtype_name(dtype));
    CHECK(chi_square(counts, held, draws) < kChiSquare999.at(5));
  }
}

TEST_CASE("multinomial: rows of a batch draw from their own weights, and zero weights are never drawn", "[sort]") {
  TestContext ctx(forge_test::context_options(1, 99));
  // Row 0 only category 2; row 1 categories 0 and 3 in ratio 1:3; row 2 uniform over 4.
  const Tensor probs = ctx.from_vector<float>({0, 0, 5, 0, 1, 0, 0, 3, 1, 1, 1, 1}, {3, 4});
  const std::int64_t draws = 8000;
  const std::vector<std::int64_t> s = longs(forge::multinomial(probs, draws, true));
  std::vector<std::vector<std::int64_t>> counts(3, std::vector<std::int64_t>(4, 0));
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t j = 0; j < draws; ++j)
      ++counts[static_cast<std::size_t>(r)][static_cast<std::size_t>(s[static_cast<std::size_t>(r * draws + j)])];
  CHECK(counts[0] == std::vector<std::int64_t>{0, 0, draws, 0});
  CHECK(counts[1][1] == 0);
  CHECK(counts[1][2] == 0);
  CHECK(chi_square({counts[1][0], counts[1][3]}, {0.25, 0.75}, draws) < 10.828);  // 1 dof
  CHECK(chi_square(counts[2], {0.25, 0.25, 0.25, 0.25}, draws) < kChiSquare999.at(3));
  // A single draw per row takes the scanning path.
  const Tensor one = forge::multinomial(probs.t().contiguous().t(), 1, true);
  CHECK(one.shape() == Shape{3, 1});
  CHECK(longs(one)[0] == 2);
}

TEST_CASE("multinomial: without replacement never repeats, and first draws follow the weights", "[sort]") {
  TestContext ctx(forge_test::context_options(1, 5));
  const std::vector<double> p = {0.4, 0.1, 0.2, 0.3};
  const Tensor probs = ctx.from_vector<double>({4, 1, 2, 3, 0, 0, 7, 1}, {2, 4});
  const std::int64_t trials = 4000;
  std::vector<std::int64_t> first(4, 0);
  for (std::int64_t t = 0; t < trials; ++t) {
    const std::vector<std::int64_t> s = longs(forge::multinomial(probs, 2, false));
    CHECK(s[0] != s[1]);
    CHECK(((s[2] == 2 && s[3] == 3) || (s[2] == 3 && s[3] == 2)));  // the two positive weights of row 1
    ++first[static_cast<std::size_t>(s[0])];
  }
  CHECK(chi_square(first, p, trials) < kChiSquare999.at(3));
  // All of a row: a permutation of the categories.
  const Tensor big = ctx.rand({3, 50}, DType::f64);
  const std::vector<std::int64_t> all = longs(forge::multinomial(big, 50, false));
  for (int r = 0; r < 3; ++r) {
    std::vector<std::int64_t> row(all.begin() + r * 50, all.begin() + (r + 1) * 50);
    std::sort(row.begin(), row.end());
    std::vector<std::int64_t> want(50);
    std::iota(want.begin(), want.end(), 0);
    CHECK(row == want);
  }
}

TEST_CASE("multinomial: a seed reproduces the draws, and multinomial_into writes a strided out", "[sort]") {
  TestContext ctx(forge_test::context_options(1, 42));
  const Tensor probs = ctx.rand({4, 300});
  ctx.manual_seed(7);
  const std::vector<std::int64_t> a = longs(forge::multinomial(probs, 5, false));
  const std::vector<std::int64_t> a1 = longs(forge::multinomial(probs, 1, true));
  ctx.manual_seed(7);
  CHECK(longs(forge::multinomial(probs, 5, false)) == a);
  CHECK(longs(forge::multinomial(probs, 1, true)) == a1);
  ctx.manual_seed(8);
  CHECK(longs(forge::multinomial(probs, 5, false)) != a);
  ctx.manual_seed(7);
  Tensor out = ctx.zeros({5, 4}, DType::i64).t();
  forge::multinomial_into(out, probs, 5, false);
  CHECK(longs(out) == a);
}

TEST_CASE("multinomial: bad weights and sample counts are refused without drawing", "[sort]") {
  TestContext ctx(forge_test::context_options(1, 3));
  const auto refuse = [&](std::vector<float> w, std::int64_t n, bool replacement, const char* says) {
    const Tensor probs = ctx.from_vector(w, {2, static_cast<std::int64_t>(w.size()) / 2});
    const std::string m =
        FORGE_REQUIRE_ERROR(invalid_argument, "multinomial", (void)forge::multinomial(probs, n, replacement));
    CHECK(m.find(says) != std::string::npos);
  };
  refuse({1, 1, 1, -0.5f}, 1, true, "weight -0.5 at category 1");
  refuse({1, NAN, 1, 1}, 1, true, "weight nan at category 1");
  refuse({1, 1, INFINITY, 1}, 1, true, "row 1 has weight inf");
  refuse({1, 1, 0, 0}, 1, true, "row 1 sums to 0");
  refuse({1, 1, 0, 2}, 2, false, "row 1 has 1 positive weights, fewer than the 2 samples");
  refuse({1, 1, 1, 1}, 3, false, "cannot draw 3 samples without replacement from 2 categories");
  refuse({1, 1, 1, 1}, 0, true, "num_samples must be positive");
  FORGE_REQUIRE_ERROR(dtype, "multinomial", (void)forge::multinomial(ctx.ones({4}, DType::i64), 1));
  FORGE_REQUIRE_ERROR(shape, "multinomial", (void)forge::multinomial(ctx.ones({2, 2, 2}), 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "multinomial", (void)forge::multinomial(ctx.ones({2, 0}), 1, true));
  Tensor wrong = ctx.zeros({2, 2}, DType::i32);
  FORGE_REQUIRE_ERROR(dtype, "multinomial_into", forge::multinomial_into(wrong, ctx.ones({2, 4}), 2));
  // A refused call leaves the generator as it was.
  const Tensor good = ctx.ones({6});
  ctx.manual_seed(1);
  const std::vector<std::int64_t> want = longs(forge::multinomial(good, 3, true));
  ctx.manual_seed(1);
  FORGE_REQUIRE_ERROR(invalid_argument, "multinomial",
                      (void)forge::multinomial(ctx.from_vector<float>({1, 1, 0, 0, 0, -1}, {2, 3}), 1, true));
  CHECK(longs(forge::multinomial(good, 3, true)) == want);
}

// ---- randint / randperm ----

TEST_CASE("randint: values cover low to high - 1 evenly in the asked dtype, and a seed reproduces them", "[sort]") {
  TestContext ctx(forge_test::context_options(1, 17));
  const Tensor r = ctx.randint(-3, 7, {10000}, DType::i32);
  CHECK(r.dtype() == DType::i32);
  std::vector<std::int64_t> counts(10, 0);
  for (const std::int64_t v : longs(r)) {
    REQUIRE(v >= -3);
    REQUIRE(v < 7);
    ++counts[static_cast<std::size_t>(v + 3)];
  }
  CHECK(chi_square(counts, std::vector<double>(10, 0.1), 10000) < kChiSquare999.at(9));
  CHECK(forge::randint(0, 10, {3, 4}).dtype() == DType::i64);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16, DType::u8, DType::boolean, DType::f64}) {
    const std::vector<double> v = doubles(ctx.randint(0, 2, {200}, dtype));
    CHECK(std::all_of(v.begin(), v.end(), [](double x) { return x == 0 || x == 1; }));
    CHECK(std::count(v.begin(), v.end(), 1.0) > 50);
  }
  const std::vector<double> wide =
      doubles(ctx.randint(-(std::int64_t{1} << 62), std::int64_t{1} << 62, {64}, DType::i64));
  CHECK(std::any_of(wide.begin(), wide.end(), [](double x) { return std::abs(x) > 1e17; }));
  ctx.manual_seed(3);
  const std::vector<std::int64_t> a = longs(ctx.randint(0, 1000, {50}));
  ctx.manual_seed(3);
  CHECK(longs(ctx.randint(0, 1000, {50})) == a);
  FORGE_REQUIRE_ERROR(invalid_argument, "randint", (void)ctx.randint(5, 5, {2}));
  FORGE_REQUIRE_ERROR(out_of_range, "randint", (void)ctx.randint(0, 257, {2}, DType::u8));
  FORGE_REQUIRE_ERROR(out_of_range, "randint", (void)ctx.randint(-1, 1, {2}, DType::u8));
  FORGE_REQUIRE_ERROR(out_of_range, "randint", (void)ctx.randint(-129, 0, {2}, DType::i8));
  FORGE_REQUIRE_ERROR(out_of_range, "randint", (void)ctx.randint(0, 129, {2}, DType::i8));
  const std::vector<std::int64_t> bytes = longs(ctx.randint(-128, 128, {4000}, DType::i8));
  CHECK(*std::min_element(bytes.begin(), bytes.end()) == -128);
  CHECK(*std::max_element(bytes.begin(), bytes.end()) == 127);
  FORGE_REQUIRE_ERROR(out_of_range, "randint", (void)ctx.randint(0, 4000, {2}, DType::f16));
}

TEST_CASE("randperm: a permutation of 0..n-1 in the asked dtype, reproducible under a seed", "[sort]") {
  TestContext ctx(forge_test::context_options(1, 23));
  for (const std::int64_t n : {0, 1, 2, 1000}) {
    const Tensor p = ctx.randperm(n);
    CHECK(p.shape() == Shape{n});
    CHECK(p.dtype() == DType::i64);
    std::vector<std::int64_t> v = longs(p);
    std::sort(v.begin(), v.end());
    std::vector<std::int64_t> want(static_cast<std::size_t>(n));
    std::iota(want.begin(), want.end(), 0);
    CHECK(v == want);
  }
  const std::vector<std::int64_t> shuffled = longs(ctx.randperm(1000));
  CHECK(!std::is_sorted(shuffled.begin(), shuffled.end()));
  std::vector<double> f = doubles(forge::randperm(300, DType::f16));
  std::sort(f.begin(), f.end());
  for (std::size_t i = 0; i < f.size(); ++i) CHECK(f[i] == static_cast<double>(i));
  ctx.manual_seed(9);
  const std::vector<std::int64_t> a = longs(ctx.randperm(64));
  ctx.manual_seed(9);
  CHECK(longs(ctx.randperm(64)) == a);
  FORGE_REQUIRE_ERROR(invalid_argument, "randperm", (void)ctx.randperm(-1));
  FORGE_REQUIRE_ERROR(out_of_range, "randperm", (void)ctx.randperm(300, DType::u8));
  FORGE_REQUIRE_ERROR(out_of_range, "randperm", (void)ctx.randperm(129, DType::i8));
  std::vector<std::int64_t> p8 = longs(ctx.randperm(128, DType::i8));
  std::sort(p8.begin(), p8.end());
  CHECK(p8.front() == 0);
  CHECK(p8.back() == 127);
  CHECK(std::adjacent_find(p8.begin(), p8.end()) == p8.end());
}
