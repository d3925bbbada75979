// dropout and scaled_dot_product_attention. dropout: the drop rate, the
// scaling of what is kept, replay under manual_seed, independence from the
// layout and the thread count, and the p == 0 / p == 1 / eval cases.
// Attention against a naive f64 loop written here (scores, mask, softmax by
// its definition, weighted sum), reading inputs through their own strides:
// broadcast batch dims, bool and float masks, is_causal in both alignments
// (and a cached decode step read as the last rows of the full pass), an explicit scale,
// transposed inputs, every float dtype and every error path.

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

// Real values in [lo, hi) (rounded to t when t is narrower than f64).
Tensor make(TestContext& ctx, std::mt19937_64& rng, const Shape& shape, DType t, int layout, double lo = -2,
            double hi = 2) {
  std::uniform_real_distribution<double> u(lo, hi);
  return make_with(ctx, shape, t, layout, [&] { return u(rng); });
}

double tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
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

// ---- dropout ----

TEST_CASE("dropout: eval mode and p == 0 return x itself, p == 1 gives zeros", "[attention]") {
  TestContext ctx;
  std::mt19937_64 rng(301);
  for (const DType t : kFloatDTypes) {
    const Tensor x = make(ctx, rng, {3, 4}, t, transposed);
    CHECK(forge::dropout(x, 0.5, false).is_same(x));
    CHECK(forge::dropout(x, 0.0).is_same(x));
    const Tensor zeros = forge::dropout(x, 1.0);
    REQUIRE(zeros.shape() == x.shape());
    CHECK(zeros.dtype() == t);
    for (double v : zeros.to_vector<double>()) CHECK(v == 0.0);
    Tensor out = ctx.full({3, 4}, 9, t);
    forge::dropout_into(out, x, 0.7, false);
    CHECK(out.to_vector<double>() == x.to_vector<double>());
  }
}

TEST_CASE("dropout: drops about p and scales the rest by 1 / (1 - p), every float dtype", "[attention]") {
  TestContext ctx;
  std::mt19937_64 rng(303);
  const double ps[] = {0.1, 0.3, 0.75};
  for (const DType t : kFloatDTypes) {
    for (const double p : ps) {
      const Tensor x = make(ctx, rng, {150, 200}, t, stepped, 0.5, 4);  // never 0
      const Tensor y = forge::dropout(x, p);
      REQUIRE(y.shape() == x.shape());
      REQUIRE(y.dtype() == t);
      std::int64_t dropped = 0;
      int bad = 0;
      each_index(x.shape(), [&](const Dims& idx) {
        const double got = at(y, idx);
        if (got == 0) {
          ++dropped;
        } else if (!close(got, at(x, idx) / (1 - p), t) && bad++ < 3) {
          FAIL_CHECK("at " << idx << " got " << got << " for x " << at(x, idx));
        }
      });
      CHECK(bad == 0);
      const double rate = static_cast<double>(dropped) / static_cast<double>(x.numel());
      INFO(forge::dtype_name(t) << " p " << p << " rate " << rate);
      CHECK(std::abs(rate - p) < 0.02);  // 30000 draws: the standard deviation is below 0.003
    }
  }
}

TEST_CASE("dropout: manual_seed replays the mask, calls differ, layout and threads do not matter", "[attention]") {
  TestContext one(forge_test::context_options(1)), four(forge_test::context_options(4));
  std::mt19937_64 rng(307);
  const Tensor x1 = make(one, rng, {100, 700}, DType::f32, packed, 0.5, 4);
  // the same logical values on another context, laid out transposed in memory
  const Tensor x4 = four.from_vector(x1.transpose(0, 1).contiguous().to_vector<float>(), {700, 100}).transpose(0, 1);
  REQUIRE(!x4.is_contiguous());
  one.manual_seed(11);
  four.manual_seed(11);
  const auto a = forge::dropout(x1, 0.4).to_vector<float>();
  CHECK(forge::dropout(x4, 0.4).to_vector<float>() == a);
  CHECK(forge::dropout(x1, 0.4).to_vector<float>() != a);  // the generator moved on
  one.manual_seed(11);
  CHECK(forge::dropout(x1, 0.4).to_vector<float>() == a);
}

TEST_CASE("dropout: in place and into a strided out", "[attention]") {
  TestContext ctx;
  std::mt19937_64 rng(311);
  const Tensor x = make(ctx, rng, {40, 30}, DType::f64, packed, 0.5, 4);
  ctx.manual_seed(3);
  const auto want = forge::dropout(x, 0.5).to_vector<double>();
  ctx.manual_seed(3);
  Tensor self = x.clone();
  forge::dropout_into(self, self, 0.5);
  CHECK(self.to_vector<double>() == want);
  ctx.manual_seed(3);
  Tensor strided = ctx.zeros({30, 40}, DType::f64).transpose(0, 1);
  forge::dropout_into(strided, x, 0.5);
  CHECK(strided.to_vector<double>() == want);
}

TEST_CASE("dropout: bad input", "[attention]") {
  TestContext ctx;
  const Tensor x = ctx.ones({2, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "dropout", (void)forge::dropout(x, -0.1));
  FORGE_REQUIRE_ERROR(invalid_argument, "dropout", (void)forge::dropout(x, 1.1));
  FORGE_REQUIRE_ERROR(invalid_argument, "dropout", (void)forge::dropout(x, std::nan("")));
  FORGE_REQUIRE_ERROR(invalid_argument, "dropout", (void)forge::dropout(x, 2.0, false));
  FORGE_REQUIRE_ERROR(dtype, "dropout", (void)forge::dropout(ctx.ones({2}, DType::i32)));
  FORGE_REQUIRE_ERROR(invalid_argument, "dropout", (void)forge::dropout(Tensor()));
  Tensor out = ctx.zeros({3, 2});
  FORGE_REQUIRE_ERROR(shape, "dropout_into", forge::dropout_into(out, x));
  Tensor wrong = ctx.zeros({2, 3}, DType::f16);
  FORGE_REQUIRE_ERROR(dtype, "dropout_into", forge::dropout_into(wrong, x));
  Tensor big = ctx.zeros({3, 3});
  Tensor a = big.narrow(0, 0, 2), b = big.narrow(0, 1, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "dropout_into", forge::dropout_into(a, b));
}

// ---- scaled_dot_product_attention ----

// Reads t (rank >= 2) at batch index `batch` (right-aligned, broadcast) and trailing (r, c).
double at_batch(const Tensor& t, const Dims& batch, std::int64_t r, std::int64_t c) {
  Dims idx;
  const int lead = batch.size() - (t.dim() - 2);
  for (int d = 0; d < t.dim() - 2; ++d) idx.push_back(t.shape()[d] == 1 ? 0 : batch[lead + d]);
  idx.push_back(t.shape()[t.dim() - 2] == 1 ? 0 : r);
  idx.push_back(t.shape()[t.dim() - 1] == 1 ? 0 : c);
  return at(t, idx);
}

// The naive attention of q, k, v (f64), over the broadcast batch.
std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                        bool causal, double scale, const Shape& batch,
                                        forge::CausalAlign align = forge::CausalAlign::top_left) {
  const std::int64_t L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  const std::int64_t offset = align == forge::CausalAlign::bottom_right ? S - L : 0;
  std::vector<double> out;
  each_index(batch, [&](const Dims& b) {
    for (std::int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<std::size_t>(S));
      for (std::int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (std::int64_t e = 0; e < E; ++e) dot += at_batch(q, b, i, e) * at_batch(k, b, j, e);
        double x = dot * scale;
        if (causal && j > i + offset) x = -std::numeric_limits<double>::infinity();
        if (mask.defined()) {
          // the mask broadcasts to [batch..., L, S] from the right
          Dims idx;
          for (int d = 0; d < mask.dim(); ++d) {
            const int from_right = mask.dim() - 1 - d;
            const std::int64_t full = from_right == 0 ? j : from_right == 1 ? i : b[b.size() - (from_right - 1)];
            idx.push_back(mask.shape()[d] == 1 ? 0 : full);
          }
          const double m = at(mask, idx);
          if (mask.dtype() == DType::boolean)
            x = m != 0 ? x : -std::numeric_limits<double>::infinity();
          else
            x += m;
        }
        s[static_cast<std::size_t>(j)] = x;
      }
      double mx = -std::numeric_limits<double>::infinity();
      for (double x : s) mx = std::max(mx, x);
      double total = 0;
      for (double& x : s) total += (x = std::exp(x - mx));
      for (std::int64_t e = 0; e < Ev; ++e) {
        double acc = 0;
        for (std::int64_t j = 0; j < S; ++j) acc += s[static_cast<std::size_t>(j)] / total * at_batch(v, b, j, e);
        out.push_back(acc);
      }
    }
  });
  return out;
}

Shape batch_shape(const Tensor& t) {
  Shape s;
  for (int d = 0; d < t.dim() - 2; ++d) s.push_back(t.shape()[d]);
  return s;
}

Shape broadcast3(const Shape& a, const Shape& b, const Shape& c) {
  return forge::broadcast_shapes(forge::broadcast_shapes(a, b, "test"), c, "test");
}

void check_attention(const Tensor& out, const std::vector<double>& want, const Shape& shape, DType t) {
  REQUIRE(out.shape() == shape);
  REQUIRE(out.dtype() == t);
  std::size_t k = 0;
  int bad = 0;
  each_index(shape, [&](const Dims& idx) {
    const double w = want[k++];
    if (!close(at(out, idx), w, t) && bad++ < 3) FAIL_CHECK("at " << idx << " got " << at(out, idx) << " want " << w);
  });
  CHECK(bad == 0);
}

TEST_CASE("scaled_dot_product_attention: against a naive loop, masks, causal, scale, every float dtype",
          "[attention]") {
  TestContext ctx;
  std::mt19937_64 rng(401);
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kFloatDTypes[iter % 4];
    const int brank = static_cast<int>(pick(rng, 0, 2));
    Shape batch;
    for (int d = 0; d < brank; ++d) batch.push_back(pick(rng, 1, 3));
    auto thin = [&](Shape b) {  // some batch dims broadcast, sometimes fewer of them
      for (int d = 0; d < b.size(); ++d)
        if (rng() % 3 == 0) b[d] = 1;
      if (b.size() > 0 && rng() % 3 == 0) b.erase(0);
      return b;
    };
    const std::int64_t L = pick(rng, 0, 5), S = pick(rng, iter % 11 == 0 ? 0 : 1, 6), E = pick(rng, 1, 8),
                       Ev = pick(rng, 0, 5);
    auto with = [](Shape b, std::int64_t r, std::int64_t c) {
      b.push_back(r);
      b.push_back(c);
      return b;
    };
    const Tensor q = make(ctx, rng, with(batch, L, E), t, static_cast<int>(rng() % kLayouts));
    const Tensor k = make(ctx, rng, with(thin(batch), S, E), t, static_cast<int>(rng() % kLayouts));
    const Tensor v = make(ctx, rng, with(thin(batch), S, Ev), t, static_cast<int>(rng() % kLayouts));
    const int kind = iter % 4;  // none, bool mask, float mask, causal
    Tensor mask;
    if (kind == 1) {
      mask = make_with(ctx, with(thin(batch), rng() % 2 ? L : 1, S), DType::boolean, packed,
                       [&] { return static_cast<double>(rng() % 4 != 0); });
    } else if (kind == 2) {
      mask = make(ctx, rng, with(thin(batch), L, rng() % 2 ? S : 1), t, static_cast<int>(rng() % kLayouts));
    }
    const bool causal = kind == 3;
    const auto align = rng() % 2 ? forge::CausalAlign::bottom_right : forge::CausalAlign::top_left;
    const std::optional<double> scale = rng() % 2 ? std::optional<double>(0.3) : std::nullopt;
    const double used_scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
    const Shape full_batch = broadcast3(batch_shape(q), batch_shape(k), batch_shape(v));
    INFO("iter " << iter << " dtype " << forge::dtype_name(t) << " q " << q.shape() << " k " << k.shape() << " v "
                 << v.shape() << " mask " << (mask.defined() ? mask.shape().str() : "none") << " causal " << causal
                 << " bottom_right " << (align == forge::CausalAlign::bottom_right));
    const auto want = reference_attention(q, k, v, mask, causal, used_scale, full_batch, align);
    const Tensor out = forge::scaled_dot_product_attention(q, k, v, mask, causal, scale, align);
    check_attention(out, want, with(full_batch, L, Ev), t);
    Tensor into = ctx.zeros(out.shape(), t);
    forge::scaled_dot_product_attention_into(into, q, k, v, mask, causal, scale, align);
    check_attention(into, want, with(full_batch, L, Ev), t);
  }
}

TEST_CASE("scaled_dot_product_attention: a fully masked row is NaN, no keys give zeros", "[attention]") {
  TestContext ctx;
  const Tensor q = ctx.ones({2, 3}), k = ctx.ones({4, 3}), v = ctx.ones({4, 2});
  const Tensor mask = ctx.from_vector(std::vector<bool>{true, false, true, true, false, false, false, false}, {2, 4});
  const auto out = forge::scaled_dot_product_attention(q, k, v, mask).to_vector<float>();
  CHECK(out[0] == Approx(1.0f));
  CHECK(std::isnan(out[2]));
  const auto none = forge::scaled_dot_product_attention(q, ctx.ones({0, 3}), ctx.ones({0, 2})).to_vector<float>();
  for (float x : none) CHECK(x == 0.0f);
}

TEST_CASE("scaled_dot_product_attention: bottom_right causal is the last rows of the full causal pass", "[attention]") {
  // A decode step over a KV cache: the newest queries against every cached
  // key must equal the same rows of attention over the whole sequence.
  TestContext ctx;
  std::mt19937_64 rng(411);
  const std::int64_t S = 9;
  const Tensor q = make(ctx, rng, {2, 3, S, 8}, DType::f32, packed);
  const Tensor k = make(ctx, rng, {2, 3, S, 8}, DType::f32, packed);
  const Tensor v = make(ctx, rng, {2, 3, S, 5}, DType::f32, packed);
  const Tensor full = forge::scaled_dot_product_attention(q, k, v, Tensor(), true);
  for (const std::int64_t L : {std::int64_t{1}, std::int64_t{3}, S}) {
    INFO("L " << L);
    const Tensor last = q.narrow(2, S - L, L);
    const Tensor step =
        forge::scaled_dot_product_attention(last, k, v, Tensor(), true, std::nullopt, forge::CausalAlign::bottom_right);
    const auto got = step.to_vector<float>(), want = full.narrow(2, S - L, L).contiguous().to_vector<float>();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
    // top_left would let the first new query see only the first keys: a different result unless L == S.
    const Tensor top = forge::scaled_dot_product_attention(last, k, v, Tensor(), true);
    CHECK((top.to_vector<float>() == got) == (L == S));
  }
  // More queries than keys: the first L - S rows see no key.
  const auto wide = forge::scaled_dot_product_attention(ctx.ones({3, 2}), ctx.ones({1, 2}), ctx.ones({1, 1}), Tensor(),
                                                        true, std::nullopt, forge::CausalAlign::bottom_right)
                        .to_vector<float>();
  CHECK(std::isnan(wide[0]));
  CHECK(std::isnan(wide[1]));
  CHECK(wide[2] == Approx(1.0f));
}

TEST_CASE("scaled_dot_product_attention: a large batch runs the parallel path", "[attention]") {
  TestContext ctx(forge_test::context_options(4));
  std::mt19937_64 rng(409);
  const Tensor q = make(ctx, rng, {2, 3, 40, 16}, DType::f32, transposed);
  const Tensor k = make(ctx, rng, {2, 1, 50, 16}, DType::f32, packed);
  const Tensor v = make(ctx, rng, {3, 50, 24}, DType::f32, stepped);
  const Tensor mask = make(ctx, rng, {40, 50}, DType::f64, packed);  // converted to q's dtype
  const Tensor mask32 = mask.to(DType::f32);
  const auto want = reference_attention(q, k, v, mask32, false, 0.25, {2, 3});
  check_attention(forge::scaled_dot_product_attention(q, k, v, mask, false, 0.25), want, {2, 3, 40, 24}, DType::f32);
  const auto causal = reference_attention(q, k, v, Tensor(), true, 0.25, {2, 3});
  check_attention(forge::scaled_dot_product_attention(q, k, v, Tensor(), true, 0.25), causal, {2, 3, 40, 24},
                  DType::f32);
}

TEST_CASE("scaled_dot_product_attention: bad input", "[attention]") {
  TestContext ctx;
  const Tensor q = ctx.zeros({2, 3, 4}), k = ctx.zeros({2, 5, 4}), v = ctx.zeros({2, 5, 6});
  const char* op = "scaled_dot_product_attention";
  FORGE_REQUIRE_ERROR(dtype, op, (void)forge::scaled_dot_product_attention(q, k.to(DType::f64), v));
  FORGE_REQUIRE_ERROR(dtype, op,
                      (void)forge::scaled_dot_product_attention(q.to(DType::i32), k.to(DType::i32), v.to(DType::i32)));
  FORGE_REQUIRE_ERROR(shape, op, (void)forge::scaled_dot_product_attention(ctx.zeros({4}), k, v));
  FORGE_REQUIRE_ERROR(shape, op, (void)forge::scaled_dot_product_attention(q, ctx.zeros({2, 5, 3}), v));
  FORGE_REQUIRE_ERROR(shape, op, (void)forge::scaled_dot_product_attention(q, k, ctx.zeros({2, 4, 6})));
  FORGE_REQUIRE_ERROR(shape, op, (void)forge::scaled_dot_product_attention(q, ctx.zeros({3, 5, 4}), v));
  FORGE_REQUIRE_ERROR(dtype, op, (void)forge::scaled_dot_product_attention(q, k, v, ctx.zeros({3, 5}, DType::i32)));
  FORGE_REQUIRE_ERROR(shape, op, (void)forge::scaled_dot_product_attention(q, k, v, ctx.zeros({3, 4})));
  FORGE_REQUIRE_ERROR(invalid_argument, op,
                      (void)forge::scaled_dot_product_attention(q, k, v, ctx.zeros({3, 5}, DType::boolean), true));
  FORGE_REQUIRE_ERROR(invalid_argument, op,
                      (void)forge::scaled_dot_product_attention(q, k, v, Tensor(), false, std::nan("")));
  FORGE_REQUIRE_ERROR(invalid_argument, op, (void)forge::scaled_dot_product_attention(q, Tensor(), v));
  FORGE_REQUIRE_ERROR(invalid_argument, op,
                      (void)forge::scaled_dot_product_attention(q, k, v, Tensor(), true, std::nullopt,
                                                                static_cast<forge::CausalAlign>(7)));
  const char* into = "scaled_dot_product_attention_into";
  Tensor out = ctx.zeros({2, 3, 4});
  FORGE_REQUIRE_ERROR(shape, into, forge::scaled_dot_product_attention_into(out, q, k, v));
  Tensor wrong = ctx.zeros({2, 3, 6}, DType::bf16);
  FORGE_REQUIRE_ERROR(dtype, into, forge::scaled_dot_product_attention_into(wrong, q, k, v));
  Tensor vv = ctx.zeros({2, 5, 6});
  Tensor inside = vv.narrow(1, 0, 3);
  FORGE_REQUIRE_ERROR(invalid_argument, into, forge::scaled_dot_product_attention_into(inside, q, k, vv));
}

}  // namespace
