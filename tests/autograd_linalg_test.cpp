// Gradients of the linear-algebra ops (rules/linalg.cpp): every NumPy case of
// matmul, broadcast batch dims, transposed (non-contiguous) operands, linear
// with and without bias at ranks 1 to 3, addmm's beta and alpha, outer, dot,
// and every product with a zero-size dim in each place it can take.

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <string>
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
  check_gradients(kMatmul, {leaf(ctx, {2, 3, 4}), leaf(ctx, {4, 2})});        // batched x, plain weight
  check_gradients(kMatmul, {leaf(ctx, {3, 4}), leaf(ctx, {2, 4, 2})});        // plain x, batched weight
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

namespace {

// A product op with its inputs' shapes spelled in dim letters: B (batch),
// m (rows), k (contraction), n (columns), or a digit for a fixed size. The
// input at `bias` (if any) is added as beta * bias.
struct ProductCase {
  const char* name;
  std::vector<std::string> inputs;
  forge_test::GradFn fn;
  int bias = -1;
  double beta = 1.0;
};

std::vector<ProductCase> product_cases() {
  const forge_test::GradFn linear = [](const std::vector<Tensor>& in) { return forge::linear(in[0], in[1]); };
  const forge_test::GradFn linear_bias = [](const std::vector<Tensor>& in) {
    return forge::linear(in[0], in[1], in[2]);
  };
  const forge_test::GradFn addmm = [](const std::vector<Tensor>& in) {
    return forge::addmm(in[0], in[1], in[2], 0.5, -2.0);
  };
  const forge_test::GradFn mm = [](const std::vector<Tensor>& in) { return forge::mm(in[0], in[1]); };
  const forge_test::GradFn bmm = [](const std::vector<Tensor>& in) { return forge::bmm(in[0], in[1]); };
  const forge_test::GradFn outer = [](const std::vector<Tensor>& in) { return forge::outer(in[0], in[1]); };
  const forge_test::GradFn dot = [](const std::vector<Tensor>& in) { return forge::dot(in[0], in[1]); };
  return {
      {"matmul", {"k", "k"}, kMatmul},
      {"matmul", {"k", "kn"}, kMatmul},
      {"matmul", {"mk", "k"}, kMatmul},
      {"matmul", {"k", "Bkn"}, kMatmul},
      {"matmul", {"Bmk", "k"}, kMatmul},
      {"matmul", {"mk", "kn"}, kMatmul},
      {"matmul", {"Bmk", "kn"}, kMatmul},
      {"matmul", {"mk", "Bkn"}, kMatmul},
      {"matmul", {"Bmk", "Bkn"}, kMatmul},
      {"matmul", {"B1mk", "2kn"}, kMatmul},  // broadcast batch dims
      {"matmul", {"21mk", "Bkn"}, kMatmul},
      {"mm", {"mk", "kn"}, mm},
      {"bmm", {"Bmk", "Bkn"}, bmm},
      {"linear", {"k", "nk"}, linear},
      {"linear", {"mk", "nk"}, linear},
      {"linear", {"Bmk", "nk"}, linear},
      {"linear", {"k", "nk", "n"}, linear_bias, 2},
      {"linear", {"mk", "nk", "n"}, linear_bias, 2},
      {"linear", {"Bmk", "nk", "n"}, linear_bias, 2},
      {"addmm", {"n", "mk", "kn"}, addmm, 0, 0.5},
      {"addmm", {"mn", "mk", "kn"}, addmm, 0, 0.5},
      {"outer", {"m", "n"}, outer},
      {"dot", {"k", "k"}, dot},
  };
}

// `dims` spelled out with B, m, k, n = 2, 3, 4, 5, except `letter` = value.
Shape product_shape(const std::string& dims, char letter, std::int64_t value) {
  const std::string letters = "Bmkn";  // sizes 2, 3, 4, 5 in this order
  Shape s;
  for (char c : dims) {
    const std::size_t at = letters.find(c);
    s.push_back(c == letter ? value : at != letters.npos ? static_cast<std::int64_t>(at) + 2 : c - '0');
  }
  return s;
}

// The inputs of c (f64 leaves) with `letter` = value, or none when no input uses the letter.
std::vector<Tensor> product_inputs(TestContext& ctx, const ProductCase& c, char letter, std::int64_t value) {
  std::vector<Tensor> in;
  if (std::none_of(c.inputs.begin(), c.inputs.end(), [&](const std::string& d) { return d.find(letter) != d.npos; }))
    return in;
  for (const std::string& d : c.inputs) in.push_back(leaf(ctx, product_shape(d, letter, value)));
  return in;
}

std::string describe(const ProductCase& c, char letter, std::int64_t value) {
  std::string s = c.name;
  for (const std::string& d : c.inputs) s += " [" + d + "]";
  return s + " with " + letter + " = " + std::to_string(value);
}

// Calls fn(case, inputs) for every case with each dim letter it uses set to value.
template <typename Fn>
void for_each_product(TestContext& ctx, std::int64_t value, Fn&& fn) {
  for (const ProductCase& c : product_cases()) {
    for (char letter : {'B', 'm', 'k', 'n'}) {
      const std::vector<Tensor> in = product_inputs(ctx, c, letter, value);
      if (in.empty()) continue;
      INFO(describe(c, letter, value));
      fn(c, in);
    }
  }
}

}  // namespace

// libtorch gives each input a gradient of its own shape: zeros where the
// contraction is empty, and beta times the output gradient summed for a bias.
TEST_CASE("autograd linalg: a zero-size dim anywhere gives gradients of the inputs' shapes") {
  TestContext ctx;
  for_each_product(ctx, 0, [](const ProductCase& c, const std::vector<Tensor>& in) {
    const Tensor out = c.fn(in);
    forge::autograd::backward({out}, {forge::ones(out.shape(), DType::f64)});
    for (std::size_t i = 0; i < in.size(); ++i) {
      INFO("input " << i);
      REQUIRE(in[i].grad().defined());
      CHECK(in[i].grad().shape() == in[i].shape());
      // With a unit output gradient, a bias element gathers beta from each
      // output element it was added to; every other gradient is zero.
      const bool bias = static_cast<int>(i) == c.bias && in[i].numel() > 0;
      const double expected = bias ? c.beta * static_cast<double>(out.numel() / in[i].numel()) : 0.0;
      for (double v : in[i].grad().to_vector<double>()) CHECK(v == expected);
    }
  });
}

TEST_CASE("autograd linalg: the non-empty neighbours of the zero-size cases pass gradcheck") {
  TestContext ctx;
  for_each_product(ctx, 1, [](const ProductCase& c, const std::vector<Tensor>& in) { check_gradients(c.fn, in); });
}
