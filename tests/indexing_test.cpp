// embedding, index_select, gather, scatter_add and one_hot against naive
// loops written here, reading inputs straight from their buffers through
// their own strides. Every dtype for the data, i64 and i32 indices, random
// shapes with size-1 and zero-size dims, packed, transposed, stepped and
// offset inputs and indices, the _into forms and every error path, with the
// bad index and its position named in the message.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
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
using forge_test::kAllDTypes;
using forge_test::TestContext;
using namespace forge_test::reference;

const DType kIndexDTypes[] = {DType::i64, DType::i32};

// An index tensor of `shape` with entries in [0, bound).
Tensor make_index(TestContext& ctx, std::mt19937_64& rng, const Shape& shape, std::int64_t bound, DType t, int layout) {
  return make_with(ctx, shape, t, layout, [&] { return static_cast<double>(bound > 0 ? pick(rng, 0, bound - 1) : 0); });
}

// A value of dtype t after integer wrapping (u8, i8), bool collapse or nothing.
double wrap_to(double v, DType t) {
  if (t == DType::boolean) return v != 0;
  if (t == DType::u8) return std::fmod(std::fmod(v, 256) + 256, 256);
  if (t == DType::i8) return std::fmod(std::fmod(v + 128, 256) + 256, 256) - 128;
  return v;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- embedding ----

TEST_CASE("embedding: rows of weight for every dtype, both index dtypes and layouts", "[indexing]") {
  TestContext ctx;
  std::mt19937_64 rng(101);
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const DType it = kIndexDTypes[(iter / 8) % 2];
    const std::int64_t V = pick(rng, 1, 6), D = rng() % 8 == 0 ? 0 : pick(rng, 1, 5);
    const Shape is = random_shape(rng, static_cast<int>(pick(rng, 0, 3)));
    const Tensor w = make_exact(ctx, rng, {V, D}, t, static_cast<int>(rng() % kLayouts));
    const Tensor idx = make_index(ctx, rng, is, V, it, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " weight " << w.shape() << " indices " << is);
    auto check = [&](const Tensor& out) {
      Shape want = is;
      want.push_back(D);
      REQUIRE(out.shape() == want);
      REQUIRE(out.dtype() == t);
      int bad = 0;
      each_index(want, [&](const Dims& p) {
        Dims ip = p;
        ip.erase(p.size() - 1);
        const Dims wi{static_cast<std::int64_t>(at(idx, ip)), p[p.size() - 1]};
        if (at(out, p) != at(w, wi) && bad++ < 3) FAIL_CHECK("at " << p);
      });
      CHECK(bad == 0);
    };
    const Tensor out = forge::embedding(w, idx);
    check(out);
    Tensor target = ctx.zeros(out.shape(), t);
    if (out.dim() >= 2) target = ctx.zeros(out.shape(), t).transpose(0, -1).clone().transpose(0, -1);
    forge::embedding_into(target, w, idx);
    check(target);
  }
}

TEST_CASE("embedding: a large lookup runs the parallel path", "[indexing]") {
  TestContext ctx(forge_test::context_options(4));
  std::mt19937_64 rng(103);
  const Tensor w = make_exact(ctx, rng, {50, 64}, DType::f32, packed);
  const Tensor idx = make_index(ctx, rng, {40, 70}, 50, DType::i32, stepped);
  const Tensor out = forge::embedding(w, idx);
  int bad = 0;
  each_index(out.shape(), [&](const Dims& p) {
    if (at(out, p) != at(w, {static_cast<std::int64_t>(at(idx, {p[0], p[1]})), p[2]})) ++bad;
  });
  CHECK(bad == 0);
}

TEST_CASE("embedding: bad input", "[indexing]") {
  TestContext ctx;
  const Tensor w = ctx.zeros({10, 3});
  std::vector<std::int64_t> v(8, 1);
  v[7] = 12;  // position [3, 1] of a [4, 2] index
  const Tensor idx = ctx.from_vector(v, {4, 2});
  const std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "embedding", (void)forge::embedding(w, idx));
  CHECK(contains(msg, "index 12 at position [3, 1] is out of range for 10 rows"));
  const Tensor neg = ctx.from_vector(std::vector<std::int32_t>{0, -1, 2});
  const std::string neg_msg = FORGE_REQUIRE_ERROR(out_of_range, "embedding", (void)forge::embedding(w, neg));
  CHECK(contains(neg_msg, "index -1 at position [1]"));
  FORGE_REQUIRE_ERROR(dtype, "embedding", (void)forge::embedding(w, ctx.zeros({2})));
  FORGE_REQUIRE_ERROR(dtype, "embedding", (void)forge::embedding(w, ctx.zeros({2}, DType::u8)));
  FORGE_REQUIRE_ERROR(shape, "embedding", (void)forge::embedding(ctx.zeros({10}), ctx.zeros({2}, DType::i64)));
  FORGE_REQUIRE_ERROR(invalid_argument, "embedding", (void)forge::embedding(w, Tensor()));
  TestContext other;
  FORGE_REQUIRE_ERROR(device, "embedding", (void)forge::embedding(w, other.zeros({2}, DType::i64)));
  const Tensor good = ctx.zeros({2}, DType::i64);
  Tensor out = ctx.zeros({2, 4});
  FORGE_REQUIRE_ERROR(shape, "embedding_into", forge::embedding_into(out, w, good));
  Tensor wrong = ctx.zeros({2, 3}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "embedding_into", forge::embedding_into(wrong, w, good));
  Tensor big = ctx.zeros({10, 3});
  Tensor rows = big.narrow(0, 0, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "embedding_into", forge::embedding_into(rows, big, good));
  Tensor bad_out = ctx.zeros({4, 2, 3});
  FORGE_REQUIRE_ERROR(out_of_range, "embedding_into", forge::embedding_into(bad_out, w, idx));
}

// ---- index_select ----

TEST_CASE("index_select: every dtype, both index dtypes and layouts", "[indexing]") {
  TestContext ctx;
  std::mt19937_64 rng(107);
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const DType it = kIndexDTypes[(iter / 8) % 2];
    const int rank = static_cast<int>(pick(rng, 1, 3));
    const Shape s = random_shape(rng, rank);
    const int dim = static_cast<int>(pick(rng, -rank, rank - 1)), d = dim < 0 ? dim + rank : dim;
    const std::int64_t n = s[d] == 0 ? 0 : pick(rng, 0, 5);
    const bool scalar_index = n == 1 && rng() % 2;
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    const Tensor idx =
        make_index(ctx, rng, scalar_index ? Shape{} : Shape{n}, s[d], it, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " shape " << s << " dim " << dim << " index " << idx.shape());
    auto check = [&](const Tensor& out) {
      Shape want = s;
      want[d] = n;
      REQUIRE(out.shape() == want);
      int bad = 0;
      each_index(want, [&](const Dims& p) {
        Dims in = p;
        in[d] = static_cast<std::int64_t>(scalar_index ? at(idx, {}) : at(idx, {p[d]}));
        if (at(out, p) != at(x, in) && bad++ < 3) FAIL_CHECK("at " << p);
      });
      CHECK(bad == 0);
    };
    const Tensor out = forge::index_select(x, dim, idx);
    check(out);
    check(x.index_select(dim, idx));
    Tensor target = ctx.full(out.shape(), 1, t);
    forge::index_select_into(target, x, dim, idx);
    check(target);
  }
}

TEST_CASE("index_select: bad input", "[indexing]") {
  TestContext ctx;
  const Tensor x = ctx.zeros({3, 5});
  const Tensor idx = ctx.from_vector(std::vector<std::int64_t>{0, 4, 7});
  const std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "index_select", (void)forge::index_select(x, 1, idx));
  CHECK(contains(msg, "index 7 at position [2] is out of range for dimension 1 of size 5"));
  const Tensor neg = ctx.from_vector(std::vector<std::int32_t>{-3});
  FORGE_REQUIRE_ERROR(out_of_range, "index_select", (void)forge::index_select(x, 0, neg));
  FORGE_REQUIRE_ERROR(out_of_range, "index_select", (void)forge::index_select(x, 2, ctx.zeros({1}, DType::i64)));
  FORGE_REQUIRE_ERROR(shape, "index_select", (void)forge::index_select(x, 0, ctx.zeros({1, 1}, DType::i64)));
  FORGE_REQUIRE_ERROR(dtype, "index_select", (void)forge::index_select(x, 0, ctx.zeros({1}, DType::f32)));
  Tensor out = ctx.zeros({3, 2});
  const Tensor good = ctx.from_vector(std::vector<std::int64_t>{0, 4, 1});
  FORGE_REQUIRE_ERROR(shape, "index_select_into", forge::index_select_into(out, x, 1, good));
  Tensor wrong = ctx.zeros({3, 1}, DType::i64);
  FORGE_REQUIRE_ERROR(dtype, "index_select_into", forge::index_select_into(wrong, x, 1, ctx.zeros({1}, DType::i64)));
  Tensor self = x.narrow(1, 0, 1);
  FORGE_REQUIRE_ERROR(invalid_argument, "index_select_into",
                      forge::index_select_into(self, x, 1, ctx.zeros({1}, DType::i64)));
}

// ---- gather ----

TEST_CASE("gather: every dtype, both index dtypes and layouts", "[indexing]") {
  TestContext ctx;
  std::mt19937_64 rng(109);
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const DType it = kIndexDTypes[(iter / 8) % 2];
    const int rank = static_cast<int>(pick(rng, 1, 3));
    const Shape s = random_shape(rng, rank);
    const int dim = static_cast<int>(pick(rng, -rank, rank - 1)), d = dim < 0 ? dim + rank : dim;
    Shape is = s;
    for (int k = 0; k < rank; ++k) is[k] = k == d ? (s[d] == 0 ? 0 : pick(rng, 0, 4)) : pick(rng, 0, s[k]);
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    const Tensor idx = make_index(ctx, rng, is, s[d], it, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " shape " << s << " dim " << dim << " index " << is);
    auto check = [&](const Tensor& out) {
      REQUIRE(out.shape() == is);
      int bad = 0;
      each_index(is, [&](const Dims& p) {
        Dims in = p;
        in[d] = static_cast<std::int64_t>(at(idx, p));
        if (at(out, p) != at(x, in) && bad++ < 3) FAIL_CHECK("at " << p);
      });
      CHECK(bad == 0);
    };
    check(forge::gather(x, dim, idx));
    check(x.gather(dim, idx));
    Tensor target = ctx.zeros(is, t);
    forge::gather_into(target, x, dim, idx);
    check(target);
  }
  // 0-d x and index
  const Tensor x0 = ctx.full({}, 3.5);
  CHECK(forge::gather(x0, 0, ctx.zeros({}, DType::i64)).item<float>() == 3.5f);
}

TEST_CASE("gather: bad input", "[indexing]") {
  TestContext ctx;
  const Tensor x = ctx.zeros({3, 4});
  const Tensor idx = ctx.from_vector(std::vector<std::int32_t>{0, 1, 2, 3, 1, 9}, {2, 3});
  const std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "gather", (void)forge::gather(x, 1, idx));
  CHECK(contains(msg, "index 9 at position [1, 2] is out of range for dimension 1 of size 4"));
  FORGE_REQUIRE_ERROR(out_of_range, "gather", (void)forge::gather(x, 0, ctx.full({1, 1}, -1, DType::i64)));
  FORGE_REQUIRE_ERROR(shape, "gather", (void)forge::gather(x, 0, ctx.zeros({2}, DType::i64)));
  FORGE_REQUIRE_ERROR(shape, "gather", (void)forge::gather(x, 0, ctx.zeros({2, 5}, DType::i64)));
  FORGE_REQUIRE_ERROR(out_of_range, "gather", (void)forge::gather(x, -3, ctx.zeros({2, 2}, DType::i64)));
  FORGE_REQUIRE_ERROR(dtype, "gather", (void)forge::gather(x, 0, ctx.zeros({2, 2}, DType::f64)));
  Tensor wrong = ctx.zeros({2, 2}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "gather_into", forge::gather_into(wrong, x, 0, ctx.zeros({2, 2}, DType::i64)));
  Tensor self = x.narrow(0, 0, 2).narrow(1, 0, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "gather_into", forge::gather_into(self, x, 0, ctx.zeros({2, 2}, DType::i64)));
}

// ---- scatter_add ----

void check_scatter_add(const Tensor& out, const Tensor& x, int d, const Tensor& idx, const Tensor& src) {
  REQUIRE(out.shape() == x.shape());
  REQUIRE(out.dtype() == x.dtype());
  std::vector<double> want(static_cast<std::size_t>(x.numel()));
  const forge::Strides cs = forge::contiguous_strides(x.shape());
  auto flat = [&](const Dims& p) {
    std::int64_t f = 0;
    for (int k = 0; k < p.size(); ++k) f += p[k] * cs[k];
    return static_cast<std::size_t>(f);
  };
  each_index(x.shape(), [&](const Dims& p) { want[flat(p)] = at(x, p); });
  const bool is_bool = x.dtype() == DType::boolean;
  each_index(idx.shape(), [&](const Dims& p) {
    Dims q = p;
    if (q.size() > 0) q[d] = static_cast<std::int64_t>(at(idx, p));
    double& w = want[flat(q)];
    w = is_bool ? (w != 0 || at(src, p) != 0) : w + at(src, p);
  });
  int bad = 0;
  each_index(x.shape(), [&](const Dims& p) {
    if (at(out, p) != wrap_to(want[flat(p)], x.dtype()) && bad++ < 3)
      FAIL_CHECK("at " << p << " got " << at(out, p) << " want " << wrap_to(want[flat(p)], x.dtype()));
  });
  CHECK(bad == 0);
}

TEST_CASE("scatter_add: every dtype, both index dtypes, repeated targets add up", "[indexing]") {
  TestContext ctx;
  std::mt19937_64 rng(113);
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const DType it = kIndexDTypes[(iter / 8) % 2];
    const int rank = static_cast<int>(pick(rng, 1, 3));
    const Shape s = random_shape(rng, rank);
    const int dim = static_cast<int>(pick(rng, -rank, rank - 1)), d = dim < 0 ? dim + rank : dim;
    Shape is = s, ss = s;
    for (int k = 0; k < rank; ++k) {
      is[k] = k == d ? (s[d] == 0 ? 0 : pick(rng, 0, 4)) : pick(rng, 0, s[k]);
      ss[k] = is[k] + pick(rng, 0, 1);
    }
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    const Tensor src = make_exact(ctx, rng, ss, t, static_cast<int>(rng() % kLayouts));
    const Tensor idx = make_index(ctx, rng, is, s[d], it, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " dtype " << forge::dtype_name(t) << " shape " << s << " dim " << dim << " index " << is
                 << " src " << ss);
    check_scatter_add(forge::scatter_add(x, dim, idx, src), x, d, idx, src);
    Tensor target = ctx.zeros(s, t);
    forge::scatter_add_into(target, x, dim, idx, src);
    check_scatter_add(target, x, d, idx, src);
    // in place: out is x itself
    Tensor self = x.clone();
    const Tensor before = self.clone();
    forge::scatter_add_into(self, self, dim, idx, src);
    check_scatter_add(self, before, d, idx, src);
  }
}

TEST_CASE("scatter_add: a large scatter runs the parallel path", "[indexing]") {
  TestContext ctx(forge_test::context_options(4));
  std::mt19937_64 rng(127);
  const Tensor x = make_exact(ctx, rng, {200, 300}, DType::f64, transposed);
  const Tensor src = make_exact(ctx, rng, {200, 300}, DType::f64, packed);
  const Tensor idx = make_index(ctx, rng, {200, 300}, 200, DType::i64, packed);
  check_scatter_add(forge::scatter_add(x, 0, idx, src), x, 0, idx, src);
}

TEST_CASE("scatter_add: bad input", "[indexing]") {
  TestContext ctx;
  const Tensor x = ctx.zeros({3, 4});
  const Tensor src = ctx.ones({3, 4});
  const Tensor idx = ctx.from_vector(std::vector<std::int64_t>{0, 1, 3, 2}, {2, 2});
  const std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "scatter_add", (void)forge::scatter_add(x, 0, idx, src));
  CHECK(contains(msg, "index 3 at position [1, 0] is out of range for dimension 0 of size 3"));
  FORGE_REQUIRE_ERROR(out_of_range, "scatter_add",
                      (void)forge::scatter_add(x, 1, ctx.full({1, 1}, -2, DType::i32), src));
  FORGE_REQUIRE_ERROR(dtype, "scatter_add",
                      (void)forge::scatter_add(x, 0, ctx.zeros({1, 1}, DType::i64), ctx.ones({3, 4}, DType::f64)));
  FORGE_REQUIRE_ERROR(dtype, "scatter_add", (void)forge::scatter_add(x, 0, ctx.zeros({1, 1}, DType::u8), src));
  FORGE_REQUIRE_ERROR(shape, "scatter_add",
                      (void)forge::scatter_add(x, 0, ctx.zeros({4, 1}, DType::i64), ctx.ones({3, 1})));
  FORGE_REQUIRE_ERROR(shape, "scatter_add",
                      (void)forge::scatter_add(x, 0, ctx.zeros({1, 5}, DType::i64), ctx.ones({1, 5})));
  FORGE_REQUIRE_ERROR(shape, "scatter_add", (void)forge::scatter_add(x, 0, ctx.zeros({2}, DType::i64), src));
  FORGE_REQUIRE_ERROR(out_of_range, "scatter_add", (void)forge::scatter_add(x, 2, ctx.zeros({1, 1}, DType::i64), src));
  Tensor out = ctx.zeros({3, 4});
  Tensor src_view = out.narrow(0, 0, 1);
  FORGE_REQUIRE_ERROR(invalid_argument, "scatter_add_into",
                      forge::scatter_add_into(out, x, 0, ctx.zeros({1, 1}, DType::i64), src_view));
  Tensor wrong = ctx.zeros({3, 4}, DType::i32);
  FORGE_REQUIRE_ERROR(dtype, "scatter_add_into",
                      forge::scatter_add_into(wrong, x, 0, ctx.zeros({1, 1}, DType::i64), src));
  Tensor big = ctx.zeros({4, 4});
  Tensor shifted = big.narrow(0, 1, 3);
  const Tensor base = big.narrow(0, 0, 3);
  FORGE_REQUIRE_ERROR(invalid_argument, "scatter_add_into",
                      forge::scatter_add_into(shifted, base, 0, ctx.zeros({1, 1}, DType::i64), src));
}

// ---- one_hot ----

TEST_CASE("one_hot: explicit and inferred class counts, both index dtypes", "[indexing]") {
  TestContext ctx;
  std::mt19937_64 rng(131);
  for (int iter = 0; iter < 80; ++iter) {
    const DType it = kIndexDTypes[iter % 2];
    const Shape is = random_shape(rng, static_cast<int>(pick(rng, 0, 3)));
    const std::int64_t C = pick(rng, 1, 6);
    const bool infer = iter % 3 == 0 && is.numel() > 0;
    const Tensor idx = make_index(ctx, rng, is, C, it, static_cast<int>(rng() % kLayouts));
    std::int64_t classes = C;
    if (infer) {
      classes = 0;
      each_index(is, [&](const Dims& p) { classes = std::max(classes, static_cast<std::int64_t>(at(idx, p)) + 1); });
    }
    INFO("iter " << iter << " index " << is << " classes " << classes);
    auto check = [&](const Tensor& out) {
      Shape want = is;
      want.push_back(classes);
      REQUIRE(out.shape() == want);
      REQUIRE(out.dtype() == DType::i64);
      int bad = 0;
      each_index(want, [&](const Dims& p) {
        Dims ip = p;
        ip.erase(p.size() - 1);
        const double expect = static_cast<std::int64_t>(at(idx, ip)) == p[p.size() - 1] ? 1 : 0;
        if (at(out, p) != expect && bad++ < 3) FAIL_CHECK("at " << p);
      });
      CHECK(bad == 0);
    };
    const Tensor out = forge::one_hot(idx, infer ? -1 : C);
    check(out);
    Tensor target = ctx.full(out.shape(), 7, DType::i64);
    forge::one_hot_into(target, idx, infer ? -1 : C);
    check(target);
  }
}

TEST_CASE("one_hot: bad input", "[indexing]") {
  TestContext ctx;
  const Tensor idx = ctx.from_vector(std::vector<std::int64_t>{0, 2, 5}, {3});
  const std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "one_hot", (void)forge::one_hot(idx, 4));
  CHECK(contains(msg, "index 5 at position [2] is out of range for 4 classes"));
  const Tensor neg = ctx.from_vector(std::vector<std::int32_t>{1, -1}, {1, 2});
  FORGE_REQUIRE_ERROR(out_of_range, "one_hot", (void)forge::one_hot(neg));
  FORGE_REQUIRE_ERROR(out_of_range, "one_hot", (void)forge::one_hot(neg, 3));
  FORGE_REQUIRE_ERROR(invalid_argument, "one_hot", (void)forge::one_hot(idx, -2));
  FORGE_REQUIRE_ERROR(invalid_argument, "one_hot", (void)forge::one_hot(ctx.zeros({0}, DType::i64)));
  FORGE_REQUIRE_ERROR(dtype, "one_hot", (void)forge::one_hot(ctx.zeros({2}), 3));
  Tensor wrong = ctx.zeros({3, 6}, DType::i32);
  FORGE_REQUIRE_ERROR(dtype, "one_hot_into", forge::one_hot_into(wrong, idx));
  Tensor small = ctx.zeros({3, 5}, DType::i64);
  FORGE_REQUIRE_ERROR(shape, "one_hot_into", forge::one_hot_into(small, idx));
  CHECK(forge::one_hot(ctx.zeros({0}, DType::i64), 3).shape() == Shape{0, 3});
}

}  // namespace
