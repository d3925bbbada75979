// Options structs keep their defaults under designated initializers. This
// file is compiled with -Wmissing-field-initializers as an error
// (tests/CMakeLists.txt), so a field without a default member initializer
// fails the build where a designated initializer leaves it out; the cases
// check the values both spellings give.

#include <catch2/catch.hpp>

#include "forge/forge.h"
#include "forge/infer.h"
#include "forge/optim.h"
#include "support.h"

namespace optim = forge::optim;
using forge::Tensor;
using forge_test::TestContext;

namespace {

// Every public options struct, spelt with one designated field: each of these
// lines is an error if a field the designator leaves out has no initializer.
[[maybe_unused]] void every_options_struct_takes_one_designated_field() {
  [[maybe_unused]] forge::ExecContextOptions exec{.threads = 2};
  [[maybe_unused]] forge::RuntimeOptions runtime{.threads = 2};
  [[maybe_unused]] forge::BufferPoolOptions pool{.max_cached_bytes = 1};
  [[maybe_unused]] forge::autograd::GradOptions grad{.retain_graph = true};
  [[maybe_unused]] forge::autograd::GradcheckOptions gradcheck{.eps = 1e-6};
  [[maybe_unused]] forge::CrossEntropyOptions ce{.label_smoothing = 0.1};
  [[maybe_unused]] optim::SGDOptions sgd{.lr = 0.1};
  [[maybe_unused]] optim::AdamOptions adam{.lr = 0.1};
  [[maybe_unused]] optim::AdamWOptions adamw{.lr = 0.1};
  [[maybe_unused]] optim::GroupOptions group{.lr = 0.1};
  [[maybe_unused]] optim::ParamGroup param_group{.params = {}};
  [[maybe_unused]] forge::nn::MultiheadAttentionOptions mha{.causal = true};
  [[maybe_unused]] forge::nn::TransformerBlockOptions block{.causal = true};
  [[maybe_unused]] forge::infer::GenerateOptions generate{.max_new_tokens = 4};
  [[maybe_unused]] forge::infer::WordPieceOptions wordpiece{.lowercase = false};
  [[maybe_unused]] forge::infer::DecoderConfig decoder{.vocab_size = 8};
  [[maybe_unused]] forge::infer::EncoderConfig encoder{.vocab_size = 8};
  [[maybe_unused]] forge::data::DataLoaderOptions loader{.batch_size = 8};
  [[maybe_unused]] forge::data::TextWindowOptions text{.context = 8};
}

}  // namespace

TEST_CASE("options: AdamW keeps weight_decay 0.01 when a designated initializer sets only lr") {
  TestContext ctx;
  Tensor p = ctx.from_vector<double>({1, 2}, {2}).requires_grad_();
  optim::AdamW designated({p}, {.lr = 1e-3});
  optim::AdamW defaulted({p});
  CHECK(designated.options().weight_decay == 0.01);
  CHECK(designated.options().lr == 1e-3);
  CHECK(designated.options().decoupled_weight_decay);
  CHECK(defaulted.options().weight_decay == 0.01);
  CHECK(defaulted.options().lr == 1e-3);
  // The older spelling with AdamOptions takes its weight_decay as written.
  optim::AdamW explicit_options({p}, optim::AdamOptions{.lr = 2e-3});
  CHECK(explicit_options.options().weight_decay == 0.0);
  CHECK(explicit_options.options().decoupled_weight_decay);
  optim::Adam adam({p}, {.lr = 1e-2});
  CHECK(adam.options().weight_decay == 0.0);
  CHECK_FALSE(adam.options().decoupled_weight_decay);
}

TEST_CASE("options: a designated initializer leaves every other field at its default") {
  const forge::ExecContextOptions exec{.threads = 2};
  CHECK(exec.device == forge::Device::cpu());
  CHECK_FALSE(exec.seed.has_value());
  CHECK_FALSE(exec.max_cached_bytes.has_value());
  const optim::SGDOptions sgd{.momentum = 0.9};
  CHECK(sgd.lr == 1e-2);
  CHECK(sgd.weight_decay == 0.0);
  CHECK_FALSE(sgd.nesterov);
  const optim::AdamWOptions adamw{.beta2 = 0.95};
  CHECK(adamw.lr == 1e-3);
  CHECK(adamw.beta1 == 0.9);
  CHECK(adamw.eps == 1e-8);
  CHECK(adamw.weight_decay == 0.01);
  const forge::autograd::GradOptions grad{.allow_unused = true};
  CHECK(grad.grad_outputs.empty());
  CHECK_FALSE(grad.retain_graph);
  const forge::infer::GenerateOptions generate{.greedy = true};
  CHECK(generate.stop_tokens.empty());
  CHECK_FALSE(generate.seed.has_value());
  CHECK(generate.max_new_tokens == 64);
  const optim::GroupOptions group{.weight_decay = 0.0};
  CHECK_FALSE(group.lr.has_value());
  CHECK(group.weight_decay == 0.0);
}
