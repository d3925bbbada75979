// Custom autograd functions (include/forge/autograd/function.h): forward and
// backward, gradcheck, saved tensors and their versions, saved_data, what
// backward may return, and what is recorded when.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::DType;
using forge::Tensor;
using forge::autograd::AutogradContext;
using forge::autograd::variable_list;
using forge_test::TestContext;
namespace autograd = forge::autograd;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// c * x^3: saves its input and a constant.
struct ScaledCube : autograd::Function<ScaledCube> {
  static constexpr const char* name = "ScaledCube";
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double c) {
    CHECK_FALSE(autograd::GradMode::is_enabled());  // forward runs under no grad
    ctx->save_for_backward({x});
    ctx->saved_data["c"] = c;
    return x * x * x * c;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const Tensor x = ctx->get_saved_variables()[0];
    const double c = ctx->saved_data["c"].to_double();
    return {grad_outputs[0] * x * x * (3.0 * c)};  // one per tensor input
  }
};

// x @ w + b, saving its inputs: one gradient per argument.
struct Affine : autograd::Function<Affine> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const Tensor& b) {
    ctx->save_for_backward({x, w});
    return forge::matmul(x, w) + b;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& g = grad_outputs[0];
    return {ctx->needs_input_grad(0) ? forge::matmul(g, saved[1].t()) : Tensor(),
            ctx->needs_input_grad(1) ? forge::matmul(saved[0].t(), g) : Tensor(),
            ctx->needs_input_grad(2) ? forge::sum(g, {0}) : Tensor()};
  }
};

// The same with a wrong derivative for w: gradcheck must notice.
struct BrokenAffine : autograd::Function<BrokenAffine> {
  static constexpr const char* name = "BrokenAffine";
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const Tensor& b) {
    return Affine::forward(ctx, x, w, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list grads = Affine::backward(ctx, std::move(grad_outputs));
    grads[1] = grads[1] * 1.01;
    return grads;
  }
};

// Returns whatever the test asks for from backward.
struct Scripted : autograd::Function<Scripted> {
  static constexpr const char* name = "Scripted";
  static inline std::function<variable_list(const Tensor& grad)> script;
  static Tensor forward(AutogradContext*, const Tensor& x, std::int64_t scale) {
    return x * static_cast<double>(scale);
  }
  static variable_list backward(AutogradContext*, variable_list grad_outputs) { return script(grad_outputs[0]); }
};

}  // namespace

TEST_CASE("function: a custom function's forward and backward give c * x^3 and its gradient") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2, -3}, {3}).requires_grad_();
  Tensor y = ScaledCube::apply(x, 2.0);
  CHECK(values(y) == std::vector<double>{2, 16, -54});
  CHECK(y.requires_grad());
  CHECK(std::string(y.grad_fn_name()) == "ScaledCube");
  forge::sum(y).backward();
  CHECK(values(x.grad()) == std::vector<double>{6, 24, 54});
}

TEST_CASE("function: gradcheck in f64 passes for a correct custom function and fails for a wrong one") {
  TestContext ctx;
  Tensor x = ctx.randn({4, 3}, DType::f64).requires_grad_();
  Tensor w = ctx.randn({3, 5}, DType::f64).requires_grad_();
  Tensor b = ctx.randn({5}, DType::f64).requires_grad_();
  auto good =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return Affine::apply(in[0], in[1], in[2]); }, {x, w, b});
  INFO(good.message);
  CHECK(good.ok);
  auto bad = autograd::gradcheck([](const std::vector<Tensor>& in) { return BrokenAffine::apply(in[0], in[1], in[2]); },
                                 {x, w, b});
  CHECK_FALSE(bad.ok);
  CHECK(bad.message.find("input 1") != std::string::npos);
  auto cube = autograd::gradcheck([](const std::vector<Tensor>& in) { return ScaledCube::apply(in[0], -0.5); }, {x});
  INFO(cube.message);
  CHECK(cube.ok);
}

TEST_CASE("function: needs_input_grad follows the inputs and only they get gradients") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {1, 2});
  Tensor w = ctx.from_vector<double>({3, 4}, {2, 1}).requires_grad_();
  Tensor b = ctx.from_vector<double>({5}, {1});
  Tensor y = Affine::apply(x, w, b);
  CHECK(values(y) == std::vector<double>{16});
  forge::sum(y).backward();
  CHECK(values(w.grad()) == std::vector<double>{1, 2});
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("function: a saved input written in place makes backward refuse, naming the function") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = forge::sum(ScaledCube::apply(x, 1.0));
  {
    autograd::NoGradGuard no_grad;
    x.mul_(2.0);
  }
  const std::int64_t baseline = ctx.pool().outstanding();
  const std::string msg = FORGE_REQUIRE_ERROR(backward, "ScaledCube", y.backward());
  CHECK(msg.find("modified in place") != std::string::npos);
  CHECK_FALSE(x.grad().defined());
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("function: backward returning the wrong number of gradients is a backward error naming it") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = forge::sum(Scripted::apply(x, 3));
  const std::int64_t baseline = ctx.pool().outstanding();
  Scripted::script = [](const Tensor& g) { return variable_list{g, g, g}; };
  const std::string msg = FORGE_REQUIRE_ERROR(backward, "Scripted", y.backward(Tensor(), true));
  CHECK(msg.find("returned 3 gradients") != std::string::npos);
  Scripted::script = [](const Tensor&) { return variable_list{}; };
  FORGE_REQUIRE_ERROR(backward, "Scripted", y.backward(Tensor(), true));
  CHECK_FALSE(x.grad().defined());
  CHECK(ctx.pool().outstanding() == baseline);
  Scripted::script = nullptr;
}

TEST_CASE("function: backward returning a gradient of the wrong shape is a backward error naming it") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = forge::sum(Scripted::apply(x, 3));
  const std::int64_t baseline = ctx.pool().outstanding();
  Scripted::script = [](const Tensor& g) { return variable_list{forge::sum(g * 3.0).reshape({1, 1})}; };
  const std::string msg = FORGE_REQUIRE_ERROR(backward, "Scripted", y.backward(Tensor(), true));
  CHECK(msg.find("shape [1, 1] for input 0 of shape [2]") != std::string::npos);
  // A gradient where forward took a number: refused too.
  Scripted::script = [](const Tensor& g) { return variable_list{g * 3.0, g}; };
  FORGE_REQUIRE_ERROR(backward, "Scripted", y.backward(Tensor(), true));
  CHECK_FALSE(x.grad().defined());
  CHECK(ctx.pool().outstanding() == baseline);
  // libtorch's count (one per argument, undefined for the number) is accepted.
  Scripted::script = [](const Tensor& g) { return variable_list{g * 3.0, Tensor()}; };
  y.backward();
  CHECK(values(x.grad()) == std::vector<double>{3, 3});
  Scripted::script = nullptr;
}

TEST_CASE("function: nothing is recorded under no grad, without inputs that require grad, or when marked") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  {
    autograd::NoGradGuard no_grad;
    CHECK_FALSE(ScaledCube::apply(x, 1.0).requires_grad());
  }
  CHECK_FALSE(ScaledCube::apply(x.detach(), 1.0).requires_grad());

  struct Marked : autograd::Function<Marked> {
    static Tensor forward(AutogradContext* ctx, const Tensor& t) {
      Tensor out = t * 2.0;
      ctx->mark_non_differentiable({out});
      return out;
    }
    static variable_list backward(AutogradContext*, variable_list g) { return g; }
  };
  const Tensor m = Marked::apply(x);
  CHECK_FALSE(m.requires_grad());
  CHECK(values(m) == std::vector<double>{2, 4});
}

TEST_CASE("function: an input returned as it is comes back as a new tensor, the input untouched") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  struct Identity : autograd::Function<Identity> {
    static Tensor forward(AutogradContext*, const Tensor& t) { return t; }
    static variable_list backward(AutogradContext*, variable_list g) { return {g[0] * 5.0}; }
  };
  Tensor y = Identity::apply(x);
  CHECK_FALSE(y.is_same(x));
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  forge::sum(y).backward();
  CHECK(values(x.grad()) == std::vector<double>{5, 5});
  // Its demangled type name names the node when the class gives none.
  CHECK(std::string(y.grad_fn_name()).find("Identity") != std::string::npos);
}

TEST_CASE("function: saved_data keeps numbers, tensors and any value, and refuses the wrong type") {
  TestContext ctx;
  autograd::SavedValue i = 3;
  autograd::SavedValue d = 0.25;
  autograd::SavedValue s = "text";
  autograd::SavedValue t = ctx.from_vector<double>({7}, {1});
  autograd::SavedValue v = std::vector<int>{1, 2};
  CHECK(i.to_int() == 3);
  CHECK(i.to_double() == 3.0);
  CHECK(d.to_double() == 0.25);
  CHECK(s.get<std::string>() == "text");
  CHECK(values(t.to_tensor()) == std::vector<double>{7});
  CHECK(v.get<std::vector<int>>().size() == 2);
  const std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "saved_data", d.to_int());
  CHECK(msg.find("double") != std::string::npos);
}

TEST_CASE("function: a list of tensors counts as that many inputs") {
  TestContext ctx;
  Tensor a = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor b = ctx.from_vector<double>({3, 4}, {2}).requires_grad_();
  struct WeightedSum : autograd::Function<WeightedSum> {
    static Tensor forward(AutogradContext* ctx, const std::vector<Tensor>& ts, double w) {
      ctx->saved_data["n"] = static_cast<std::int64_t>(ts.size());
      Tensor out = ts[0] * w;
      for (std::size_t i = 1; i < ts.size(); ++i) out = out + ts[i] * w;
      return out;
    }
    static variable_list backward(AutogradContext* ctx, variable_list g) {
      return variable_list(static_cast<std::size_t>(ctx->saved_data["n"].to_int()), g[0] * 2.0);
    }
  };
  forge::sum(WeightedSum::apply(std::vector<Tensor>{a, b}, 2.0)).backward();
  CHECK(values(a.grad()) == std::vector<double>{2, 2});
  CHECK(values(b.grad()) == std::vector<double>{2, 2});
}

TEST_CASE("function: saved tensors are dropped after backward unless the graph is retained") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = forge::sum(ScaledCube::apply(x, 1.0));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(values(x.grad()) == std::vector<double>{6, 24});
  FORGE_REQUIRE_ERROR(backward, "backward", y.backward());
}
