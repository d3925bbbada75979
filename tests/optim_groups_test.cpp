// Optimizer parameter groups (per-group options, state dicts, decay_groups),
// frozen parameters and clip_grad_value_.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/nn.h"
#include "forge/optim.h"
#include "support.h"

using forge::DType;
using forge::StateDict;
using forge::Tensor;
using forge_test::TestContext;
namespace optim = forge::optim;
namespace nn = forge::nn;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return a.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), a.nbytes()) == 0;
}

Tensor fresh_leaf(const Tensor& like) { return like.detach().clone().requires_grad_(); }

// A deterministic gradient for step k.
void set_grad(TestContext& ctx, Tensor& t, int k) {
  Tensor g = ctx.arange(0, static_cast<double>(t.numel()), 1, t.dtype()).reshape(t.shape());
  t.set_grad((g * 0.37 + static_cast<double>(k)).sin());
}

// Three steps of every optimizer, the same gradients for every tensor.
void three_steps(TestContext& ctx, std::vector<Tensor> tensors, const std::vector<optim::Optimizer*>& optimizers) {
  for (int k = 0; k < 3; ++k) {
    for (Tensor& t : tensors) set_grad(ctx, t, k);
    for (optim::Optimizer* o : optimizers) o->step();
  }
}

}  // namespace

TEST_CASE("optim: each parameter group steps with its own options, as a separate optimizer would") {
  TestContext ctx;
  Tensor a = ctx.randn({4, 3}, DType::f64).requires_grad_(), b = ctx.randn({5}, DType::f64).requires_grad_();
  SECTION("SGD") {
    Tensor a1 = fresh_leaf(a), b1 = fresh_leaf(b);
    optim::SGD grouped({{{a}, {}}, {{b}, {.lr = 0.01, .weight_decay = 0.5, .nesterov = false}}},
                       {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    optim::SGD alone_a({a1}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    optim::SGD alone_b({b1}, {.lr = 0.01, .momentum = 0.9, .weight_decay = 0.5});
    CHECK(grouped.num_groups() == 2);
    CHECK(grouped.options(1).lr == 0.01);
    CHECK(grouped.options(1).momentum == 0.9);  // from the defaults
    three_steps(ctx, {a, b, a1, b1}, {&grouped, &alone_a, &alone_b});
    CHECK(same_bits(a, a1));
    CHECK(same_bits(b, b1));
  }
  SECTION("AdamW") {
    Tensor a1 = fresh_leaf(a), b1 = fresh_leaf(b);
    optim::AdamW grouped({{{a}, {.beta2 = 0.95}}, {{b}, {.lr = 3e-3, .weight_decay = 0.0, .eps = 1e-6}}}, {.lr = 1e-2});
    optim::AdamW alone_a({a1}, {.lr = 1e-2, .beta2 = 0.95});
    optim::AdamW alone_b({b1}, {.lr = 3e-3, .eps = 1e-6, .weight_decay = 0.0});
    three_steps(ctx, {a, b, a1, b1}, {&grouped, &alone_a, &alone_b});
    CHECK(same_bits(a, a1));
    CHECK(same_bits(b, b1));
    CHECK(grouped.group_of(0) == 0);
    CHECK(grouped.group_of(1) == 1);
    CHECK(grouped.group_params(1).at(0).is_same(b));
  }
}

TEST_CASE("optim: set_lr sets every group's lr, or one group's") {
  TestContext ctx;
  Tensor a = ctx.randn({2}).requires_grad_(), b = ctx.randn({2}).requires_grad_();
  optim::Adam adam({{{a}, {.lr = 0.5}}, {{b}, {}}}, {.lr = 0.1});
  CHECK(adam.lr() == 0.5);
  CHECK(adam.lr(1) == 0.1);
  adam.set_lr(1, 0.2);
  CHECK(adam.lr(0) == 0.5);
  CHECK(adam.lr(1) == 0.2);
  adam.set_lr(0.3);
  CHECK(adam.lr(0) == 0.3);
  CHECK(adam.lr(1) == 0.3);
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", adam.set_lr(-1.0));
  FORGE_REQUIRE_ERROR(out_of_range, "Adam", adam.set_lr(2, 0.1));
  FORGE_REQUIRE_ERROR(out_of_range, "Adam", (void)adam.lr(2));
  CHECK(adam.lr(1) == 0.3);
}

TEST_CASE("optim: a group override the optimizer does not have is refused, naming the group") {
  TestContext ctx;
  Tensor a = ctx.randn({2}).requires_grad_(), b = ctx.randn({2}).requires_grad_();
  auto msg = FORGE_REQUIRE_ERROR(invalid_argument, "SGD", optim::SGD({{{a}, {}}, {{b}, {.beta1 = 0.5}}}));
  CHECK_THAT(msg, Catch::Contains("parameter group 1"));
  msg = FORGE_REQUIRE_ERROR(invalid_argument, "AdamW", optim::AdamW({{{a}, {.momentum = 0.9}}, {{b}, {}}}));
  CHECK_THAT(msg, Catch::Contains("parameter group 0"));
  FORGE_REQUIRE_ERROR(invalid_argument, "Adam", optim::Adam({{{a}, {.lr = -1.0}}}));
  // A parameter in two groups is a parameter listed twice.
  msg = FORGE_REQUIRE_ERROR(invalid_argument, "SGD", optim::SGD({{{a}, {}}, {{b, a}, {}}}));
  CHECK_THAT(msg, Catch::Contains("parameter 2 is parameter 0"));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", optim::SGD(std::vector<optim::ParamGroup>{}));
  FORGE_REQUIRE_ERROR(invalid_argument, "SGD", optim::SGD(std::vector<optim::ParamGroup>(2)));
}

TEST_CASE("optim: a state_dict round trip with groups is bit-exact and a resumed optimizer takes the same steps") {
  TestContext ctx;
  Tensor a = ctx.randn({3, 2}).requires_grad_(), b = ctx.randn({4}).requires_grad_();
  Tensor a1 = fresh_leaf(a), b1 = fresh_leaf(b);
  optim::AdamW first({{{a}, {.lr = 0.01}}, {{b}, {.weight_decay = 0.0}}}, {.lr = 0.02});
  for (int k = 0; k < 2; ++k) {
    set_grad(ctx, a, k);
    set_grad(ctx, b, k);
    first.step();
  }
  first.set_lr(1, 0.005);
  const StateDict saved = first.state_dict();
  CHECK(saved.at("group.0.lr").item<double>() == 0.01);
  CHECK(saved.at("group.1.lr").item<double>() == 0.005);
  CHECK(saved.at("group.1.weight_decay").item<double>() == 0.0);
  CHECK(saved.at("group.0.weight_decay").item<double>() == 0.01);
  CHECK(saved.at("group.1.size").item<std::int64_t>() == 1);
  CHECK(saved.count("lr") == 0);

  // Same values as a and b after two steps, in an optimizer made with other group options.
  a1.detach().copy_(a.detach());
  b1.detach().copy_(b.detach());
  optim::AdamW resumed({{{a1}, {}}, {{b1}, {}}});
  resumed.load_state_dict(saved);
  CHECK(resumed.lr(0) == 0.01);
  CHECK(resumed.lr(1) == 0.005);
  CHECK(resumed.options(1).weight_decay == 0.0);
  CHECK(resumed.steps() == 2);
  for (int k = 2; k < 4; ++k) {
    for (Tensor* t : {&a, &b, &a1, &b1}) set_grad(ctx, *t, k);
    first.step();
    resumed.step();
  }
  CHECK(same_bits(a, a1));
  CHECK(same_bits(b, b1));

  // Another grouping of the same parameters is refused, and nothing changes.
  optim::AdamW one_group({fresh_leaf(a), fresh_leaf(b)}, {.lr = 0.5});
  auto msg = FORGE_REQUIRE_ERROR(invalid_argument, "AdamW.load_state_dict", one_group.load_state_dict(saved));
  CHECK_THAT(msg, Catch::Contains("'lr'"));
  CHECK(one_group.lr() == 0.5);
  optim::AdamW swapped({{{fresh_leaf(b)}, {}}, {{fresh_leaf(a)}, {}}});
  FORGE_REQUIRE_ERROR(shape, "AdamW.load_state_dict", swapped.load_state_dict(saved));
  CHECK(swapped.steps() == 0);
}

TEST_CASE("optim: decay_groups puts biases, norms and vectors in a group without weight decay") {
  TestContext ctx;
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(ctx, 4, 8));
  model->push_back(std::make_shared<nn::LayerNorm>(ctx, 8));
  model->push_back(std::make_shared<nn::Linear>(ctx, 8, 2, false));
  const auto groups = optim::decay_groups(*model, 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].options.weight_decay == 0.1);
  CHECK(groups[1].options.weight_decay == 0.0);
  const auto named = model->named_parameters();  // 0.weight 0.bias 1.weight 1.bias 2.weight
  REQUIRE(named.size() == 5);
  REQUIRE(groups[0].params.size() == 2);
  CHECK(groups[0].params[0].is_same(named[0].second));
  CHECK(groups[0].params[1].is_same(named[4].second));
  REQUIRE(groups[1].params.size() == 3);
  CHECK(groups[1].params[0].is_same(named[1].second));
  CHECK(groups[1].params[1].is_same(named[2].second));
  CHECK(groups[1].params[2].is_same(named[3].second));
  optim::AdamW opt(groups, {.lr = 1e-3});
  CHECK(opt.options(0).weight_decay == 0.1);
  CHECK(opt.options(1).weight_decay == 0.0);
  CHECK(opt.params().size() == 5);
  FORGE_REQUIRE_ERROR(invalid_argument, "decay_groups", optim::decay_groups(*model, -1));
}

TEST_CASE("optim: a frozen parameter (not requiring grad) is accepted and left alone") {
  TestContext ctx;
  Tensor frozen = ctx.randn({3});
  Tensor trained = ctx.randn({3}).requires_grad_();
  const Tensor before = frozen.clone();
  optim::SGD sgd({frozen, trained}, {.lr = 0.1});
  set_grad(ctx, trained, 0);
  sgd.step();
  CHECK(same_bits(frozen, before));
  CHECK_FALSE(frozen.grad().defined());
}

TEST_CASE("optim: clip_grad_value_ clamps every gradient element, keeps NaN and skips missing gradients") {
  TestContext ctx;
  Tensor a = ctx.zeros({4}, DType::f64).requires_grad_();
  Tensor b = ctx.zeros({2}).requires_grad_();
  Tensor none = ctx.zeros({2}).requires_grad_();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  a.set_grad(ctx.from_vector<double>({-3.0, 0.25, 2.0, nan}, {4}));
  b.set_grad(ctx.from_vector<float>({static_cast<float>(inf), -0.5f}, {2}));
  optim::clip_grad_value_({a, b, none}, 1.0);
  const auto ga = a.grad().to_vector<double>();
  CHECK(ga[0] == -1.0);
  CHECK(ga[1] == 0.25);
  CHECK(ga[2] == 1.0);
  CHECK(std::isnan(ga[3]));
  CHECK(b.grad().to_vector<float>() == std::vector<float>{1.0f, -0.5f});
  CHECK_FALSE(none.grad().defined());
  FORGE_REQUIRE_ERROR(invalid_argument, "clip_grad_value_", optim::clip_grad_value_({a}, -1));
  FORGE_REQUIRE_ERROR(invalid_argument, "clip_grad_value_", optim::clip_grad_value_({a}, nan));
  CHECK(a.grad().to_vector<double>()[1] == 0.25);
}
