// Gradients of the linear-algebra ops (rules/linalg.cpp): every NumPy case of
// matmul, broadcast batch dims, transposed (non-contiguous) operands, linear
// with and without bias at ranks 1 to 3, addmm's beta and alpha, outer, dot.

#include <catch2/catch.hpp>

#include <vector>

#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge_test::check_gradients;
using forge_test::TestContext;

namespace {

Tensor leaf(TestContext& ctx, const Shape& shape) { return ctx.randn(shape, DType::f64).requires_grad_(); }

// A [rows, cols] leaf that is the transpose of a packed [cols, rows] tensor.
Tensor transposed_leaf(TestContext& ctx, std::int64_t rows, std::int64_t cols) {
  Tensor t = ctx.randn({cols, rows}, DType::f64).t();
  t.requires_grad_();
  return t;
}

const forge_test::GradFn kMatmul = [](const std::vector<Tensor>& in) { return forge::matmul(in[0], in[1]); };

}  // namespace

TEST_CASE("autograd linalg: matmul of two matrices, one transposed") {
  TestContext ctx;
  check_gradients(kMatmul, {leaf(ctx, {3, 4}), transposed_leaf(ctx, 4, 2)});
  check_gradients(kMatmul, {transposed_leaf(ctx, 3, 4), leaf(ctx, {4, 2})});
}

TEST_CASE("autograd linalg: matmul with 1-D operands on either side and both") {
  TestContext ctx;
  check_gradients(kMatmul, {leaf(ctx, {4}), leaf(ctx, {4})});
  check_gradients(kMatmul, {leaf(ctx, {4}), leaf(ctx, {4, 3})});
  check_gradients(kMatmul, {leaf(ctx, {3, 4}), leaf(ctx, {4})});
  check_gradients(kMatmul, {leaf(ctx, {4}), leaf(ctx, {2, 4, 3})});
  check_gradients(kMatmul, {leaf(ctx, {2, 3, 4}), leaf(ctx, {4})});
}

TEST_CASE("autograd linalg: matmul broadcasts batch dims and reduces them in each gradient") {
  TestContext ctx;
  check_gradients(kMatmul, {leaf(ctx, {2, 3, 4}), leaf(ctx, {4, 2})});     // batched x, plain weight
  check_gradients(kMatmul, {leaf(ctx, {3, 4}), leaf(ctx, {2, 4, 2})});     // plain x, batched weight
  check_gradients(kMatmul, {leaf(ctx, {2, 1, 2, 3}), leaf(ctx, {3, 3, 2})});  // both broadcast
  Tensor bt = ctx.randn({2, 2, 3}, DType::f64).transpose(1, 2);
  bt.requires_grad_();
  check_gradients(kMatmul, {leaf(ctx, {2, 2, 3}), bt});
}

TEST_CASE("autograd linalg: mm and bmm") {
  TestContext ctx;
  check_gradients([](const std::vector<Tensor>& in) { return forge::mm(in[0], in[1]); },
                  {transposed_leaf(ctx, 3, 4), transposed_leaf(ctx, 4, 2)});
  Tensor b = ctx.randn({2, 2, 3}, DType::f64).transpose(1, 2);
  b.requires_grad_();
  check_gradients([](const std::vector<Tensor>& in) { return forge::bmm(in[0], in[1]); }, {leaf(ctx, {2, 3, 3}), b});
}

TEST_CASE("autograd linalg: linear with and without bias at ranks 1, 2 and 3") {
  TestContext ctx;
  const forge_test::GradFn with_bias = [](const std::vector<Tensor>& in) { return forge::linear(in[0], in[1], in[2]); };
  const forge_test::GradFn no_bias = [](const std::vector<Tensor>& in) { return forge::linear(in[0], in[1]); };
  check_gradients(with_bias, {leaf(ctx, {4}), leaf(ctx, {3, 4}), leaf(ctx, {3})});
  check_gradients(with_bias, {leaf(ctx, {5, 4}), leaf(ctx, {3, 4}), leaf(ctx, {3})});
  check_gradients(with_bias, {leaf(ctx, {2, 3, 4}), transposed_leaf(ctx, 3, 4), leaf(ctx, {3})});
  check_gradients(no_bias, {transposed_leaf(ctx, 5, 4), leaf(ctx, {3, 4})});
  Tensor x3 = ctx.randn({3, 2, 4}, DType::f64).transpose(0, 1);  // rank 3, not packed
  x3.requires_grad_();
  check_gradients(no_bias, {x3, leaf(ctx, {2, 4})});
  // Only the weight wants a gradient (a first layer): x's is not computed.
  Tensor x = ctx.randn({5, 4}, DType::f64);
  check_gradients(with_bias, {x, leaf(ctx, {3, 4}), leaf(ctx, {3})});
}

TEST_CASE("autograd linalg: addmm with beta and alpha and a broadcast bias") {
  TestContext ctx;
  const forge_test::GradFn f = [](const std::vector<Tensor>& in) {
    return forge::addmm(in[0], in[1], in[2], 0.5, -2.0);
  };
  check_gradients(f, {leaf(ctx, {3}), leaf(ctx, {2, 4}), transposed_leaf(ctx, 4, 3)});
  check_gradients(f, {leaf(ctx, {2, 3}), transposed_leaf(ctx, 2, 4), leaf(ctx, {4, 3})});
  check_gradients([](const std::vector<Tensor>& in) { return forge::addmm(in[0], in[1], in[2]); },
                  {leaf(ctx, {2, 1}), leaf(ctx, {2, 4}), leaf(ctx, {4, 3})});
}

TEST_CASE("autograd linalg: outer and dot") {
  TestContext ctx;
  Tensor strided = ctx.randn({4, 2}, DType::f64).select(1, 0);
  strided.requires_grad_();
  check_gradients([](const std::vector<Tensor>& in) { return forge::outer(in[0], in[1]); }, {strided, leaf(ctx, {3})});
  check_gradients([](const std::vector<Tensor>& in) { return forge::dot(in[0], in[1]); }, {leaf(ctx, {4}), strided});
}

TEST_CASE("autograd linalg: linear's gradients match the GEMMs they stand for") {
  TestContext ctx;
  Tensor x = ctx.randn({2, 3, 4}, DType::f64).requires_grad_();
  Tensor w = ctx.randn({5, 4}, DType::f64).requires_grad_();
  Tensor b = ctx.randn({5}, DType::f64).requires_grad_();
  Tensor g = ctx.randn({2, 3, 5}, DType::f64);
  forge::autograd::backward({forge::linear(x, w, b)}, {g});
  const Tensor gx = forge::matmul(g, w), gw = forge::mm(g.reshape({6, 5}).t(), x.detach().reshape({6, 4}));
  const Tensor gb = g.sum({0, 1});
  auto close = [](const Tensor& a, const Tensor& e) {
    const auto va = a.to_vector<double>(), ve = e.to_vector<double>();
    REQUIRE(va.size() == ve.size());
    for (std::size_t i = 0; i < va.size(); ++i) CHECK(va[i] == Approx(ve[i]).epsilon(1e-12));
  };
  close(x.grad(), gx);
  close(w.grad(), gw);
  close(b.grad(), gb);
}

TEST_CASE("autograd linalg: products of tensors that want no gradient record nothing") {
  TestContext ctx;
  Tensor a = ctx.randn({2, 3}), b = ctx.randn({3, 2});
  CHECK_FALSE(forge::matmul(a, b).requires_grad());
  a.requires_grad_();
  {
    forge::autograd::NoGradGuard no_grad;
    CHECK_FALSE(forge::mm(a, b).requires_grad());
  }
  CHECK(forge::mm(a, b).requires_grad());
}
