// Gradients of the reductions and cumsum: finite-difference checks over
// every dims/keepdim/correction/p form, non-contiguous inputs, prod's zero
// cases, the even split among tied maxima, and the ops that must not record.

#include <catch2/catch.hpp>
#include <limits>
#include <vector>

#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::DimList;
using forge::DType;
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

Tensor leaf(TestContext& ctx, const forge::Shape& shape) { return ctx.randn(shape, DType::f64).requires_grad_(); }

// The dims forms every reduction is checked over, on a rank-2 input.
const std::vector<DimList> kDims = {DimList(), DimList(1), DimList(-2), DimList{0, 1}};

}  // namespace

TEST_CASE("autograd reduce: mean over each dims and keepdim form, strided input") {
  TestContext ctx;
  for (const DimList& dims : kDims) {
    for (bool keepdim : {false, true}) {
      check_gradients([&](const In& in) { return forge::mean(in[0], dims, keepdim); }, {strided_leaf(ctx)});
    }
  }
  Tensor x = ctx.from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_();
  x.mean(1).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0.5, 0.5, 0.5, 0.5});
}

TEST_CASE("autograd reduce: prod without zeros over each dims form") {
  TestContext ctx;
  for (const DimList& dims : kDims) {
    for (bool keepdim : {false, true}) {
      check_gradients([&](const In& in) { return forge::prod(in[0], dims, keepdim); }, {strided_leaf(ctx)});
    }
  }
}

TEST_CASE("autograd reduce: prod with one zero gives the product of the others there, two zeros give 0") {
  TestContext ctx;
  // Row 0: no zero. Row 1: one zero. Row 2: two zeros.
  Tensor x = ctx.from_vector<double>({2, 3, 4, 2, 0, 5, 0, 3, 0}, {3, 3}).requires_grad_();
  x.prod(1).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{12, 8, 6, 0, 10, 0, 0, 0, 0});
  // prod is multilinear, so the finite differences are exact at the zeros too.
  Tensor y = ctx.from_vector<double>({2, 3, 4, 2, 0, 5, 0, 3, 0}, {3, 3}).requires_grad_();
  check_gradients([](const In& in) { return forge::prod(in[0], 1); }, {y});
  check_gradients([](const In& in) { return forge::prod(in[0]); }, {y});
  check_gradients([](const In& in) { return forge::prod(in[0], 0, true); }, {y});
}

TEST_CASE("autograd reduce: amax and amin over each dims form, max and min over everything") {
  TestContext ctx;
  for (const DimList& dims : kDims) {
    for (bool keepdim : {false, true}) {
      check_gradients([&](const In& in) { return forge::amax(in[0], dims, keepdim); }, {strided_leaf(ctx)});
      check_gradients([&](const In& in) { return forge::amin(in[0], dims, keepdim); }, {strided_leaf(ctx)});
    }
  }
  check_gradients([](const In& in) { return forge::max(in[0]); }, {strided_leaf(ctx)});
  check_gradients([](const In& in) { return forge::min(in[0]); }, {strided_leaf(ctx)});
}

TEST_CASE("autograd reduce: tied maxima and minima share the gradient evenly") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 3, 3, 2, 5, 0, 5, 5}, {2, 4}).requires_grad_();
  x.amax(1).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 0.5, 0.5, 0, 1.0 / 3, 0, 1.0 / 3, 1.0 / 3});
  Tensor y = ctx.from_vector<double>({1, 3, 1, 2}, {4}).requires_grad_();
  y.min().backward();
  CHECK(values(y.grad()) == std::vector<double>{0.5, 0, 0.5, 0});
  Tensor z = ctx.from_vector<double>({4, 4, 1, 4}, {4}).requires_grad_();
  (z.max() * 6.0).backward();
  CHECK(values(z.grad()) == std::vector<double>{2, 2, 0, 2});
  // A NaN is the extreme: the NaNs share the gradient.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor n = ctx.from_vector<double>({1, nan, 3, nan, 2, 0}, {2, 3}).requires_grad_();
  n.amax(1).sum().backward();
  CHECK(values(n.grad()) == std::vector<double>{0, 1, 0, 1, 0, 0});
}

TEST_CASE("autograd reduce: max and min along a dim send the gradient to the index") {
  TestContext ctx;
  for (std::int64_t dim : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      check_gradients([&](const In& in) { return forge::max(in[0], dim, keepdim).values; }, {strided_leaf(ctx)});
      check_gradients([&](const In& in) { return forge::min(in[0], dim, keepdim).values; }, {strided_leaf(ctx)});
    }
  }
  // Ties: the first index takes it all, as the index says.
  Tensor x = ctx.from_vector<double>({2, 7, 7, 1}, {2, 2}).requires_grad_();
  auto r = x.max(1);
  CHECK_FALSE(r.indices.requires_grad());
  CHECK(std::string(r.values.grad_fn_name()) == "max");
  r.values.sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 1, 1, 0});
}

TEST_CASE("autograd reduce: var and std with each correction and dims form") {
  TestContext ctx;
  for (const DimList& dims : kDims) {
    for (std::int64_t correction : {0, 1, 2}) {
      const bool keepdim = correction == 1;
      check_gradients([&](const In& in) { return forge::var(in[0], dims, correction, keepdim); }, {strided_leaf(ctx)});
      check_gradients([&](const In& in) { return forge::std(in[0], dims, correction, keepdim); }, {strided_leaf(ctx)});
    }
  }
}

TEST_CASE("autograd reduce: logsumexp over each dims form") {
  TestContext ctx;
  for (const DimList& dims : {DimList(1), DimList(0), DimList{0, 1}, DimList{-1}}) {
    for (bool keepdim : {false, true}) {
      check_gradients([&](const In& in) { return forge::logsumexp(in[0], dims, keepdim); }, {strided_leaf(ctx)});
    }
  }
}

TEST_CASE("autograd reduce: norm p=1 and p=2, and a zero norm gives a zero gradient") {
  TestContext ctx;
  for (double p : {1.0, 2.0}) {
    for (const DimList& dims : kDims) {
      for (bool keepdim : {false, true}) {
        check_gradients([&](const In& in) { return forge::norm(in[0], p, dims, keepdim); }, {strided_leaf(ctx)});
      }
    }
  }
  Tensor x = ctx.from_vector<double>({0, 0, 3, 4}, {2, 2}).requires_grad_();
  x.norm(2.0, 1).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 0, 0.6, 0.8});
  Tensor y = ctx.from_vector<double>({-2, 3}, {2}).requires_grad_();
  y.norm(1.0).backward();
  CHECK(values(y.grad()) == std::vector<double>{-1, 1});
}

TEST_CASE("autograd reduce: cumsum along each dim is a reversed cumsum of the gradient") {
  TestContext ctx;
  for (std::int64_t dim : {0, 1, -1}) {
    check_gradients([&](const In& in) { return forge::cumsum(in[0], dim); }, {strided_leaf(ctx)});
  }
  Tensor x = ctx.from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  x.cumsum(0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{3, 2, 1});
}

TEST_CASE("autograd reduce: 0-d inputs and 3-d inputs") {
  TestContext ctx;
  Tensor s = ctx.from_vector<double>({1.5}, {}).requires_grad_();
  check_gradients([](const In& in) { return forge::mean(in[0]) + forge::prod(in[0], 0) + forge::amax(in[0]); }, {s});
  check_gradients([](const In& in) { return forge::logsumexp(in[0], 0) + forge::cumsum(in[0], 0); }, {s});
  check_gradients([](const In& in) { return forge::max(in[0], 0).values + forge::norm(in[0]); }, {s});
  Tensor x = leaf(ctx, {2, 3, 4});
  check_gradients([](const In& in) { return forge::var(in[0], {0, 2}, 1, true); }, {x});
  check_gradients([](const In& in) { return forge::prod(in[0], {2, 0}); }, {x});
  check_gradients([](const In& in) { return forge::mean(in[0], {-1, 1}); }, {x});
}

TEST_CASE("autograd reduce: argmax, argmin, all, any and comparisons do not require grad") {
  TestContext ctx;
  Tensor x = strided_leaf(ctx);
  CHECK_FALSE(x.argmax().requires_grad());
  CHECK_FALSE(x.argmin().requires_grad());
  CHECK_FALSE(x.argmax(1).requires_grad());
  CHECK_FALSE(x.argmin(0, true).requires_grad());
  CHECK_FALSE(x.gt(0.0).all().requires_grad());
  CHECK_FALSE(x.gt(0.0).any(1).requires_grad());
  CHECK(x.sum(1).requires_grad());
  CHECK(x.cumsum(0).requires_grad());
}
