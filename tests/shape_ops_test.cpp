// cat, stack, split, chunk, repeat, flip against naive loops written here:
// every output element is looked up by hand in the input it must come from,
// read straight from the input's buffer through its own strides. Random
// shapes with size-1 and zero-size dims, packed, transposed, stepped and
// offset inputs, every dtype, the _into forms and every error path.

#include <algorithm>
#include <cstring>
#include <iterator>
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
using forge_test::kAllDTypes;
using forge_test::TestContext;
using namespace forge_test::reference;

DType reference_promote(DType a, DType b) {
  if (a == b) return a;
  const bool fa = forge::is_floating(a), fb = forge::is_floating(b);
  if (fa && fb) return (a == DType::f64 || b == DType::f64) ? DType::f64 : DType::f32;
  if (fa) return a;
  if (fb) return b;
  auto rank = [](DType t) {
    return t == DType::boolean ? 0 : t == DType::u8 || t == DType::i8 ? 1 : t == DType::i32 ? 2 : 3;
  };
  if (rank(a) == rank(b)) return DType::i32;  // u8 with i8: libtorch's i16, which forge lacks
  return rank(a) > rank(b) ? a : b;
}

double as_dtype(double v, DType t) { return t == DType::boolean ? (v != 0) : v; }

// ---- cat ----

void check_cat(const Tensor& out, const std::vector<Tensor>& xs, int dim) {
  std::vector<const Tensor*> used;
  for (const Tensor& x : xs)
    if (!(x.dim() == 1 && x.size(0) == 0)) used.push_back(&x);
  DType dtype = xs[0].dtype();
  for (const Tensor& x : xs) dtype = reference_promote(dtype, x.dtype());
  REQUIRE(out.dtype() == dtype);
  if (used.empty()) {
    CHECK(out.shape() == Shape{0});
    return;
  }
  Shape want = used[0]->shape();
  want[dim] = 0;
  for (const Tensor* x : used) want[dim] += x->shape()[dim];
  REQUIRE(out.shape() == want);
  int bad = 0;
  each_index(want, [&](const Dims& idx) {
    Dims in = idx;
    std::size_t k = 0;
    while (in[dim] >= used[k]->shape()[dim]) in[dim] -= used[k++]->shape()[dim];
    if (at(out, idx) != as_dtype(at(*used[k], in), dtype) && bad++ < 3) FAIL_CHECK("at " << idx);
  });
  CHECK(bad == 0);
}

TEST_CASE("cat: random shapes, every dtype and layout, against a naive lookup", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const int rank = static_cast<int>(pick(rng, 1, 4));
    const int dim = static_cast<int>(pick(rng, -rank, rank - 1));
    const int wrapped = dim < 0 ? dim + rank : dim;
    const Shape base = random_shape(rng, rank);
    std::vector<Tensor> xs;
    const int n = static_cast<int>(pick(rng, 1, 4));
    for (int i = 0; i < n; ++i) {
      if (rng() % 8 == 0) {  // an empty 1-D tensor is skipped whatever its shape
        xs.push_back(ctx.zeros({0}, t));
        continue;
      }
      Shape s = base;
      s[wrapped] = pick(rng, 0, 4);
      xs.push_back(make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts)));
    }
    INFO("iter " << iter << " dtype " << forge::dtype_name(t) << " base " << base << " dim " << dim);
    const Tensor out = forge::cat(xs, dim);
    check_cat(out, xs, wrapped);
    // _into a transposed view of a fresh tensor, when that shape allows it.
    if (out.dim() >= 2) {
      Shape swapped = out.shape();
      std::swap(swapped[rank - 1], swapped[rank - 2]);
      Tensor target = ctx.zeros(swapped, t).transpose(-1, -2);
      forge::cat_into(target, xs, dim);
      check_cat(target, xs, wrapped);
    }
  }
}

TEST_CASE("cat: promotes mixed dtypes as libtorch does", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(8);
  const DType pairs[][2] = {{DType::i32, DType::f32}, {DType::u8, DType::boolean}, {DType::f16, DType::bf16},
                            {DType::i64, DType::f16}, {DType::f32, DType::f64},    {DType::boolean, DType::i32}};
  for (const auto& p : pairs) {
    const Tensor a = make_exact(ctx, rng, {2, 3}, p[0], transposed), b = make_exact(ctx, rng, {1, 3}, p[1], packed);
    const Tensor c = forge::cat({a, b, ctx.zeros({0}, DType::f64)}, 0);
    check_cat(c, {a, b, ctx.zeros({0}, DType::f64)}, 0);
  }
  const Tensor empty = forge::cat({ctx.zeros({0}, DType::i32), ctx.zeros({0}, DType::u8)});
  CHECK(empty.shape() == Shape{0});
  CHECK(empty.dtype() == DType::i32);
}

TEST_CASE("cat: a large concatenation runs the parallel path", "[shape_ops]") {
  TestContext ctx(forge_test::context_options(4));
  std::mt19937_64 rng(9);
  const Tensor a = make_exact(ctx, rng, {300, 257}, DType::f32, stepped),
               b = make_exact(ctx, rng, {300, 100}, DType::f32, packed);
  check_cat(forge::cat({a, b}, 1), {a, b}, 1);
}

TEST_CASE("cat: bad input", "[shape_ops]") {
  TestContext ctx, other;
  const Tensor a = ctx.zeros({2, 3}), b = ctx.zeros({2, 4}), c = ctx.zeros({2, 3, 1});
  FORGE_REQUIRE_ERROR(invalid_argument, "cat", (void)forge::cat({}));
  FORGE_REQUIRE_ERROR(shape, "cat", (void)forge::cat({a, b}, 0));
  FORGE_REQUIRE_ERROR(shape, "cat", (void)forge::cat({a, c}, 0));
  FORGE_REQUIRE_ERROR(out_of_range, "cat", (void)forge::cat({a, a}, 2));
  FORGE_REQUIRE_ERROR(out_of_range, "cat", (void)forge::cat({a, a}, -3));
  FORGE_REQUIRE_ERROR(invalid_argument, "cat", (void)forge::cat({ctx.zeros({}), ctx.zeros({})}));
  FORGE_REQUIRE_ERROR(invalid_argument, "cat", (void)forge::cat({a, Tensor()}));
  FORGE_REQUIRE_ERROR(device, "cat", (void)forge::cat({a, other.zeros({2, 3})}));
  Tensor out = ctx.zeros({4, 3});
  FORGE_REQUIRE_ERROR(shape, "cat_into", forge::cat_into(out, {a, a}, 1));
  Tensor wrong = ctx.zeros({4, 3}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "cat_into", forge::cat_into(wrong, {a, a}, 0));
  Tensor big = ctx.zeros({6, 3});
  Tensor part = big.narrow(0, 0, 4);
  const Tensor inside = big.narrow(0, 2, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "cat_into", forge::cat_into(part, {inside, a}, 0));
  Tensor expanded = ctx.zeros({1, 3}).expand({4, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "cat_into", forge::cat_into(expanded, {a, a}, 0));
  Tensor foreign = other.zeros({4, 3});
  FORGE_REQUIRE_ERROR(device, "cat_into", forge::cat_into(foreign, {a, a}, 0));
}

// ---- stack ----

TEST_CASE("stack: random shapes, every dtype and layout, against a naive lookup", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 120; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const int rank = static_cast<int>(pick(rng, 0, 3));
    const int dim = static_cast<int>(pick(rng, -rank - 1, rank));
    const int wrapped = dim < 0 ? dim + rank + 1 : dim;
    const Shape s = random_shape(rng, rank);
    std::vector<Tensor> xs;
    const int n = static_cast<int>(pick(rng, 1, 4));
    for (int i = 0; i < n; ++i)
      xs.push_back(make_exact(ctx, rng, s, i == 1 ? DType::i32 : t, static_cast<int>(rng() % kLayouts)));
    DType dtype = t;
    for (const Tensor& x : xs) dtype = reference_promote(dtype, x.dtype());
    INFO("iter " << iter << " shape " << s << " dim " << dim);
    auto check = [&](const Tensor& out) {
      Shape want = s;
      want.insert(wrapped, n);
      REQUIRE(out.shape() == want);
      REQUIRE(out.dtype() == dtype);
      int bad = 0;
      each_index(want, [&](const Dims& idx) {
        Dims in = idx;
        in.erase(wrapped);
        const Tensor& x = xs[static_cast<std::size_t>(idx[wrapped])];
        if (at(out, idx) != as_dtype(at(x, in), dtype) && bad++ < 3) FAIL_CHECK("at " << idx);
      });
      CHECK(bad == 0);
    };
    const Tensor out = forge::stack(xs, dim);
    check(out);
    Tensor target = ctx.full(out.shape(), dtype == DType::boolean ? 1 : 3, dtype);
    forge::stack_into(target, xs, dim);
    check(target);
  }
}

TEST_CASE("stack: bad input", "[shape_ops]") {
  TestContext ctx;
  const Tensor a = ctx.zeros({2, 3}), b = ctx.zeros({3, 2});
  FORGE_REQUIRE_ERROR(invalid_argument, "stack", (void)forge::stack({}));
  FORGE_REQUIRE_ERROR(shape, "stack", (void)forge::stack({a, b}));
  FORGE_REQUIRE_ERROR(out_of_range, "stack", (void)forge::stack({a, a}, 3));
  FORGE_REQUIRE_ERROR(out_of_range, "stack", (void)forge::stack({a, a}, -4));
  const Tensor deep = ctx.zeros(Shape::filled(8, 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "stack", (void)forge::stack({deep, deep}));
  Tensor out = ctx.zeros({2, 3, 2});
  FORGE_REQUIRE_ERROR(shape, "stack_into", forge::stack_into(out, {a, a}, 0));
  Tensor wrong = ctx.zeros({2, 2, 3}, DType::i64);
  FORGE_REQUIRE_ERROR(dtype, "stack_into", forge::stack_into(wrong, {a, a}, 0));
  Tensor big = ctx.zeros({2, 2, 3});
  const Tensor inside = big.select(0, 1);
  FORGE_REQUIRE_ERROR(invalid_argument, "stack_into", forge::stack_into(big, {a, inside}, 0));
}

// ---- split / chunk ----

void check_pieces(const Tensor& x, const std::vector<Tensor>& pieces, const std::vector<std::int64_t>& sizes, int dim) {
  REQUIRE(pieces.size() == sizes.size());
  std::int64_t start = 0;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    Shape want = x.shape();
    want[dim] = sizes[k];
    REQUIRE(pieces[k].shape() == want);
    CHECK(pieces[k].buffer() == x.buffer());  // a view, not a copy
    CHECK(pieces[k].dtype() == x.dtype());
    int bad = 0;
    each_index(want, [&](const Dims& idx) {
      Dims in = idx;
      in[dim] += start;
      if (at(pieces[k], idx) != at(x, in) && bad++ < 3) FAIL_CHECK("piece " << k << " at " << idx);
    });
    CHECK(bad == 0);
    start += sizes[k];
  }
}

TEST_CASE("split and chunk: views with libtorch's piece sizes", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(13);
  for (int iter = 0; iter < 120; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const int rank = static_cast<int>(pick(rng, 1, 3));
    const int dim = static_cast<int>(pick(rng, -rank, rank - 1));
    const int wrapped = dim < 0 ? dim + rank : dim;
    Shape s = random_shape(rng, rank);
    s[wrapped] = pick(rng, 0, 9);
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    const std::int64_t size = s[wrapped];
    INFO("iter " << iter << " shape " << s << " dim " << dim);
    // split by a size: pieces of split_size, the last shorter; one piece when empty
    const std::int64_t split_size = size == 0 ? pick(rng, 0, 3) : pick(rng, 1, size + 2);
    std::vector<std::int64_t> want;
    if (size == 0) want.push_back(0);
    for (std::int64_t at0 = 0; at0 < size; at0 += split_size) want.push_back(std::min(split_size, size - at0));
    check_pieces(x, forge::split(x, split_size, dim), want, wrapped);
    check_pieces(x, x.split(split_size, dim), want, wrapped);
    // split by sizes: random cut points, so some pieces are empty
    std::vector<std::int64_t> cuts{0, size};
    for (std::int64_t k = pick(rng, 0, 3); k > 0; --k) cuts.push_back(pick(rng, 0, size));
    std::sort(cuts.begin(), cuts.end());
    std::vector<std::int64_t> sizes;
    for (std::size_t k = 1; k < cuts.size(); ++k) sizes.push_back(cuts[k] - cuts[k - 1]);
    check_pieces(x, forge::split(x, sizes, dim), sizes, wrapped);
    // chunk: ceil(size / chunks) per piece; `chunks` empty pieces of an empty dim
    const std::int64_t chunks = pick(rng, 1, 5);
    want.clear();
    if (size == 0) {
      want.assign(static_cast<std::size_t>(chunks), 0);
    } else {
      const std::int64_t each = (size + chunks - 1) / chunks;
      for (std::int64_t at0 = 0; at0 < size; at0 += each) want.push_back(std::min(each, size - at0));
    }
    check_pieces(x, forge::chunk(x, chunks, dim), want, wrapped);
    check_pieces(x, x.chunk(chunks, dim), want, wrapped);
  }
}

TEST_CASE("split and chunk: a piece size near INT64_MAX gives one piece, with no overflow", "[shape_ops]") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>({1, 2, 3, 4, 5}, {5});
  for (const std::int64_t split_size : {std::numeric_limits<std::int64_t>::max(), std::int64_t{1} << 62}) {
    const std::vector<Tensor> pieces = forge::split(x, split_size);
    REQUIRE(pieces.size() == 1);
    CHECK(pieces[0].to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5});
  }
  CHECK(forge::chunk(x, std::numeric_limits<std::int64_t>::max()).size() == 5);
}

TEST_CASE("split and chunk: pieces outlive x and see its writes", "[shape_ops]") {
  TestContext ctx;
  std::vector<Tensor> pieces;
  {
    Tensor x = ctx.arange(6, DType::i64).reshape({2, 3});
    pieces = x.chunk(3, 1);
    x.fill_(4);
  }
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[2].to_vector<std::int64_t>() == std::vector<std::int64_t>{4, 4});
}

TEST_CASE("split and chunk: bad input", "[shape_ops]") {
  TestContext ctx;
  const Tensor x = ctx.zeros({4, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "split", (void)forge::split(x, -1));
  FORGE_REQUIRE_ERROR(invalid_argument, "split", (void)forge::split(x, 0));
  FORGE_REQUIRE_ERROR(out_of_range, "split", (void)forge::split(x, 2, 2));
  FORGE_REQUIRE_ERROR(invalid_argument, "split", (void)forge::split(ctx.zeros({}), 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "split", (void)forge::split(x, std::vector<std::int64_t>{1, 2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "split", (void)forge::split(x, std::vector<std::int64_t>{5, -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "split", (void)forge::split(Tensor(), 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "chunk", (void)forge::chunk(x, 0));
  FORGE_REQUIRE_ERROR(out_of_range, "chunk", (void)forge::chunk(x, 2, -3));
}

// ---- repeat ----

TEST_CASE("repeat: tiles every dtype and layout as a naive modulo lookup", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(17);
  for (int iter = 0; iter < 120; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const int rank = static_cast<int>(pick(rng, 0, 3));
    const Shape s = random_shape(rng, rank);
    const int extra = static_cast<int>(pick(rng, 0, 2));
    Dims repeats;
    for (int d = 0; d < rank + extra; ++d) repeats.push_back(rng() % 6 == 0 ? 0 : pick(rng, 1, 3));
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " shape " << s << " repeats " << repeats);
    auto check = [&](const Tensor& out) {
      Shape want;
      for (int d = 0; d < repeats.size(); ++d) want.push_back(repeats[d] * (d < extra ? 1 : s[d - extra]));
      REQUIRE(out.shape() == want);
      REQUIRE(out.dtype() == t);
      int bad = 0;
      each_index(want, [&](const Dims& idx) {
        Dims in = Dims::filled(rank, 0);
        for (int d = 0; d < rank; ++d) in[d] = idx[d + extra] % s[d];
        if (at(out, idx) != at(x, in) && bad++ < 3) FAIL_CHECK("at " << idx);
      });
      CHECK(bad == 0);
    };
    const Tensor out = forge::repeat(x, repeats);
    check(out);
    check(x.repeat(repeats));
    Tensor target = ctx.zeros(out.shape(), t);
    forge::repeat_into(target, x, repeats);
    check(target);
  }
}

TEST_CASE("repeat: bad input", "[shape_ops]") {
  TestContext ctx;
  const Tensor x = ctx.zeros({2, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "repeat", (void)forge::repeat(x, {2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "repeat", (void)forge::repeat(x, {2, -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "repeat", (void)forge::repeat(x, {std::int64_t{1} << 62, 4}));
  Tensor out = ctx.zeros({4, 3});
  FORGE_REQUIRE_ERROR(shape, "repeat_into", forge::repeat_into(out, x, {1, 2}));
  Tensor wrong = ctx.zeros({2, 6}, DType::u8);
  FORGE_REQUIRE_ERROR(dtype, "repeat_into", forge::repeat_into(wrong, x, {1, 2}));
  Tensor big = ctx.zeros({4, 6});
  Tensor part = big.narrow(0, 0, 2);
  const Tensor in = big.narrow(1, 0, 3).narrow(0, 0, 2);
  FORGE_REQUIRE_ERROR(invalid_argument, "repeat_into", forge::repeat_into(part, in, {1, 2}));
}

// ---- flip ----

TEST_CASE("flip: reverses the given dims, every dtype and layout", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(19);
  for (int iter = 0; iter < 120; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const int rank = static_cast<int>(pick(rng, 0, 4));
    const Shape s = random_shape(rng, rank);
    Dims dims;
    for (int d = 0; d < rank; ++d)
      if (rng() % 2) dims.push_back(rng() % 2 ? d : d - rank);
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " shape " << s << " dims " << dims);
    auto check = [&](const Tensor& out) {
      REQUIRE(out.shape() == s);
      int bad = 0;
      each_index(s, [&](const Dims& idx) {
        Dims in = idx;
        for (int k = 0; k < dims.size(); ++k) {
          const int d = static_cast<int>(dims[k] < 0 ? dims[k] + rank : dims[k]);
          in[d] = s[d] - 1 - idx[d];
        }
        if (at(out, idx) != at(x, in) && bad++ < 3) FAIL_CHECK("at " << idx);
      });
      CHECK(bad == 0);
    };
    check(forge::flip(x, dims));
    check(x.flip(dims));
    Tensor target = ctx.zeros(s, t);
    forge::flip_into(target, x, dims);
    check(target);
  }
}

TEST_CASE("flip: bad input", "[shape_ops]") {
  TestContext ctx;
  Tensor x = ctx.zeros({2, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "flip", (void)forge::flip(x, {0, -2}));
  FORGE_REQUIRE_ERROR(out_of_range, "flip", (void)forge::flip(x, {2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "flip", (void)forge::flip(Tensor(), {0}));
  FORGE_REQUIRE_ERROR(invalid_argument, "flip_into", forge::flip_into(x, x, {0}));  // in place would read what it wrote
  Tensor out = ctx.zeros({3, 2});
  FORGE_REQUIRE_ERROR(shape, "flip_into", forge::flip_into(out, x, {0}));
}

}  // namespace
