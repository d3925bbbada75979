// matmul, mm, bmm, linear, addmm, outer and dot against naive triple loops
// written here (NumPy's matmul rules restated by hand, f64 accumulation),
// with a per-dtype tolerance relative to the sum of |a_ik * b_kj|: inputs are
// read back through their own strides, so the reference sees exactly what
// the op saw. Covers 1-D operands, broadcast batch dims, zero-size dims (k = 0
// gives zeros), transposed, sliced, permuted and expanded views, outputs
// written through views, the parallel paths and every error path.

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/sgemm.h"
#include "format16.h"
#include "support.h"

namespace {

using forge::DType;
using forge::ErrorCode;
using forge::Shape;
using forge::Tensor;
using forge_test::kFloatDTypes;
using forge_test::TestContext;
using Index = std::vector<std::int64_t>;

// Relative to sum |a_ik b_kj| (plus |result|): f32 accumulation over k terms
// and, for 16-bit dtypes, one final rounding.
double tolerance(DType t) {
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
  std::vector<double> value, magnitude;  // row-major over shape
};

Index unravel(std::int64_t i, const Index& dims) {
  Index idx(dims.size());
  for (std::size_t d = dims.size(); d-- > 0;) {
    idx[d] = dims[d] == 0 ? 0 : i % dims[d];
    if (dims[d]) i /= dims[d];
  }
  return idx;
}

// Row-major offset of the batch index `idx` (right-aligned) inside dims,
// where a dim of size 1 broadcasts.
std::int64_t batch_offset(const Index& idx, const Index& dims) {
  std::int64_t off = 0;
  const std::size_t lead = idx.size() - dims.size();
  for (std::size_t d = 0; d < dims.size(); ++d) off = off * dims[d] + (dims[d] == 1 ? 0 : idx[lead + d]);
  return off;
}

// NumPy matmul: 1-D operands promoted (a to a row, b to a column) and the
// added dim dropped; batch dims broadcast.
Expected reference_matmul(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  Index as(a.shape().begin(), a.shape().end()), bs(b.shape().begin(), b.shape().end());
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  const std::int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  REQUIRE(bs[bs.size() - 2] == k);
  const Index ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Index batch(std::max(ab.size(), bb.size()), 1);
  for (std::size_t d = 0; d < batch.size(); ++d) {
    const std::size_t from_end = batch.size() - d;
    const std::int64_t x = from_end <= ab.size() ? ab[ab.size() - from_end] : 1;
    const std::int64_t y = from_end <= bb.size() ? bb[bb.size() - from_end] : 1;
    REQUIRE((x == y || x == 1 || y == 1));
    batch[d] = x == 1 ? y : x;
  }
  Expected e;
  for (auto d : batch) e.shape.push_back(d);
  if (!a_vec) e.shape.push_back(m);
  if (!b_vec) e.shape.push_back(n);
  std::int64_t batches = 1;
  for (auto d : batch) batches *= d;
  for (std::int64_t bi = 0; bi < batches; ++bi) {
    const Index idx = unravel(bi, batch);
    const double* pa = av.data() + batch_offset(idx, ab) * m * k;
    const double* pb = bv.data() + batch_offset(idx, bb) * k * n;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          s += pa[i * k + p] * pb[p * n + j];
          mag += std::abs(pa[i * k + p] * pb[p * n + j]);
        }
        e.value.push_back(s);
        e.magnitude.push_back(mag);
      }
  }
  return e;
}

void check_close(const Tensor& got, const Expected& e, DType dtype) {
  REQUIRE(got.shape() == e.shape);
  REQUIRE(got.dtype() == dtype);
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == e.value.size());
  const double tol = tolerance(dtype);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double limit = tol * (e.magnitude[i] + std::abs(e.value[i])) + 1e-30;
    if (!(std::abs(v[i] - e.value[i]) <= limit)) {
      if (bad++ < 5) FAIL_CHECK("element " << i << ": got " << v[i] << ", expected " << e.value[i] << " +- " << limit);
    }
  }
  CHECK(bad == 0);
}

// a + bias-like reference: beta * bias (broadcast to e.shape) + alpha * e.
Expected with_bias(Expected e, const Tensor& bias, double beta, double alpha) {
  const std::vector<double> bv = bias.to_vector<double>();
  const Index bs(bias.shape().begin(), bias.shape().end());
  const Index os(e.shape.begin(), e.shape.end());
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    const Index idx = unravel(static_cast<std::int64_t>(i), os);
    const double b = beta == 0 ? 0 : beta * bv[static_cast<std::size_t>(batch_offset(idx, bs))];
    e.value[i] = b + alpha * e.value[i];
    e.magnitude[i] = std::abs(b) + std::abs(alpha) * e.magnitude[i];
  }
  return e;
}

Tensor transposed_of(TestContext& ctx, const Shape& shape, DType t) {  // a [r, c] view with strides (1, r)
  return ctx.randn({shape[1], shape[0]}, t).t();
}

struct Case {
  Shape a, b;
};

TEST_CASE("linalg: matmul matches naive loops on 1-D, batched, broadcast and zero-size shapes, in every float dtype",
          "[linalg]") {
  TestContext ctx;
  const Case cases[] = {
      {{5}, {5}},
      {{3, 4}, {4}},
      {{4}, {4, 6}},
      {{2, 3, 4}, {4}},
      {{4}, {2, 4, 5}},
      {{1, 1}, {1, 1}},
      {{2, 1, 3, 4}, {5, 4, 6}},
      {{3, 4}, {2, 4, 6}},
      {{7, 1, 4}, {1, 4, 2}},
      {{0, 4}, {4, 3}},
      {{3, 0}, {0, 5}},
      {{2, 0, 3, 4}, {4, 5}},
      {{0}, {0}},
      {{2, 3, 0}, {2, 0, 4}},
      {{3, 2, 5}, {3, 5, 0}},
      {{2, 130, 70}, {70, 90}},
      {{4, 64, 48}, {4, 48, 40}},
      {{300, 200}, {200, 260}},
      {{1, 300}, {300, 500}},
      {{600, 100}, {100}},
  };
  for (DType t : kFloatDTypes) {
    for (const Case& c : cases) {
      INFO(forge::dtype_name(t) << " " << c.a << " @ " << c.b);
      const Tensor a = ctx.randn(c.a, t), b = ctx.randn(c.b, t);
      const Tensor out = forge::matmul(a, b);
      CHECK(out.is_contiguous());
      check_close(out, reference_matmul(a, b), t);
    }
  }
}

TEST_CASE("linalg: k = 0 gives zeros, even over a NaN-filled out", "[linalg]") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    const Tensor a = ctx.randn({3, 0}, t), b = ctx.randn({0, 4}, t);
    const Tensor r = forge::matmul(a, b);
    CHECK(r.shape() == Shape{3, 4});
    for (double v : r.to_vector<double>()) CHECK(v == 0.0);
    Tensor out = ctx.full({3, 4}, std::numeric_limits<double>::quiet_NaN(), t);
    forge::mm_into(out, a, b);
    for (double v : out.to_vector<double>()) CHECK(v == 0.0);
  }
}

TEST_CASE("linalg: operands are read through their strides (transposed, sliced, permuted, expanded)", "[linalg]") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor at = transposed_of(ctx, {9, 6}, t);                                 // strides (1, 9)
    const Tensor bs = ctx.randn({6, 20}, t).slice(1, 0, 20, 3);                      // [6, 7], strides (20, 3)
    const Tensor ag = ctx.randn({18, 20}, t).slice(0, 0, 18, 2).slice(1, 1, 13, 2);  // [9, 6], strides (40, 2)
    const Tensor bt = transposed_of(ctx, {6, 7}, t);
    check_close(forge::matmul(at, bs), reference_matmul(at, bs), t);
    check_close(forge::matmul(ag, bt), reference_matmul(ag, bt), t);
    check_close(forge::matmul(at, bt), reference_matmul(at, bt), t);
    check_close(forge::matmul(ag, bs), reference_matmul(ag, bs), t);
    const Tensor ap = ctx.randn({4, 2, 5}, t).permute({1, 0, 2});  // [2, 4, 5], batch stride 5
    const Tensor be = ctx.randn({1, 5, 3}, t).expand({2, 5, 3});   // batch stride 0
    check_close(forge::matmul(ap, be), reference_matmul(ap, be), t);
    const Tensor row = ctx.randn({5, 4}, t).select(1, 2);  // 1-D, stride 4
    check_close(forge::matmul(row, be), reference_matmul(row, be), t);
    check_close(forge::matmul(ap, row), reference_matmul(ap, row), t);
    // Large enough for the threaded split, with a transposed right operand.
    const Tensor big_a = ctx.randn({257, 130}, t), big_b = transposed_of(ctx, {130, 190}, t);
    check_close(forge::matmul(big_a, big_b), reference_matmul(big_a, big_b), t);
  }
}

// An [r, c] operand in one of four layouts: row-major, column-major
// (a transposed view), every other column of a wider row-major block, or
// every other row of a taller column-major block.
Tensor operand(TestContext& ctx, std::int64_t r, std::int64_t c, int layout, DType t) {
  switch (layout % 4) {
    case 0:
      return ctx.randn({r, c}, t);
    case 1:
      return transposed_of(ctx, {r, c}, t);
    case 2:
      return ctx.randn({r, 2 * c}, t).slice(1, 0, 2 * c, 2);
    default:
      return ctx.randn({c, 2 * r}, t).t().slice(0, 0, 2 * r, 2);
  }
}

// The f32 and bf16 GEMMs' edges: each dimension swept over 1..67 (every
// row- and column-tail of the micro-tiles, the f32 kernel's m <= 16 direct
// and dot modes, odd k for bf16's pairs, and a block boundary at m = 64),
// all 16 pairs of operand layouts, then sizes that cross the k, n and
// row-block boundaries and the threaded split; beta 0, 1 and otherwise
// through addmm. One and two threads.
TEST_CASE("linalg: f32 and bf16 GEMMs sweep odd sizes 1-67 in every dimension and layout against f64",
          "[linalg][gemm]") {
  for (const auto& [threads, t] :
       std::vector<std::pair<int, DType>>{{1, DType::f32}, {2, DType::f32}, {1, DType::bf16}, {2, DType::bf16}}) {
    INFO(threads << " thread(s), " << forge::dtype_name(t));
    TestContext ctx(forge_test::context_options(threads));
    std::mt19937 rng(7);
    const auto other = [&] { return static_cast<std::int64_t>(1 + rng() % 67); };
    const auto check = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
      for (int layout = 0; layout < 16; ++layout) {
        INFO("m " << m << " n " << n << " k " << k << " layouts " << layout % 4 << ", " << layout / 4);
        const Tensor a = operand(ctx, m, k, layout % 4, t), b = operand(ctx, k, n, layout / 4, t);
        check_close(forge::matmul(a, b), reference_matmul(a, b), t);
      }
    };
    for (std::int64_t s = 1; s <= 67; ++s) {
      check(s, other(), other());
      check(other(), s, other());
      check(other(), other(), s);
      check(s % 17 + 1, other(), 64 + s);  // flat products with k long enough for the dot mode
    }
    for (const auto& [m, n, k] : std::vector<std::array<std::int64_t, 3>>{
             {70, 800, 600}, {9, 13, 300}, {16, 1000, 1030}, {3, 97, 2000}, {129, 50, 513}, {1, 770, 70}})
      check(m, n, k);
    for (const double beta : {0.0, 1.0, -0.5}) {
      const Tensor bias = ctx.randn({45, 53}, t), a = operand(ctx, 45, 70, 1, t), b = operand(ctx, 70, 53, 2, t);
      check_close(forge::addmm(bias, a, b, beta, 0.75), with_bias(reference_matmul(a, b), bias, beta, 0.75), t);
    }
  }
}

// At most 4 rows against a row-major B of a million elements or more, f32
// reads B's rows whole (Note [flat products along B's rows]): every row
// count, A in each layout, k past the last whole group of 4 rows, n past
// the last whole vector and past one block of C's columns, a C whose rows
// are further apart than n, and beta 0 (over NaN), 1 and otherwise.
TEST_CASE("linalg: flat f32 products over a large row-major B match f64 through every path of the row stream",
          "[linalg][gemm]") {
  for (int threads : {1, 2}) {
    TestContext ctx(forge_test::context_options(threads));
    // On two threads C's columns are split first, and the rows mode needs a
    // million elements of B per thread: 4096 x 523 gives each half that.
    for (const auto& [n, k] :
         std::vector<std::array<std::int64_t, 2>>{{1029, 1023}, {8200, 130}, {1024, 1025}, {4096, 523}}) {
      for (std::int64_t m = 1; m <= 4; ++m) {
        const Tensor b = ctx.randn({k, n});
        for (int layout = 0; layout < 4; ++layout) {
          INFO(threads << " thread(s), m " << m << " n " << n << " k " << k << " layout " << layout);
          const Tensor a = operand(ctx, m, k, layout, DType::f32);
          const Expected e = reference_matmul(a, b);
          check_close(forge::matmul(a, b), e, DType::f32);
          Tensor out = ctx.empty({m, n + 40}).slice(1, 0, n);
          check_close(forge::matmul_into(out, a, b), e, DType::f32);
        }
        const Tensor a = operand(ctx, m, k, 0, DType::f32);
        const Expected e = reference_matmul(a, b);
        const Tensor nan_bias = ctx.full({m, n}, std::numeric_limits<double>::quiet_NaN());
        check_close(forge::addmm(nan_bias, a, b, 0, 0.75), with_bias(e, nan_bias, 0, 0.75), DType::f32);
        for (const double beta : {1.0, -0.5}) {
          const Tensor bias = ctx.randn({m, n});
          check_close(forge::addmm(bias, a, b, beta, 0.75), with_bias(e, bias, beta, 0.75), DType::f32);
        }
      }
    }
  }
}

// matmul and addmm give sgemm beta 0 or 1 only (addmm folds its beta into
// the bias it writes first), so beta 0 over a NaN-filled C and any other
// beta, which the rows mode applies in a pass of its own, are checked on
// sgemm itself, at the sizes that reach that mode.
TEST_CASE("linalg: sgemm's rows mode ignores C at beta 0 and scales it by any other beta", "[linalg][gemm]") {
  if (!forge::cpu::sgemm_available()) return;  // the FORGE_NATIVE=OFF build has no sgemm: Eigen takes every product
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (const auto& [m, n, k] :
       std::vector<std::array<std::int64_t, 3>>{{1, 1029, 1023}, {3, 2051, 515}, {4, 8200, 130}}) {
    std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
    for (float& v : a) v = normal(rng);
    for (float& v : b) v = normal(rng);
    for (const float beta : {0.0f, 1.0f, -0.5f}) {
      INFO("m " << m << " n " << n << " k " << k << " beta " << beta);
      const std::int64_t ldc = n + 3;
      std::vector<float> c(static_cast<std::size_t>(m * ldc));
      for (float& v : c) v = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : normal(rng);
      const std::vector<float> c0 = c;
      REQUIRE(forge::cpu::sgemm_scratch_floats(m, n, k, k, 1, n, 1) == 0);  // the rows mode takes no scratch
      forge::cpu::sgemm(m, n, k, 0.75f, a.data(), k, 1, b.data(), n, 1, beta, c.data(), ldc, nullptr);
      std::size_t bad = 0;
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < ldc; ++j) {
          const float got = c[static_cast<std::size_t>(i * ldc + j)], old = c0[static_cast<std::size_t>(i * ldc + j)];
          if (j >= n) {  // past the row: untouched
            if (!(got == old || (std::isnan(got) && std::isnan(old)))) ++bad;
            continue;
          }
          double sum = 0, mag = 0;
          for (std::int64_t p = 0; p < k; ++p) {
            const double t =
                static_cast<double>(a[static_cast<std::size_t>(i * k + p)]) * b[static_cast<std::size_t>(p * n + j)];
            sum += t;
            mag += std::abs(t);
          }
          const double want = 0.75 * sum + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * old);
          if (!(std::abs(got - want) <= 1e-5 * (mag + std::abs(want)) + 1e-6) && bad++ < 5)
            FAIL_CHECK("C[" << i << ", " << j << "] = " << got << ", expected " << want);
        }
      CHECK(bad == 0);
    }
  }
}

// An int8 product's result, which must equal the sums exactly (they fit in
// i32 and in f64's mantissa here).
void check_exact(const Tensor& got, const Expected& e) {
  REQUIRE(got.shape() == e.shape);
  REQUIRE(got.dtype() == DType::i32);
  const std::vector<double> v = got.to_vector<double>();
  REQUIRE(v.size() == e.value.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != e.value[i] && bad++ < 5) FAIL_CHECK("element " << i << ": got " << v[i] << ", expected " << e.value[i]);
  CHECK(bad == 0);
}

// Full-range int8 values (u8: 0..255, i8: -128..127) in operand()'s layouts.
Tensor int8_operand(TestContext& ctx, std::int64_t r, std::int64_t c, int layout, DType t) {
  const std::int64_t lo = t == DType::u8 ? 0 : -128;
  const auto draw = [&](const Shape& s) { return ctx.randint(lo, lo + 256, s).to(t); };
  switch (layout % 4) {
    case 0:
      return draw({r, c});
    case 1:
      return draw({c, r}).t();
    case 2:
      return draw({r, 2 * c}).slice(1, 0, 2 * c, 2);
    default:
      return draw({c, 2 * r}).t().slice(0, 0, 2 * r, 2);
  }
}

// The int8 GEMM's edges, as the f32 sweep's: every dimension over 1..67 (k
// not a multiple of the kernel's quads of 4 included), the 16 layout pairs,
// then block-crossing sizes; u8 x i8 and i8 x i8 (whose a is offset by 128
// and corrected by B's column sums), on one and two threads. Exact.
TEST_CASE("linalg: int8 GEMMs (u8 x i8 and i8 x i8 into i32) sweep odd sizes 1-67 in every layout, exactly",
          "[linalg][gemm]") {
  for (const auto& [threads, t] :
       std::vector<std::pair<int, DType>>{{1, DType::u8}, {1, DType::i8}, {2, DType::u8}, {2, DType::i8}}) {
    INFO(threads << " thread(s), a " << forge::dtype_name(t));
    TestContext ctx(forge_test::context_options(threads));
    std::mt19937 rng(11);
    const auto other = [&] { return static_cast<std::int64_t>(1 + rng() % 67); };
    const auto check = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
      for (int layout = 0; layout < 16; ++layout) {
        INFO("m " << m << " n " << n << " k " << k << " layouts " << layout % 4 << ", " << layout / 4);
        const Tensor a = int8_operand(ctx, m, k, layout % 4, t), b = int8_operand(ctx, k, n, layout / 4, DType::i8);
        check_exact(forge::matmul(a, b), reference_matmul(a, b));
      }
    };
    for (std::int64_t s = 1; s <= 67; s += (s < 20 ? 1 : 3)) {
      check(s, other(), other());
      check(other(), s, other());
      check(other(), other(), s);
    }
    for (const auto& [m, n, k] : std::vector<std::array<std::int64_t, 3>>{
             {70, 800, 600}, {9, 13, 2100}, {129, 50, 4099}, {1, 770, 70}, {300, 3, 64}})
      check(m, n, k);
  }
}

TEST_CASE("linalg: int8 products batch, broadcast, write through any out, and sum extremes exactly or wrapped",
          "[linalg][gemm]") {
  TestContext ctx(forge_test::context_options(2));
  for (const DType t : {DType::u8, DType::i8}) {
    INFO("a " << forge::dtype_name(t));
    const std::int64_t lo = t == DType::u8 ? 0 : -128;
    const Tensor a = ctx.randint(lo, lo + 256, {3, 1, 20, 30}).to(t);
    const Tensor b = ctx.randint(-128, 128, {4, 30, 10}).to(DType::i8);
    check_exact(forge::matmul(a, b), reference_matmul(a, b));
    const Tensor x = ctx.randint(lo, lo + 256, {8, 33, 70}).to(t),
                 y = ctx.randint(-128, 128, {8, 70, 40}).to(DType::i8);
    check_exact(forge::bmm(x, y), reference_matmul(x, y));
    check_exact(forge::mm(x.select(0, 1), y.select(0, 2)), reference_matmul(x.select(0, 1), y.select(0, 2)));
    check_exact(forge::matmul(x.select(0, 0).select(0, 3), y.select(0, 0)),
                reference_matmul(x.select(0, 0).select(0, 3), y.select(0, 0)));
    Tensor transposed = ctx.full({8, 40, 33}, 7.0, DType::i32).transpose(1, 2);
    forge::bmm_into(transposed, x, y);
    check_exact(transposed, reference_matmul(x, y));
    Tensor zeros_k = ctx.full({5, 4}, 9.0, DType::i32);
    forge::mm_into(zeros_k, ctx.zeros({5, 0}, t), ctx.zeros({0, 4}, DType::i8));
    CHECK(zeros_k.to_vector<std::int32_t>() == std::vector<std::int32_t>(20, 0));
  }
  // Extremes: every product at its largest magnitude. i8 x i8 at k = 70000
  // sums to 16384 k = 1146880000, which fits; u8 x i8 to -32640 k, which
  // does not, and wraps modulo 2^32 as i32 accumulation does.
  const std::int64_t k = 70000;
  const Tensor i8_min = ctx.full({2, k}, -128.0, DType::i8), w = ctx.full({k, 3}, -128.0, DType::i8);
  CHECK(forge::matmul(i8_min, w).to_vector<std::int32_t>() == std::vector<std::int32_t>(6, 16384 * 70000));
  const Tensor u8_max = ctx.full({2, k}, 255.0, DType::u8);
  const auto wrapped = static_cast<std::int32_t>(static_cast<std::uint32_t>(std::int64_t{-32640} * k));
  CHECK(forge::matmul(u8_max, w).to_vector<std::int32_t>() == std::vector<std::int32_t>(6, wrapped));
}

TEST_CASE("linalg: int8 products refuse other pairings, biases and a non-i32 out", "[linalg]") {
  TestContext ctx;
  const Tensor i8 = ctx.zeros({2, 2}, DType::i8), u8 = ctx.zeros({2, 2}, DType::u8), f = ctx.zeros({2, 2});
  FORGE_REQUIRE_ERROR(dtype, "matmul", (void)forge::matmul(i8, u8));  // b must be i8
  FORGE_REQUIRE_ERROR(dtype, "matmul", (void)forge::matmul(u8, u8));
  FORGE_REQUIRE_ERROR(dtype, "matmul", (void)forge::matmul(i8, f));
  FORGE_REQUIRE_ERROR(dtype, "mm", (void)forge::mm(f, i8));
  FORGE_REQUIRE_ERROR(dtype, "bmm", (void)forge::bmm(u8.view({1, 2, 2}), u8.view({1, 2, 2})));
  FORGE_REQUIRE_ERROR(dtype, "linear", (void)forge::linear(u8, i8));
  FORGE_REQUIRE_ERROR(dtype, "addmm", (void)forge::addmm(ctx.zeros({2}, DType::i32), u8, i8));
  FORGE_REQUIRE_ERROR(dtype, "dot", (void)forge::dot(i8.select(0, 0), i8.select(0, 0)));
  Tensor out_f32 = ctx.zeros({2, 2});
  FORGE_REQUIRE_ERROR(dtype, "matmul_into", (void)forge::matmul_into(out_f32, i8, i8));
  Tensor out_i32 = ctx.zeros({2, 2}, DType::i32);
  CHECK(forge::matmul_into(out_i32, u8, i8).dtype() == DType::i32);
  const std::string message =
      forge_test::expect_error(ErrorCode::dtype, "matmul", [&] { (void)forge::matmul(i8, u8); });
  CHECK(message.find("u8 or i8 a and an i8 b") != std::string::npos);
}

TEST_CASE("linalg: matmul_into writes through transposed and strided outs", "[linalg]") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor a = ctx.randn({2, 5, 7}, t), b = ctx.randn({7, 6}, t);
    const Expected e = reference_matmul(a, b);
    Tensor packed = ctx.empty({2, 5, 6}, t);
    CHECK(&forge::matmul_into(packed, a, b) == &packed);
    check_close(packed, e, t);
    Tensor transposed = ctx.empty({2, 6, 5}, t).transpose(1, 2);  // column-major matrices
    const std::uint32_t v0 = transposed.version();
    forge::matmul_into(transposed, a, b);
    CHECK(transposed.version() != v0);
    check_close(transposed, e, t);
    Tensor stepped = ctx.zeros({2, 5, 12}, t).slice(2, 0, 12, 2);  // no unit stride
    forge::matmul_into(stepped, a, b);
    check_close(stepped, e, t);
    Tensor scalar = ctx.empty({}, t);
    const Tensor x = ctx.randn({9}, t), y = ctx.randn({9}, t);
    forge::matmul_into(scalar, x, y);
    check_close(scalar, reference_matmul(x, y), t);
  }
}

TEST_CASE("linalg: mm, bmm, dot, outer and the Tensor methods match the references", "[linalg]") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor a = ctx.randn({6, 4}, t), b = transposed_of(ctx, {4, 3}, t);
    check_close(forge::mm(a, b), reference_matmul(a, b), t);
    check_close(a.mm(b), reference_matmul(a, b), t);
    check_close(a.matmul(b), reference_matmul(a, b), t);
    const Tensor ba = ctx.randn({3, 6, 4}, t), bb = ctx.randn({3, 4, 5}, t).transpose(1, 2).transpose(1, 2);
    check_close(forge::bmm(ba, bb), reference_matmul(ba, bb), t);
    const Tensor x = ctx.randn({7}, t), y = ctx.randn({14}, t).slice(0, 0, 14, 2);
    const Tensor d = forge::dot(x, y);
    CHECK(d.dim() == 0);
    check_close(d, reference_matmul(x, y), t);
    check_close(x.dot(y), reference_matmul(x, y), t);
    const Tensor z = ctx.randn({5}, t);
    const Tensor o = forge::outer(x, z);
    check_close(o, reference_matmul(x.view({7, 1}), z.view({1, 5})), t);

    Tensor mm_out = ctx.empty({6, 3}, t), bmm_out = ctx.empty({3, 6, 5}, t), dot_out = ctx.empty({}, t),
           outer_out = ctx.empty({7, 5}, t);
    check_close(forge::mm_into(mm_out, a, b), reference_matmul(a, b), t);
    check_close(forge::bmm_into(bmm_out, ba, bb), reference_matmul(ba, bb), t);
    check_close(forge::dot_into(dot_out, x, y), reference_matmul(x, y), t);
    check_close(forge::outer_into(outer_out, x, z), reference_matmul(x.view({7, 1}), z.view({1, 5})), t);
  }
}

TEST_CASE("linalg: linear is x times weight transposed plus bias, for 1-D and batched x", "[linalg]") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor w = ctx.randn({5, 8}, t), bias = ctx.randn({5}, t);
    const Tensor wt_view = transposed_of(ctx, {5, 8}, t);  // a [5, 8] weight stored transposed
    const Tensor inputs[] = {ctx.randn({8}, t), ctx.randn({3, 8}, t), ctx.randn({2, 4, 8}, t),
                             ctx.randn({2, 8, 4}, t).transpose(1, 2), ctx.randn({0, 8}, t)};
    for (const Tensor& x : inputs) {
      INFO("x " << x.shape());
      const Expected plain = reference_matmul(x, w.t());
      check_close(forge::linear(x, w), plain, t);
      check_close(forge::linear(x, w, bias), with_bias(plain, bias, 1, 1), t);
      check_close(forge::linear(x, wt_view, bias), with_bias(reference_matmul(x, wt_view.t()), bias, 1, 1), t);
      Tensor out = ctx.empty(plain.shape, t);
      check_close(forge::linear_into(out, x, w, bias), with_bias(plain, bias, 1, 1), t);
    }
    // Large: one folded GEMM over the batch, split over the threads.
    const Tensor bx = ctx.randn({4, 100, 64}, t), bw = ctx.randn({96, 64}, t), bb = ctx.randn({96}, t);
    check_close(forge::linear(bx, bw, bb), with_bias(reference_matmul(bx, bw.t()), bb, 1, 1), t);
  }
}

TEST_CASE("linalg: addmm scales by beta and alpha and broadcasts its bias", "[linalg]") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor a = ctx.randn({4, 6}, t), b = ctx.randn({6, 5}, t);
    const Expected e = reference_matmul(a, b);
    const Tensor biases[] = {ctx.randn({4, 5}, t), ctx.randn({5}, t), ctx.randn({4, 1}, t), ctx.randn({}, t),
                             ctx.randn({5, 4}, t).t()};
    for (const Tensor& bias : biases) {
      INFO("bias " << bias.shape());
      check_close(forge::addmm(bias, a, b), with_bias(e, bias, 1, 1), t);
      check_close(forge::addmm(bias, a, b, 0.5, -2), with_bias(e, bias, 0.5, -2), t);
      Tensor out = ctx.empty({4, 5}, t);
      check_close(forge::addmm_into(out, bias, a, b, 3, 0.25), with_bias(e, bias, 3, 0.25), t);
    }
    // beta = 0 ignores the bias entirely, NaN included (as libtorch).
    const Tensor nan_bias = ctx.full({4, 5}, std::numeric_limits<double>::quiet_NaN(), t);
    check_close(forge::addmm(nan_bias, a, b, 0, 1), e, t);
  }
}

TEST_CASE("linalg: 16-bit products are exact in f32 and rounded once to nearest even", "[linalg]") {
  TestContext ctx;
  // outer has k = 1: each a_i * b_j is exact in f32, so the result must be
  // that product rounded once, through the vector and the scalar conversions.
  for (DType t : {DType::f16, DType::bf16}) {
    const forge_test::Format16& format = t == DType::f16 ? forge_test::f16_format() : forge_test::bf16_format();
    const Tensor a = ctx.randn({13}, t), b = ctx.randn({41}, t);
    const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
    const std::vector<double> got = forge::outer(a, b).to_vector<double>();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < av.size(); ++i)
      for (std::size_t j = 0; j < bv.size(); ++j)
        if (got[i * bv.size() + j] != format.value(format.round(av[i] * bv[j]))) ++bad;
    CHECK(bad == 0);
  }
}

TEST_CASE("linalg: batches run in parallel and match per-batch references", "[linalg]") {
  TestContext ctx;
  REQUIRE(ctx.threads() == 2);
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor a = ctx.randn({6, 40, 70}, t),
                 b = ctx.randn({6, 70, 50}, t).transpose(1, 2).contiguous().transpose(1, 2);
    check_close(forge::bmm(a, b), reference_matmul(a, b), t);
    const Tensor c = ctx.randn({2, 200, 90}, t), d = ctx.randn({2, 90, 120}, t);
    check_close(forge::matmul(c, d), reference_matmul(c, d), t);
  }
}

TEST_CASE("linalg: shape errors name the op and the shapes", "[linalg]") {
  TestContext ctx;
  const Tensor a = ctx.randn({2, 3}), b = ctx.randn({4, 5});
  const std::string msg = FORGE_REQUIRE_ERROR(shape, "matmul", (void)forge::matmul(a, b));
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[4, 5]") != std::string::npos);
  FORGE_REQUIRE_ERROR(shape, "matmul", (void)forge::matmul(ctx.randn({2, 3, 4}), ctx.randn({3, 4, 5})));
  FORGE_REQUIRE_ERROR(shape, "matmul", (void)forge::matmul(ctx.randn({}), ctx.randn({3})));
  FORGE_REQUIRE_ERROR(shape, "matmul", (void)forge::matmul(ctx.randn({3}), ctx.randn({4})));
  FORGE_REQUIRE_ERROR(shape, "mm", (void)forge::mm(ctx.randn({3}), ctx.randn({3, 2})));
  FORGE_REQUIRE_ERROR(shape, "mm", (void)forge::mm(ctx.randn({2, 3}), ctx.randn({2, 3})));
  FORGE_REQUIRE_ERROR(shape, "bmm", (void)forge::bmm(ctx.randn({2, 3, 4}), ctx.randn({3, 4, 5})));
  FORGE_REQUIRE_ERROR(shape, "bmm", (void)forge::bmm(ctx.randn({3, 4}), ctx.randn({4, 5})));
  FORGE_REQUIRE_ERROR(shape, "dot", (void)forge::dot(ctx.randn({3}), ctx.randn({4})));
  FORGE_REQUIRE_ERROR(shape, "dot", (void)forge::dot(ctx.randn({3, 1}), ctx.randn({3})));
  FORGE_REQUIRE_ERROR(shape, "outer", (void)forge::outer(ctx.randn({3, 1}), ctx.randn({3})));
  FORGE_REQUIRE_ERROR(shape, "linear", (void)forge::linear(ctx.randn({2, 7}), ctx.randn({5, 8})));
  FORGE_REQUIRE_ERROR(shape, "linear", (void)forge::linear(ctx.randn({2, 8}), ctx.randn({8})));
  FORGE_REQUIRE_ERROR(shape, "linear", (void)forge::linear(ctx.randn({2, 8}), ctx.randn({5, 8}), ctx.randn({4})));
  FORGE_REQUIRE_ERROR(shape, "addmm", (void)forge::addmm(ctx.randn({3}), ctx.randn({2, 4}), ctx.randn({4, 5})));
  FORGE_REQUIRE_ERROR(shape, "addmm", (void)forge::addmm(ctx.randn({5}), ctx.randn({2, 4}), ctx.randn({3, 5})));
}

TEST_CASE("linalg: integer, bool and mixed dtypes are dtype errors", "[linalg]") {
  TestContext ctx;
  for (DType t : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
    const Tensor a = ctx.zeros({2, 2}, t), b = ctx.zeros({2, 2}, t);
    FORGE_REQUIRE_ERROR(dtype, "matmul", (void)forge::matmul(a, b));
    FORGE_REQUIRE_ERROR(dtype, "mm", (void)forge::mm(a, b));
    FORGE_REQUIRE_ERROR(dtype, "linear", (void)forge::linear(a, b));
    FORGE_REQUIRE_ERROR(dtype, "dot", (void)forge::dot(a.select(0, 0), b.select(0, 0)));
  }
  const Tensor f = ctx.randn({2, 2}), d = ctx.randn({2, 2}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "matmul", (void)forge::matmul(f, d));
  FORGE_REQUIRE_ERROR(dtype, "bmm", (void)forge::bmm(f.view({1, 2, 2}), d.view({1, 2, 2})));
  FORGE_REQUIRE_ERROR(dtype, "outer", (void)forge::outer(f.select(0, 0), ctx.randn({2}, DType::f16)));
  FORGE_REQUIRE_ERROR(dtype, "linear", (void)forge::linear(f, f, ctx.randn({2}, DType::f64)));
  FORGE_REQUIRE_ERROR(dtype, "addmm", (void)forge::addmm(d, f, f));
}

TEST_CASE("linalg: undefined operands and tensors of two contexts are refused", "[linalg]") {
  TestContext ctx, other;
  const Tensor a = ctx.randn({2, 2});
  FORGE_REQUIRE_ERROR(invalid_argument, "matmul", (void)forge::matmul(a, Tensor()));
  FORGE_REQUIRE_ERROR(invalid_argument, "addmm", (void)forge::addmm(Tensor(), a, a));
  FORGE_REQUIRE_ERROR(device, "mm", (void)forge::mm(a, other.randn({2, 2})));
  FORGE_REQUIRE_ERROR(device, "linear", (void)forge::linear(a, a, other.randn({2})));
}

TEST_CASE("linalg: _into refuses a wrong out (shape, dtype, context, expanded, overlapping)", "[linalg]") {
  TestContext ctx, other;
  const Tensor a = ctx.randn({3, 4}), b = ctx.randn({4, 3});
  Tensor wrong_shape = ctx.empty({3, 4});
  FORGE_REQUIRE_ERROR(shape, "matmul_into", forge::matmul_into(wrong_shape, a, b));
  Tensor wrong_dtype = ctx.empty({3, 3}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "mm_into", forge::mm_into(wrong_dtype, a, b));
  Tensor foreign = other.empty({3, 3});
  FORGE_REQUIRE_ERROR(device, "matmul_into", forge::matmul_into(foreign, a, b));
  Tensor expanded = ctx.empty({1, 3}).expand({3, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "matmul_into", forge::matmul_into(expanded, a, b));
  Tensor sq = ctx.randn({3, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "mm_into", forge::mm_into(sq, sq, sq));  // exactly in place
  Tensor big = ctx.randn({6, 3});
  Tensor top = big.narrow(0, 0, 3), bottom = big.narrow(0, 3, 3);
  const Tensor rhs = ctx.randn({3, 3});
  const Expected e = reference_matmul(top, rhs);
  forge::mm_into(bottom, top, rhs);  // same buffer, disjoint: fine
  check_close(bottom, e, DType::f32);
  Tensor overlapping = big.narrow(0, 1, 3);
  FORGE_REQUIRE_ERROR(invalid_argument, "mm_into", forge::mm_into(overlapping, top, rhs));
  Tensor bias_out = ctx.randn({3, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "addmm_into", forge::addmm_into(bias_out, bias_out, a, b));
  Tensor lin = ctx.empty({3, 5});
  FORGE_REQUIRE_ERROR(shape, "linear_into", forge::linear_into(lin, a, ctx.randn({4, 4})));
  Tensor dot_out = ctx.empty({1});
  FORGE_REQUIRE_ERROR(shape, "dot_into", forge::dot_into(dot_out, a.select(0, 0), a.select(0, 1)));
  Tensor outer_out = ctx.empty({4, 4}, DType::f16);
  FORGE_REQUIRE_ERROR(dtype, "outer_into", forge::outer_into(outer_out, a.select(0, 0), a.select(0, 1)));
  Tensor bmm_out = ctx.empty({1, 3, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "bmm_into", forge::bmm_into(bmm_out, a.view({1, 3, 4}), Tensor()));
  const std::uint32_t v = sq.version();
  CHECK(sq.version() == v);
}

}  // namespace
