// The autograd tape and engine (DESIGN §7): leaves and .grad, fan-out, broadcast
// reduction, retain_graph, autograd::grad, NoGradGuard, detach, version
// counters, in-place writes, teardown of long chains, and bad input.

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "gradcheck_support.h"
#include "support.h"

using forge::DType;
using forge::Tensor;
using forge_test::TestContext;
namespace autograd = forge::autograd;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("autograd: d/dx of x*x*x at {1,2,3} is {3,12,27}") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  Tensor y = (x * x * x).sum();
  y.backward();
  CHECK(values(x.grad()) == std::vector<double>{3, 12, 27});
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  CHECK(std::string(y.grad_fn_name()) == "sum");
}

TEST_CASE("autograd: leaves accumulate across backward calls and zero_grad resets them") {
  TestContext ctx;
  Tensor x = ctx.from_vector<float>({1, 2}, {2}).requires_grad_();
  for (int i = 0; i < 3; ++i) (x * 2.0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{6, 6});
  Tensor g = x.grad();
  x.zero_grad(/*set_to_none=*/false);
  CHECK(values(g) == std::vector<double>{0, 0});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("autograd: fan-out sums and broadcasting reduces to each input's shape") {
  TestContext ctx;
  Tensor a = ctx.from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = ctx.from_vector<double>({10, 20, 30}, {3}).requires_grad_();
  Tensor y = (a * b + a - b).sum();  // a used twice, b broadcast over rows
  y.backward();
  CHECK(values(a.grad()) == std::vector<double>{11, 21, 31, 11, 21, 31});
  CHECK(values(b.grad()) == std::vector<double>{1 + 4 - 2, 2 + 5 - 2, 3 + 6 - 2});
}

TEST_CASE("autograd: a float leaf mixed with a double gets a float gradient") {
  TestContext ctx;
  Tensor a = ctx.from_vector<float>({1, 2}, {2}).requires_grad_();
  Tensor b = ctx.from_vector<double>({3, 4}, {2});
  (a * b).sum().backward();
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(values(a.grad()) == std::vector<double>{3, 4});
}

TEST_CASE("autograd: a second backward through a freed graph is refused, retain_graph allows it") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(values(x.grad()) == std::vector<double>{4, 8});
  FORGE_REQUIRE_ERROR(backward, "backward", y.backward());
}

TEST_CASE("autograd: backward on a non-scalar needs a gradient of its shape") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor y = x * 3.0;
  FORGE_REQUIRE_ERROR(backward, "backward", y.backward());
  FORGE_REQUIRE_ERROR(shape, "backward", y.backward(ctx.ones({3}, DType::f64)));
  y.backward(ctx.from_vector<double>({1, 10}, {2}));
  CHECK(values(x.grad()) == std::vector<double>{3, 30});
}

TEST_CASE("autograd: requires_grad on an integer tensor is a dtype error") {
  TestContext ctx;
  Tensor i = ctx.from_vector<std::int64_t>({1, 2}, {2});
  FORGE_REQUIRE_ERROR(dtype, "requires_grad_", i.requires_grad_());
  Tensor x = ctx.from_vector<double>({1}, {1});
  FORGE_REQUIRE_ERROR(backward, "backward", (x * 2.0).sum().backward());
}

// As in libtorch: an integer or bool result carries no gradient, so a cast
// to one ends the graph (it used to pass the gradient straight through).
TEST_CASE("autograd: a cast to an integer or bool dtype ends the graph") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>({0.5f, 1.5f, -2.0f}, {3}).requires_grad_();
  for (DType target : {DType::i32, DType::i64, DType::u8, DType::i8, DType::boolean}) {
    INFO(forge::dtype_name(target));
    const Tensor y = x.to(target);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn_name() == nullptr);
  }
  // A path through the cast adds nothing; the floating path still counts.
  const Tensor loss = forge::sum(x.to(DType::i32).to(DType::f32) * x) + forge::sum(x);
  CHECK_FALSE(x.to(DType::i64).to(DType::f64).requires_grad());
  loss.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{1.0f, 2.0f, -1.0f});  // int(x) + 1
  // A cast between floating dtypes keeps its gradient.
  const Tensor z = x.to(DType::f64);
  CHECK(z.requires_grad());
}

TEST_CASE("autograd: a saved tensor modified in place makes backward name the op") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();
  {
    autograd::NoGradGuard no_grad;
    h.add_(1.0);
  }
  const std::string msg = FORGE_REQUIRE_ERROR(backward, "mul", y.backward());
  CHECK(msg.find("modified in place") != std::string::npos);
}

// Note [All-or-nothing .grad]: w1's gradient is computed before the pass
// reaches the node that fails, and is dropped with the pass.
TEST_CASE("autograd: a backward that fails part-way makes no new .grad and keeps accumulated ones") {
  TestContext ctx;
  Tensor w1 = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor w2 = ctx.from_vector<double>({3, 4}, {2}).requires_grad_();
  const Tensor x = ctx.from_vector<double>({5, 6}, {2});
  const std::int64_t baseline = ctx.pool().outstanding();
  auto failing_loss = [&] {
    Tensor h = w2.exp();                     // older: runs last in backward, and fails
    Tensor loss = h.sum() + (w1 * x).sum();  // newer: reaches w1 first
    autograd::NoGradGuard no_grad;
    h.mul_(2.0);  // exp saved its output
    return loss;
  };
  SECTION("no .grad before: none after") {
    FORGE_REQUIRE_ERROR(backward, "exp", failing_loss().backward());
    CHECK_FALSE(w1.grad().defined());
    CHECK_FALSE(w2.grad().defined());
    CHECK(ctx.pool().outstanding() == baseline);
  }
  SECTION("an existing .grad keeps what reached it, as libtorch") {
    (w1 * x).sum().backward();
    CHECK(w1.grad().to_vector<double>() == std::vector<double>{5, 6});
    FORGE_REQUIRE_ERROR(backward, "exp", failing_loss().backward());
    CHECK(w1.grad().to_vector<double>() == std::vector<double>{10, 12});
    CHECK_FALSE(w2.grad().defined());
    w1.zero_grad();
    CHECK(ctx.pool().outstanding() == baseline);
  }
  SECTION("the same graph shape succeeds and commits every gradient") {
    Tensor loss = w2.exp().sum() + (w1 * x).sum();
    loss.backward();
    CHECK(w1.grad().to_vector<double>() == std::vector<double>{5, 6});
    CHECK(w2.grad().to_vector<double>() == std::vector<double>{std::exp(3.0), std::exp(4.0)});
  }
}

TEST_CASE("autograd: grad() returns gradients without touching .grad") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor w = ctx.from_vector<double>({5, 6}, {2}).requires_grad_();
  Tensor h = x * w;
  Tensor y = (h * h).sum();
  auto g = autograd::grad({y}, {x, h});
  CHECK(values(g[0]) == std::vector<double>{2 * 5 * 5 * 1, 2 * 6 * 6 * 2});
  CHECK(values(g[1]) == std::vector<double>{2 * 5, 2 * 12});
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  Tensor z = ctx.from_vector<double>({1}, {1}).requires_grad_();
  Tensor y2 = (x * 2.0).sum();
  FORGE_REQUIRE_ERROR(backward, "grad", autograd::grad({y2}, {z}));
  Tensor y3 = (x * 2.0).sum();
  auto unused = autograd::grad({y3}, {z}, {.allow_unused = true});
  CHECK_FALSE(unused[0].defined());
}

TEST_CASE("autograd: NoGradGuard records nothing and detach cuts the tape") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  {
    autograd::NoGradGuard no_grad;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
  }
  CHECK(autograd::GradMode::is_enabled());
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.buffer() == x.buffer());
  Tensor y = (x * d).sum();
  y.backward();
  CHECK(values(x.grad()) == std::vector<double>{1, 2});
}

TEST_CASE("autograd: in-place ops rebase history, refuse leaves that require grad") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  FORGE_REQUIRE_ERROR(backward, "add_", x.add_(1.0));
  FORGE_REQUIRE_ERROR(backward, "zero_", x.zero_());
  Tensor h = x * 3.0;
  h.mul_(x);  // h = 3x * x
  h += 1.0;
  h.sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{6, 12});
  Tensor v = (x * 1.0);
  Tensor view = v.narrow(0, 0, 1);
  FORGE_REQUIRE_ERROR(not_implemented, "mul_", view.mul_(2.0));
  {
    autograd::NoGradGuard no_grad;
    x.add_(1.0);  // an optimizer-style update
  }
  CHECK(values(x) == std::vector<double>{2, 3});
}

TEST_CASE("autograd: copy_ carries the source's history") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor buf = ctx.zeros({2, 2}, DType::f64);
  buf.copy_(x);  // broadcast into two rows
  (buf * buf).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{4, 8});
}

TEST_CASE("autograd: destroying a graph of 100000 chained nodes does not recurse") {
  TestContext ctx;
  Tensor x = ctx.from_vector<float>({1}, {1}).requires_grad_();
  Tensor h = x;
  for (int i = 0; i < 100000; ++i) h = h + 1.0f;
  CHECK(h.item<float>() == 100001.0f);
  h = Tensor();  // the whole chain dies here
  Tensor k = x;
  for (int i = 0; i < 100000; ++i) k = k * 1.0f;
  k.sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{1});
}

TEST_CASE("autograd: gradcheck accepts a right gradient and reports a wrong one") {
  TestContext ctx;
  Tensor a = ctx.randn({3, 4}, DType::f64).requires_grad_();
  Tensor b = ctx.randn({4}, DType::f64).requires_grad_();
  auto right = autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1] - in[1]; }, {a, b});
  CHECK(right.ok);
  INFO(right.message);
  CHECK(right.max_abs_error < 1e-6);
  Tensor f32 = ctx.randn({2}).requires_grad_();
  FORGE_REQUIRE_ERROR(dtype, "gradcheck",
                      autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0]; }, {f32}));
}

TEST_CASE("autograd: _into writes with an argument that requires grad are refused while recording") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor out = ctx.zeros({2}, DType::f64);
  const std::int64_t baseline = ctx.pool().outstanding();
  const std::string msg = FORGE_REQUIRE_ERROR(backward, "add_into", forge::add_into(out, x, x));
  CHECK(msg.find("call add instead") != std::string::npos);
  FORGE_REQUIRE_ERROR(backward, "mul_into", forge::mul_into(x, x, 2.0));
  CHECK(ctx.pool().outstanding() == baseline);
  autograd::NoGradGuard no_grad;
  forge::add_into(out, x, x);
  CHECK(values(out) == std::vector<double>{2, 4});
}

TEST_CASE("autograd: arena calls other than masked_select refuse an input that requires grad while recording") {
  TestContext ctx;
  Tensor x = ctx.from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
  Tensor mask = ctx.from_vector<bool>({true, false, true}, {3});
  forge::Arena arena(ctx);
  const std::int64_t baseline = ctx.pool().outstanding();
  FORGE_REQUIRE_ERROR(not_implemented, "rows_where", forge::rows_where(x, mask, &arena));
  CHECK(ctx.pool().outstanding() == baseline);
  const forge::RowsView picked = forge::rows_where(x.detach(), mask, &arena);
  CHECK(values(picked.tensor()) == std::vector<double>{1, 2, 5, 6});
}

TEST_CASE("autograd: masked_select records, and its gradient goes back through the mask") {
  TestContext ctx;
  forge::Arena arena(ctx);
  // By hand: y = masked_select(x, mask) * [1, 2, 3]; x.grad is those weights at the true positions.
  Tensor x = ctx.from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_();
  const Tensor mask = ctx.from_vector<bool>({true, false, true, true}, {2, 2});
  const Tensor y = forge::masked_select(x, mask, &arena);
  CHECK(std::string(y.grad_fn_name()) == "masked_select");
  (y * ctx.from_vector<double>({1, 2, 3}, {3})).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{1, 0, 2, 3});
  // A mask that broadcasts over x: each x element gets the gradient of every copy selected from it.
  // (The checks call fn again before running backward, so fn clones the output out of the arena.)
  const Tensor row_mask = ctx.from_vector<bool>({true, false, true, true}, {4, 1});
  forge_test::check_gradients(
      [&](const std::vector<Tensor>& in) {
        const Tensor picked = forge::masked_select(in[0], row_mask, &arena).clone();
        return picked * forge::arange(1, static_cast<double>(picked.numel()) + 1, 1, picked.dtype());
      },
      {ctx.randn({4, 3}, forge::DType::f64).requires_grad_()});
  forge_test::check_gradients(
      [&](const std::vector<Tensor>& in) { return forge::masked_select(in[0], mask, &arena).clone().square(); },
      {ctx.randn({2, 2}, forge::DType::f64).requires_grad_()});
  // Nothing selected: a zero gradient.
  Tensor z = ctx.ones({3}, forge::DType::f64).requires_grad_();
  forge::masked_select(z, ctx.zeros({3}, forge::DType::boolean), &arena).sum().backward();
  CHECK(values(z.grad()) == std::vector<double>{0, 0, 0});
}
