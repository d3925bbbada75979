// Gradients of the views, copies and casts (Tensor methods) and of the shape
// ops (cat, stack, split, chunk, repeat, flip): finite-difference checks with
// non-contiguous inputs, the names views record under, view_with_strides'
// overlapping outputs and refusals, and detach() recording nothing.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::DType;
using forge::Shape;
using forge::Strides;
using forge::Tensor;
using forge_test::check_gradients;
using forge_test::TestContext;

namespace {

using In = std::vector<Tensor>;

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// A [3, 4] leaf whose elements are not contiguous (a transposed [4, 3]).
Tensor strided_leaf(TestContext& ctx) {
  Tensor x = ctx.randn({4, 3}, DType::f64).t();
  x.requires_grad_();
  return x;
}

Tensor leaf(TestContext& ctx, const Shape& shape) { return ctx.randn(shape, DType::f64).requires_grad_(); }

// Weights the output so that a wrong placement of the gradient shows.
Tensor weighted(const Tensor& y) {
  Tensor w = forge::arange(0, static_cast<double>(y.numel()), 1, y.dtype()).reshape(y.shape());
  return y * (w + 1.0);
}

std::string name(const Tensor& t) { return t.grad_fn_name() ? t.grad_fn_name() : ""; }

}  // namespace

TEST_CASE("autograd views: clone_view, view, reshape, flatten and their names") {
  TestContext ctx;
  check_gradients([](const In& in) { return weighted(in[0].clone_view()); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].view({2, -1, 3})); }, {leaf(ctx, {3, 4})});
  // A transposed input reshapes through a copy (clone + view), a contiguous one through a view.
  check_gradients([](const In& in) { return weighted(in[0].reshape({12})); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].reshape({4, 3})); }, {leaf(ctx, {2, 6})});
  check_gradients([](const In& in) { return weighted(in[0].flatten()); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].flatten(1, 2)); }, {leaf(ctx, {2, 3, 2})});
  Tensor x = leaf(ctx, {3, 4});
  CHECK(name(x.clone_view()) == "clone_view");
  CHECK(name(x.view({12})) == "view");
  CHECK(name(x.reshape({4, 3})) == "reshape");
  CHECK(name(x.t().reshape({12})) == "view");  // the copy, viewed
  CHECK(name(x.t().contiguous()) == "clone");
  CHECK(x.contiguous().is_same(x));
}

TEST_CASE("autograd views: broadcast_to and expand sum over the broadcast dims") {
  TestContext ctx;
  check_gradients([](const In& in) { return weighted(in[0].broadcast_to({2, 3, 4})); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].expand({3, -1, 4})); }, {leaf(ctx, {2, 1})});
  Tensor x = ctx.from_vector<double>({1, 2}, {2, 1}).requires_grad_();
  Tensor y = x.expand({2, 3});
  CHECK(name(y) == "expand");
  y.sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{3, 3});
}

TEST_CASE("autograd views: narrow, slice with a step and select put the gradient in place") {
  TestContext ctx;
  check_gradients([](const In& in) { return weighted(in[0].narrow(1, 1, 2)); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].narrow(-2, -2, 2)); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].slice(1, 0, 4, 2)); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].slice(0, -2, 100, 3)); }, {leaf(ctx, {7, 2})});
  check_gradients([](const In& in) { return weighted(in[0].slice(1, 3, 1)); }, {strided_leaf(ctx)});  // empty
  check_gradients([](const In& in) { return weighted(in[0].select(1, -1)); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].select(0, 1)); }, {strided_leaf(ctx)});
  Tensor x = ctx.from_vector<double>({1, 2, 3, 4, 5}, {5}).requires_grad_();
  x.slice(0, 1, 5, 2).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 1, 0, 1, 0});
}

TEST_CASE("autograd views: permute, transpose and t go back through the inverse") {
  TestContext ctx;
  check_gradients([](const In& in) { return weighted(in[0].permute({2, 0, 1})); }, {leaf(ctx, {2, 3, 4})});
  check_gradients([](const In& in) { return weighted(in[0].permute({-1, 0, 1})); }, {leaf(ctx, {2, 3, 4})});
  check_gradients([](const In& in) { return weighted(in[0].transpose(0, -1)); }, {leaf(ctx, {2, 3, 4})});
  check_gradients([](const In& in) { return weighted(in[0].t()); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].t()); }, {leaf(ctx, {3})});
}

TEST_CASE("autograd views: squeeze both forms and unsqueeze") {
  TestContext ctx;
  check_gradients([](const In& in) { return weighted(in[0].squeeze()); }, {leaf(ctx, {1, 3, 1, 2})});
  check_gradients([](const In& in) { return weighted(in[0].squeeze(2)); }, {leaf(ctx, {1, 3, 1, 2})});
  check_gradients([](const In& in) { return weighted(in[0].squeeze(1)); }, {leaf(ctx, {1, 3, 1, 2})});  // no-op
  check_gradients([](const In& in) { return weighted(in[0].unsqueeze(1)); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].unsqueeze(-1)); }, {strided_leaf(ctx)});
}

TEST_CASE("autograd views: to() casts the gradient back to the input's dtype") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  Tensor y = x.to(DType::f32);
  CHECK(name(y) == "to");
  (y * y).sum().backward();
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(values(x.grad()) == std::vector<double>{2, 4, 6});
  CHECK(x.to(DType::f64).is_same(x));
  // A cast loses the finite differences' precision one way: check the other way by hand.
  Tensor f = ctx.from_vector<float>({1, 2}, {2}).t();
  f.requires_grad_();
  (f.to(DType::f64) * ctx.from_vector<double>({3, 4}, {2})).sum().backward();
  CHECK(f.grad().dtype() == DType::f32);
  CHECK(values(f.grad()) == std::vector<double>{3, 4});
}

TEST_CASE("autograd views: view_with_strides scatters into the input, summing where the view repeats") {
  TestContext ctx;
  // Sliding windows of 2 over 5 elements: the middle ones are read twice.
  auto windows = [](const In& in) { return weighted(in[0].view_with_strides({4, 2}, {1, 1}, in[0].offset())); };
  check_gradients(windows, {leaf(ctx, {5})});
  Tensor x = ctx.from_vector<double>({1, 2, 3, 4, 5}, {5}).requires_grad_();
  x.view_with_strides({4, 2}, {1, 1}, 0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{1, 2, 2, 2, 1});
  // On a transposed leaf: the geometry is the buffer's, the gradient x's.
  Tensor t = ctx.from_vector<double>({0, 1, 2, 3, 4, 5}, {2, 3}).t();
  t.requires_grad_();
  Tensor rows = t.view_with_strides({2, 3}, {3, 1}, 0);  // t's buffer read row by row: t transposed
  rows.sum(0).mul(ctx.from_vector<double>({1, 10, 100}, {3})).sum().backward();
  CHECK(values(t.grad()) == std::vector<double>{1, 1, 10, 10, 100, 100});
}

TEST_CASE("autograd views: view_with_strides refuses an overlapping input or an element outside the input") {
  TestContext ctx;
  Tensor base = leaf(ctx, {2});
  Tensor expanded = base.detach().expand({3, 2});
  expanded.requires_grad_();
  FORGE_REQUIRE_ERROR(not_implemented, "view_with_strides", expanded.view_with_strides({2}, {1}, 0));
  Tensor x = ctx.randn({4}, DType::f64);
  Tensor head = x.narrow(0, 0, 2);
  head.requires_grad_();
  FORGE_REQUIRE_ERROR(not_implemented, "view_with_strides", head.view_with_strides({3}, {1}, 0));
  {
    forge::autograd::NoGradGuard no_grad;
    CHECK(head.view_with_strides({3}, {1}, 0).numel() == 3);
  }
}

TEST_CASE("autograd views: detach records nothing, a view of a tensor that requires grad requires grad") {
  TestContext ctx;
  Tensor x = strided_leaf(ctx);
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.narrow(0, 0, 1).grad_fn_name() == nullptr);
  Tensor h = x * 2.0;
  Tensor v = h.select(0, 1);
  CHECK(v.requires_grad());
  CHECK(name(v) == "select");
  FORGE_REQUIRE_ERROR(not_implemented, "mul_", v.mul_(2.0));
  forge::autograd::NoGradGuard no_grad;
  CHECK_FALSE(h.narrow(0, 0, 1).requires_grad());
}

// ---- shape ops ----

TEST_CASE("autograd shape: cat along each dim, with a skipped empty input and one that wants no grad") {
  TestContext ctx;
  for (std::int64_t dim : {0, 1, -1}) {
    check_gradients(
        [&](const In& in) {
          return weighted(forge::cat({in[0], in[1], in[2]}, dim));
        },
        {strided_leaf(ctx), leaf(ctx, {3, 4}), strided_leaf(ctx)});
  }
  Tensor fixed = ctx.randn({1, 4}, DType::f64);
  Tensor empty = ctx.zeros({0}, DType::f64).requires_grad_();
  check_gradients(
      [&](const In& in) {
        return weighted(forge::cat({in[0], in[1], in[2], in[3]}, 0));
      },
      {leaf(ctx, {2, 4}), empty, fixed, strided_leaf(ctx)});
  Tensor a = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor b = ctx.from_vector<double>({3}, {1}).requires_grad_();
  Tensor c = forge::cat({a, b});
  CHECK(name(c) == "cat");
  (c * ctx.from_vector<double>({1, 2, 3}, {3})).sum().backward();
  CHECK(values(a.grad()) == std::vector<double>{1, 2});
  CHECK(values(b.grad()) == std::vector<double>{3});
}

TEST_CASE("autograd shape: stack along each dim") {
  TestContext ctx;
  for (std::int64_t dim : {0, 1, 2, -1}) {
    check_gradients(
        [&](const In& in) {
          return weighted(forge::stack({in[0], in[1]}, dim));
        },
        {strided_leaf(ctx), leaf(ctx, {3, 4})});
  }
  Tensor fixed = ctx.randn({3, 4}, DType::f64);
  check_gradients(
      [&](const In& in) {
        return weighted(forge::stack({in[0], in[1], in[0]}, 1));
      },
      {strided_leaf(ctx), fixed});
}

TEST_CASE("autograd shape: split and chunk pieces record as narrows of the input") {
  TestContext ctx;
  check_gradients(
      [](const In& in) {
        auto p = forge::split(in[0], 2, 1);  // widths 2, 2
        return weighted(forge::cat({p[1] * 3.0, p[0]}, 1));
      },
      {strided_leaf(ctx)});
  check_gradients(
      [](const In& in) {
        auto p = forge::split(in[0], std::vector<std::int64_t>{1, 2}, 0);
        return weighted(p[1] - p[0]);
      },
      {strided_leaf(ctx)});
  check_gradients(
      [](const In& in) {
        auto p = forge::chunk(in[0], 3, -1);  // widths 2, 2, 1 of 5
        return weighted(p[2] * 2.0 + p[0].narrow(1, 1, 1));
      },
      {leaf(ctx, {3, 5})});
  Tensor x = strided_leaf(ctx);
  for (const Tensor& p : x.chunk(2, 1)) CHECK(name(p) == "narrow");
  Tensor y = ctx.from_vector<double>({1, 2, 3, 4, 5}, {5}).requires_grad_();
  y.split(2)[2].sum().backward();  // only the last piece
  CHECK(values(y.grad()) == std::vector<double>{0, 0, 0, 0, 1});
}

TEST_CASE("autograd shape: repeat sums over the tiles, with added leading dims") {
  TestContext ctx;
  check_gradients([](const In& in) { return weighted(in[0].repeat({2, 1})); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].repeat({2, 1, 3})); }, {leaf(ctx, {2, 3})});
  check_gradients([](const In& in) { return weighted(in[0].repeat({1, 3, 1})); }, {leaf(ctx, {1, 2, 3})});
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  x.repeat({3, 2}).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{6, 6});
}

TEST_CASE("autograd shape: flip reverses the gradient") {
  TestContext ctx;
  check_gradients([](const In& in) { return weighted(in[0].flip({0})); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return weighted(in[0].flip({-1, 0})); }, {strided_leaf(ctx)});
  Tensor x = ctx.from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  (x.flip({0}) * ctx.from_vector<double>({1, 2, 3}, {3})).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{3, 2, 1});
}
