// Tensor::index and Tensor::index_put_ (forge/ops/indexing.h) against values
// worked out by hand on x = arange(24) as [2, 3, 4] (x[a, b, c] = 12a + 4b + c):
// views for integers, slices, None and Ellipsis; copies for integer tensors
// (broadcast, adjacent and separated), masks and bool scalars; writes with
// tensors and scalars; libtorch's errors; gradients checked in f64.

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge::indexing::Ellipsis;
using forge::indexing::None;
using forge::indexing::Slice;
using forge::indexing::TensorIndex;
using forge_test::check_gradients;
using forge_test::TestContext;

namespace {

using In = std::vector<Tensor>;
using I64 = std::vector<std::int64_t>;

Tensor x_of(TestContext& ctx, DType dtype = DType::f32) { return ctx.arange(0, 24, 1, dtype).reshape({2, 3, 4}); }
double at(std::int64_t a, std::int64_t b, std::int64_t c) { return static_cast<double>(12 * a + 4 * b + c); }

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
bool shares(const Tensor& a, const Tensor& b) { return a.buffer().get() == b.buffer().get(); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Tensor ix(TestContext& ctx, const I64& v, const Shape& shape) { return ctx.from_vector(v, shape); }
Tensor ix(TestContext& ctx, const I64& v) { return ctx.from_vector(v); }

// Weights the output so that a wrong placement of the gradient shows.
Tensor weighted(const Tensor& y) {
  Tensor w = forge::arange(0, static_cast<double>(y.numel()), 1, y.dtype()).reshape(y.shape());
  return y * (w + 1.0);
}

}  // namespace

TEST_CASE("tensor indexing: integers, slices, None and Ellipsis give views of the picked elements") {
  TestContext ctx;
  const Tensor x = x_of(ctx);
  const Tensor row = x.index({1});
  CHECK(row.shape() == Shape{3, 4});
  CHECK(shares(row, x));
  CHECK(values(row) == values(ctx.arange(12, 24, 1, DType::f32)));

  const Tensor a = x.index({-1, Slice(1, None), -1});  // x[1, 1:, 3]
  CHECK(a.shape() == Shape{2});
  CHECK(values(a) == std::vector<double>{at(1, 1, 3), at(1, 2, 3)});
  CHECK(shares(a, x));

  const Tensor b = x.index({Slice(None, None, 2), None, Slice(), 0});  // x[::2, None, :, 0]
  CHECK(b.shape() == Shape{1, 1, 3});
  CHECK(values(b) == std::vector<double>{at(0, 0, 0), at(0, 1, 0), at(0, 2, 0)});

  const Tensor c = x.index({0, Slice(-2, None), Slice(1, -1)});  // x[0, -2:, 1:-1]
  CHECK(c.shape() == Shape{2, 2});
  CHECK(values(c) == std::vector<double>{at(0, 1, 1), at(0, 1, 2), at(0, 2, 1), at(0, 2, 2)});

  const Tensor d = x.index({Ellipsis, 1});  // x[..., 1]
  CHECK(d.shape() == Shape{2, 3});
  CHECK(values(d) == std::vector<double>{1, 5, 9, 13, 17, 21});
  CHECK(x.index({"...", None}).shape() == Shape{2, 3, 4, 1});
  CHECK(values(x.index({0, Ellipsis, 2})) == std::vector<double>{2, 6, 10});
  CHECK(x.index({Slice(5, 9)}).shape() == Shape{0, 3, 4});  // clamped, as Python slices

  const Tensor all = x.index({});
  CHECK(all.shape() == x.shape());
  CHECK(shares(all, x));
  CHECK_FALSE(all.is_same(x));
  // A 0-d integer tensor indexes as an integer: a view.
  const Tensor e = x.index({1, ix(ctx, {2}, Shape{})});
  CHECK(e.shape() == Shape{4});
  CHECK(shares(e, x));
  CHECK(values(e) == std::vector<double>{20, 21, 22, 23});
}

TEST_CASE("tensor indexing: integer tensors broadcast together, adjacent ones stay in place and separated ones lead") {
  TestContext ctx;
  const Tensor x = x_of(ctx);
  const Tensor r = x.index({ix(ctx, {1, 0, -1})});
  CHECK(r.shape() == Shape{3, 3, 4});
  CHECK_FALSE(shares(r, x));
  std::vector<double> want;
  for (std::int64_t a : {1, 0, 1})
    for (std::int64_t b = 0; b < 3; ++b)
      for (std::int64_t c = 0; c < 4; ++c) want.push_back(at(a, b, c));
  CHECK(values(r) == want);

  // x[:, [2, 0]] with i32 indices.
  const Tensor s = x.index({Slice(), ctx.from_vector(std::vector<std::int32_t>{2, 0})});
  CHECK(s.shape() == Shape{2, 2, 4});
  want.clear();
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b : {2, 0})
      for (std::int64_t c = 0; c < 4; ++c) want.push_back(at(a, b, c));
  CHECK(values(s) == want);

  // x[:, [0, 2], [1, 3]]: adjacent, the broadcast dim replaces dims 1 and 2.
  const Tensor t = x.index({Slice(), ix(ctx, {0, 2}), ix(ctx, {1, 3})});
  CHECK(t.shape() == Shape{2, 2});
  CHECK(values(t) == std::vector<double>{at(0, 0, 1), at(0, 2, 3), at(1, 0, 1), at(1, 2, 3)});

  // x[[[0], [1]], [0, 1, 2]]: shapes [2, 1] and [3] broadcast to [2, 3].
  const Tensor u = x.index({ix(ctx, {0, 1}, {2, 1}), ix(ctx, {0, 1, 2})});
  CHECK(u.shape() == Shape{2, 3, 4});
  CHECK(values(u) == values(x));

  // x[[0, 1], :, [3, 0]]: separated, the broadcast dim leads.
  const Tensor v = x.index({ix(ctx, {0, 1}), Slice(), ix(ctx, {3, 0})});
  CHECK(v.shape() == Shape{2, 3});
  CHECK(values(v) == std::vector<double>{at(0, 0, 3), at(0, 1, 3), at(0, 2, 3), at(1, 0, 0), at(1, 1, 0), at(1, 2, 0)});

  // x[1:, None, [1], 2]: the integer is a select (a view), not an advanced index.
  const Tensor w = x.index({Slice(1, None), None, ix(ctx, {1}), 2});
  CHECK(w.shape() == Shape{1, 1, 1});
  CHECK(values(w) == std::vector<double>{at(1, 1, 2)});
}

TEST_CASE("tensor indexing: bool masks pick their true entries and bool scalars add a dim") {
  TestContext ctx;
  const Tensor x = x_of(ctx);
  const Tensor mask = x.index({Ellipsis, 0}).gt(6.0);  // x[a, b, 0] > 6: (0, 2), (1, 0), (1, 1), (1, 2)
  const Tensor m = x.index({mask});
  CHECK(m.shape() == Shape{4, 4});
  std::vector<double> want;
  for (auto [a, b] : {std::pair{0, 2}, {1, 0}, {1, 1}, {1, 2}})
    for (std::int64_t c = 0; c < 4; ++c) want.push_back(at(a, b, c));
  CHECK(values(m) == want);

  const Tensor cols = x.index({Slice(), ctx.from_vector(std::vector<bool>{true, false, true})});
  CHECK(cols.shape() == Shape{2, 2, 4});
  CHECK(values(cols) == values(x.index({Slice(), Slice(None, None, 2)})));
  const Tensor none = x.index({x.gt(100.0)});
  CHECK(none.shape() == Shape{0});

  CHECK(x.index({true}).shape() == Shape{1, 2, 3, 4});
  CHECK(values(x.index({true})) == values(x));
  CHECK(x.index({false}).shape() == Shape{0, 2, 3, 4});
  CHECK(x.index({0, true}).shape() == Shape{1, 3, 4});
  CHECK(x.index({ctx.from_vector(std::vector<bool>{true}, Shape{})}).shape() == Shape{1, 2, 3, 4});
}

TEST_CASE("tensor indexing: bad indices fail as libtorch's, naming the dim and the size") {
  TestContext ctx;
  Tensor x = x_of(ctx);
  CHECK(contains(FORGE_REQUIRE_ERROR(out_of_range, "index", x.index({2})),
                 "index 2 is out of bounds for dimension 0 with size 2"));
  CHECK(contains(FORGE_REQUIRE_ERROR(out_of_range, "index", x.index({Slice(), -4})),
                 "index -4 is out of bounds for dimension 1 with size 3"));
  CHECK(contains(FORGE_REQUIRE_ERROR(out_of_range, "index", x.index({None, 0, Slice(), ix(ctx, {1, 4})})),
                 "index 4 is out of bounds for dimension 2 with size 4"));
  CHECK(contains(FORGE_REQUIRE_ERROR(out_of_range, "index", x.index({0, 0, 0, 0})),
                 "too many indices for tensor of dimension 3 (got 4)"));
  CHECK(contains(FORGE_REQUIRE_ERROR(out_of_range, "index", x.index({x.gt(1.0), 0})),
                 "too many indices for tensor of dimension 3 (got 4)"));
  CHECK(contains(FORGE_REQUIRE_ERROR(dtype, "index", x.index({x})),
                 "tensors used as indices must be long, int or bool tensors, got f32"));
  FORGE_REQUIRE_ERROR(invalid_argument, "index", x.index({Ellipsis, 0, Ellipsis}));
  FORGE_REQUIRE_ERROR(invalid_argument, "index", x.index({Slice(None, None, 0)}));
  FORGE_REQUIRE_ERROR(invalid_argument, "TensorIndex", TensorIndex(".."));
  FORGE_REQUIRE_ERROR(shape, "index", x.index({ix(ctx, {0, 1}), ix(ctx, {0, 1, 2})}));
  CHECK(contains(FORGE_REQUIRE_ERROR(shape, "index", x.index({ctx.from_vector(std::vector<bool>{true, false, true})})) +
                     FORGE_REQUIRE_ERROR(shape, "index", x.index({x.index({0}).gt(1.0)})),
                 "does not match the shape of the indexed tensor"));
  CHECK(contains(FORGE_REQUIRE_ERROR(shape, "index_put_", x.index_put_({0}, ctx.ones({2, 4}))),
                 "value tensor of shape [2, 4] cannot be broadcast to indexing result of shape [3, 4]"));
  FORGE_REQUIRE_ERROR(shape, "index_put_", x.index_put_({ix(ctx, {0, 1})}, ctx.ones({3, 3, 4})));
  CHECK(values(x) == values(x_of(ctx)));  // nothing was written
}

TEST_CASE("tensor indexing: index_put_ writes through views, integer tensors and masks, and bumps the version") {
  TestContext ctx;
  Tensor y = ctx.zeros({2, 3, 4});
  const std::uint32_t v0 = y.version();
  y.index_put_({0, Slice(1, None)}, 7);
  CHECK(y.version() != v0);
  CHECK(values(y.index({0, Slice(1, None)})) == std::vector<double>(8, 7.0));
  CHECK(values(y.sum()) == std::vector<double>{56.0});

  // x[:, [2, 0]] = [1, 2, 3, 4] (broadcast over both rows and the two picked columns), from i64 values.
  Tensor x = x_of(ctx);
  x.index_put_({Slice(), ix(ctx, {2, 0})}, ix(ctx, {1, 2, 3, 4}));
  std::vector<double> want = values(x_of(ctx));
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b : {2, 0})
      for (std::int64_t c = 0; c < 4; ++c)
        want[static_cast<std::size_t>(12 * a + 4 * b + c)] = static_cast<double>(c + 1);
  CHECK(values(x) == want);

  // Separated indices: x[[0, 1], :, [3, 0]] = v of shape [2, 3] (leading 1s dropped from [1, 2, 3]).
  x = x_of(ctx);
  x.index_put_({ix(ctx, {0, 1}), Slice(), ix(ctx, {3, 0})}, ctx.arange(100, 106, 1).reshape({1, 2, 3}));
  want = values(x_of(ctx));
  for (std::int64_t b = 0; b < 3; ++b) {
    want[static_cast<std::size_t>(4 * b + 3)] = static_cast<double>(100 + b);
    want[static_cast<std::size_t>(12 + 4 * b)] = static_cast<double>(103 + b);
  }
  CHECK(values(x) == want);

  // A repeated index keeps the last value listed.
  Tensor z = ctx.zeros({3});
  z.index_put_({ix(ctx, {1, 1, -1})}, ctx.from_vector(std::vector<float>{5, 6, 8}));
  CHECK(values(z) == std::vector<double>{0, 6, 8});

  // A mask.
  x = x_of(ctx);
  x.index_put_({x.gt(10.0)}, -1.5);
  want = values(x_of(ctx));
  for (double& w : want)
    if (w > 10) w = -1.5;
  CHECK(values(x) == want);

  // Into a transposed (strided) target, with Ellipsis and a bool scalar.
  Tensor t = ctx.zeros({4, 3}).t();
  t.index_put_({Ellipsis, ix(ctx, {3}), true}, 2);
  CHECK(values(t.t().contiguous()) == std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2});
  t.index_put_({false}, 9);  // writes nothing
  CHECK(values(t.sum()) == std::vector<double>{6.0});
}

TEST_CASE("tensor indexing: gradients of basic and advanced indexing (f64 gradcheck)") {
  TestContext ctx;
  auto leaf = [&](const Shape& s) { return ctx.randn(s, DType::f64).requires_grad_(); };
  const Tensor i = ix(ctx, {2, 0, 2});  // a repeated index: its gradient adds up
  const Tensor mask = ctx.from_vector(std::vector<bool>{true, false, true, true}, {2, 2});
  check_gradients(
      [](const In& in) {
        return weighted(in[0].index({1, Slice(None, None, 2), None, -1}));
      },
      {leaf({2, 3, 4})});
  check_gradients([&](const In& in) { return weighted(in[0].index({Slice(), i})); }, {leaf({2, 3, 4})});
  check_gradients(
      [&](const In& in) {
        return weighted(in[0].index({i, Slice(), ix(ctx, {0, 3, 1})}));
      },
      {leaf({3, 2, 4})});
  check_gradients([&](const In& in) { return weighted(in[0].index({Ellipsis, mask})); }, {leaf({3, 2, 2})});
  check_gradients([](const In& in) { return weighted(in[0].index({true, Slice(1, None)})); }, {leaf({3, 2})});

  // By hand: y = x[[2, 0, 2]].sum() gives x.grad = [1, 0, 2] per row.
  Tensor x = ctx.ones({3, 2}, DType::f64).requires_grad_();
  x.index({i}).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{1, 1, 0, 0, 2, 2});
  // Basic indexing records view ops only.
  const Tensor v = x.index({1, Slice()});
  CHECK(std::string(v.grad_fn_name()) == "slice");
  CHECK(shares(v, x));
}

TEST_CASE("tensor indexing: index_put_ under autograd gives self and values their gradients") {
  TestContext ctx;
  const Tensor i = ix(ctx, {2, 0});
  const Tensor mask = ctx.from_vector(std::vector<bool>{true, false, false, true, true, false}, {3, 2});
  auto put = [](const Tensor& base, std::vector<TensorIndex> idx, const Tensor& values) {
    Tensor y = base * 1.0;
    y.index_put_(idx, values);
    return weighted(y);
  };
  auto leaf = [&](const Shape& s) { return ctx.randn(s, DType::f64).requires_grad_(); };
  check_gradients([&](const In& in) { return put(in[0], {i}, in[1]); }, {leaf({3, 4}), leaf({2, 4})});
  check_gradients([&](const In& in) { return put(in[0], {Slice(), i}, in[1]); }, {leaf({2, 3}), leaf({2})});
  check_gradients([&](const In& in) { return put(in[0], {mask}, in[1]); }, {leaf({3, 2, 2}), leaf({1, 2})});
  check_gradients([&](const In& in) { return put(in[0], {0, Slice(1, None)}, in[1]); }, {leaf({2, 3}), leaf({1})});

  // By hand: y = 2x; y[[2, 0]] = v; sum(y) gives x.grad 2 off the written rows, v.grad = 2 per row.
  const Tensor x = ctx.ones({3, 2}, DType::f64).requires_grad_();
  const Tensor v = ctx.ones({2}, DType::f64).requires_grad_();
  Tensor y = x * 2.0;
  y.index_put_({i}, v);
  CHECK(std::string(y.grad_fn_name()) == "index_put_");
  y.sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 0, 2, 2, 0, 0});
  CHECK(values(v.grad()) == std::vector<double>{2, 2});

  // libtorch's restrictions: no in-place write into a leaf that requires grad, nor (in forge) into a view.
  Tensor leaf_x = ctx.ones({3}).requires_grad_();
  FORGE_REQUIRE_ERROR(backward, "index_put_", leaf_x.index_put_({0}, 1.0));
  Tensor view = (leaf_x * 2.0).index({Slice(1, None)});
  FORGE_REQUIRE_ERROR(not_implemented, "index_put_", view.index_put_({0}, 1.0));
  {
    forge::autograd::NoGradGuard no_grad;
    leaf_x.index_put_({0}, 5.0);
  }
  CHECK(values(leaf_x) == std::vector<double>{5, 1, 1});
}

TEST_CASE("tensor indexing: a 0-d tensor takes None and Ellipsis, and no integer") {
  TestContext ctx;
  const Tensor s = ctx.full({}, 3.5);
  CHECK(s.index({None}).shape() == Shape{1});
  CHECK(values(s.index({None, None})) == std::vector<double>{3.5});
  CHECK(s.index({Ellipsis}).shape() == Shape{});
  CHECK(s.index({true}).shape() == Shape{1});
  CHECK(contains(FORGE_REQUIRE_ERROR(out_of_range, "index", s.index({0})),
                 "too many indices for tensor of dimension 0 (got 1)"));
  Tensor t = ctx.full({}, 1.0);
  t.index_put_({}, 2.0);
  t.index_put_({Ellipsis}, ctx.full({1, 1}, 4.0));
  CHECK(t.item<double>() == 4.0);
}

TEST_CASE("tensor indexing: index_put_ records values that require grad into a tensor that does not") {
  TestContext ctx;
  Tensor y = ctx.zeros({3, 2}, DType::f64);
  const Tensor v = ctx.from_vector(std::vector<double>{1, 2}).requires_grad_();
  y.index_put_({ix(ctx, {0, 2, 0})}, v);  // row 0 twice: the last write wins, both get gradients
  CHECK(values(y) == std::vector<double>{1, 2, 0, 0, 1, 2});
  REQUIRE(y.requires_grad());
  CHECK(std::string(y.grad_fn_name()) == "index_put_");
  (y * ctx.from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2})).sum().backward();
  CHECK(values(v.grad()) == std::vector<double>{1 + 5 + 1, 2 + 6 + 2});
}

TEST_CASE("tensor indexing: index_put_ into a tensor a node saved makes that node's backward refuse") {
  TestContext ctx;
  const Tensor x = ctx.ones({3}, DType::f64).requires_grad_();
  Tensor y = x * 2.0;
  const Tensor z = y * y;  // saves y
  y.index_put_({0}, 5.0);
  FORGE_REQUIRE_ERROR(backward, "mul", z.sum().backward());
}
