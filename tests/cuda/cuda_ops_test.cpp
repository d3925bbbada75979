// Each op family on cuda:0 against the host, through the backend-ops harness
// (backend_ops.h): a few cases per family, each in its dtypes, with packed and
// strided inputs, outputs and input gradients compared with the 1-thread host
// reference within the harness's tolerance. forge_tests' [backend] cases run
// the whole case table on cuda:0 as well when a device is visible.

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "backend_ops.h"
#include "forge/forge.h"
#include "support.h"

namespace {

using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge_test::backend_ops::Env;
using forge_test::backend_ops::OpCase;
using forge_test::backend_ops::Spec;
namespace bo = forge_test::backend_ops;

const std::vector<DType> kFloat = {DType::f32, DType::f64, DType::f16, DType::bf16};
const std::vector<DType> kNumeric = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                     DType::i32, DType::i64, DType::u8,  DType::i8};

// Sums in another order than the host's: a looser bound for the cases that
// reduce long rows (matmul, conv), in f16 and bf16 above all.
constexpr double kReducedScale = 8;

OpCase make(std::string name, std::string entry, std::vector<DType> dtypes, std::function<void(Env&)> body,
            double tolerance_scale = 1, bool differentiable = true) {
  OpCase c;
  c.name = std::move(name);
  c.entry = std::move(entry);
  c.dtypes = std::move(dtypes);
  c.differentiable = differentiable;
  c.exact = bo::kClose;
  c.tolerance_scale = tolerance_scale;
  c.body = std::move(body);
  return c;
}

std::vector<OpCase> elementwise_cases() {
  return {
      make("add, broadcast", "elementwise.binary", kNumeric,
           [](Env& e) {
             const Tensor a = e.leaf({48, 900}), b = e.leaf({900});
             e.emit("[48, 900] + [900]", {a + b});
           }),
      make("mul, expanded", "elementwise.binary", kNumeric,
           [](Env& e) {
             const Tensor a = e.leaf({60, 700}, {.expand_from = Shape{1, 700}}), b = e.leaf({60, 700});
             e.emit("[60, 700] * [60, 700]", {a * b});
           }),
      make("div and pow", "elementwise.binary", kFloat,
           [](Env& e) {
             const Tensor a = e.leaf({33, 17}), b = e.leaf({33, 17}, {.values = bo::uniform(0.5, 2)});
             e.emit("a / b, b ^ 1.5", {a / b, forge::pow(b, 1.5)});
           }),
      make("unary", "elementwise.unary", kFloat,
           [](Env& e) {
             const Tensor x = e.leaf({20, 301});
             e.emit("exp, tanh, sigmoid, gelu, silu",
                    {forge::exp(x), forge::tanh(x), forge::sigmoid(x), forge::gelu(x), forge::silu(x)});
           }),
      make("compare and where", "elementwise.where", kNumeric,
           [](Env& e) {
             const Tensor a = e.leaf({40, 50}), b = e.leaf({40, 50});
             e.emit("a > b, where(a > b, a, b)", {a > b, forge::where(a > b, a, b)});
           }),
  };
}

std::vector<OpCase> reduce_cases() {
  return {
      make("sum", "reduce.reduce", kNumeric,
           [](Env& e) {
             const Tensor x = e.leaf({37, 411});
             e.emit("sum, sum over 1", {forge::sum(x), forge::sum(x, {1})});
           }),
      make("amax and argmax", "reduce.reduce", kNumeric,
           [](Env& e) {
             const Tensor x = e.leaf({64, 129});
             e.emit("amax over 1, argmax over 0", {forge::amax(x, {1}), forge::argmax(x, 0)});
           }),
      make("mean, var and logsumexp", "reduce.reduce", kFloat,
           [](Env& e) {
             const Tensor x = e.leaf({16, 1000});
             e.emit("mean over 0, var over 1, logsumexp over 1",
                    {forge::mean(x, {0}), forge::var(x, {1}), forge::logsumexp(x, {1})});
           }),
  };
}

std::vector<OpCase> nn_cases() {
  return {
      make("softmax and log_softmax", "nn.softmax", kFloat,
           [](Env& e) {
             const Tensor x = e.leaf({24, 513});
             e.emit("softmax, log_softmax over 1", {forge::softmax(x, 1), forge::log_softmax(x, 1)});
           }),
      make("layer_norm", "nn.layer_norm", kFloat,
           [](Env& e) {
             const Tensor x = e.leaf({32, 256}), w = e.leaf({256}), b = e.leaf({256});
             e.emit("layer_norm over 256", {forge::layer_norm(x, {256}, w, b)});
           }),
      make("cross_entropy and mse_loss", "nn.class_loss", kFloat,
           [](Env& e) {
             const Tensor logits = e.leaf({64, 10});
             const Tensor target = e.index({64}, 0, 9);
             const Tensor a = e.leaf({64, 10}), b = e.leaf({64, 10});
             e.emit("cross_entropy, mse_loss", {forge::cross_entropy(logits, target), forge::mse_loss(a, b)});
           }),
  };
}

std::vector<OpCase> conv_cases() {
  return {
      make(
          "conv2d", "conv.conv2d", kFloat,
          [](Env& e) {
            const Tensor x = e.leaf({4, 3, 17, 15}), w = e.leaf({8, 3, 3, 3}), b = e.leaf({8});
            e.emit("3x3, stride 2, padding 1", {forge::conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}})});
          },
          kReducedScale),
      make("pooling", "conv.pool", kFloat,
           [](Env& e) {
             const Tensor x = e.leaf({2, 5, 16, 12});
             e.emit("max_pool2d, avg_pool2d", {forge::max_pool2d(x), forge::avg_pool2d(x, {.kernel = {3, 3}})});
           }),
      make("pooling, padded and strided", "conv.pool", kFloat,
           [](Env& e) {
             const Tensor x = e.leaf({2, 3, 11, 9});
             e.emit("max_pool2d 3x3 stride 2 pad 1, avg_pool2d without pad counts",
                    {forge::max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}),
                     forge::avg_pool2d(x, {.kernel = {3, 3},
                                           .stride = {2, 2},
                                           .padding = {1, 1},
                                           .ceil_mode = true,
                                           .count_include_pad = false})});
           }),
  };
}

std::vector<OpCase> linalg_cases() {
  return {
      make(
          "matmul and linear", "linalg.matmul", kFloat,
          [](Env& e) {
            const Tensor a = e.leaf({64, 96}), b = e.leaf({96, 48});
            const Tensor x = e.leaf({3, 7, 96}), w = e.leaf({48, 96}), bias = e.leaf({48});
            e.emit("[64, 96] @ [96, 48], linear [3, 7, 96] -> 48", {forge::matmul(a, b), forge::linear(x, w, bias)});
          },
          kReducedScale),
      make(
          "bmm", "linalg.matmul", kFloat,
          [](Env& e) {
            const Tensor a = e.leaf({5, 31, 40}), b = e.leaf({5, 40, 9});
            e.emit("[5, 31, 40] @ [5, 40, 9]", {forge::bmm(a, b)});
          },
          kReducedScale),
      make(
          "scaled_dot_product_attention and dropout", "linalg.attention", kFloat,
          [](Env& e) {
            const Tensor q = e.input({2, 3, 7, 16}), k = e.input({2, 3, 9, 16}), v = e.input({2, 3, 9, 8});
            const Tensor mask = e.mask({7, 9}), x = e.input({33, 17});
            e.emit("masked, causal, dropout 0.3",
                   {forge::scaled_dot_product_attention(q, k, v, mask),
                    forge::scaled_dot_product_attention(q, k, v, Tensor(), true), forge::dropout(x, 0.3)});
          },
          kReducedScale),
  };
}

std::vector<OpCase> indexing_cases() {
  return {
      make("index_select and gather", "indexing.gather", kNumeric,
           [](Env& e) {
             const Tensor x = e.leaf({50, 30});
             e.emit("index_select rows, gather over 1",
                    {forge::index_select(x, 0, e.index({70}, 0, 49)), forge::gather(x, 1, e.index({50, 12}, 0, 29))});
           }),
      make("embedding and scatter_add", "indexing.scatter", kFloat,
           [](Env& e) {
             const Tensor weight = e.leaf({100, 16});
             const Tensor x = e.leaf({10, 8}), src = e.leaf({40, 8});
             e.emit("embedding, scatter_add over 0", {forge::embedding(weight, e.index({6, 9}, 0, 99)),
                                                      forge::scatter_add(x, 0, e.index({40, 8}, 0, 9), src)});
           }),
      make("flip, pad and repeat", "indexing.mapped_copy", kNumeric,
           [](Env& e) {
             const Tensor x = e.input({6, 5, 4});
             e.emit("flip (0, 2), constant and reflect pad, repeat",
                    {x.flip({0, 2}), forge::pad(x, {2, 1, 1, 3}, forge::PadMode::constant, 1.0),
                     forge::pad(x, {2, 3}, forge::PadMode::reflect), x.repeat({2, 1, 3})});
           }),
      make("masked_select, nonzero and rows_where", "indexing.compact_rows", kNumeric,
           [](Env& e) {
             const Tensor x = e.input({3000, 3}), mask = e.mask({3000, 3}), rows = e.mask({3000});
             forge::Arena a(e.ctx()), b(e.ctx()), c(e.ctx()), d(e.ctx());
             e.emit("masked_select, nonzero, rows_where, nonzero_per_row",
                    {forge::masked_select(x, mask, &a), forge::nonzero(mask, &b),
                     forge::rows_where(x, rows, &c).tensor(), forge::nonzero_per_row(mask, &d).values()});
           }),
  };
}

std::vector<OpCase> copy_cases() {
  return {
      make(
          "to every dtype", "copy.copy_cast", kNumeric,
          [](Env& e) {
            // In [0, 127): every dtype holds them (truncated), so no conversion is out of range.
            const Tensor x = e.input({23, 45}, {.values = bo::uniform(0, 127)});
            std::vector<Tensor> outs;
            for (const DType d : forge_test::kAllDTypes) outs.push_back(x.to(d));
            e.emit("to each dtype", outs);
          },
          1, false),
      make("clone and contiguous", "copy.copy_cast", kNumeric,
           [](Env& e) {
             const Tensor x = e.leaf({30, 41});
             e.emit("clone, contiguous of the transpose", {x.clone(), x.t().contiguous()});
           }),
  };
}

// Three steps of `Opt` over two packed parameters whose gradients are drawn
// per step; emits the parameters after each.
template <typename Opt, typename Options>
void optimizer_steps(Env& e, const Options& options) {
  std::vector<Tensor> params = {e.param({300, 70}), e.param({70})};
  Opt opt(params, options);
  for (int step = 0; step < 3; ++step) {
    for (Tensor& p : params) p.set_grad(e.input(p.shape(), {.packed = true}));
    opt.step();
    e.emit("step " + std::to_string(step), {params[0].detach(), params[1].detach()});
  }
}

std::vector<OpCase> optim_cases() {
  return {
      make(
          "SGD with momentum", "optim.sgd_step", {DType::f32, DType::f64},
          [](Env& e) { optimizer_steps<forge::optim::SGD>(e, forge::optim::SGDOptions{.lr = 0.1, .momentum = 0.9}); },
          1, false),
      make(
          "AdamW", "optim.adam_step", {DType::f32, DType::f64},
          [](Env& e) {
            optimizer_steps<forge::optim::AdamW>(e, forge::optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
          },
          1, false),
  };
}

void check_on_device(const std::vector<OpCase>& cases) {
  const std::vector<bo::Target> targets = bo::device_targets();
  REQUIRE(targets.size() == 2);  // packed and strided
  std::vector<const OpCase*> pointers;
  for (const OpCase& c : cases) pointers.push_back(&c);
  CHECK(bo::check_cases(pointers, targets) > 0);
}

}  // namespace

TEST_CASE("cuda: elementwise ops on cuda:0 agree with the host", "[cuda]") { check_on_device(elementwise_cases()); }
TEST_CASE("cuda: reductions on cuda:0 agree with the host", "[cuda]") { check_on_device(reduce_cases()); }
TEST_CASE("cuda: nn ops on cuda:0 agree with the host", "[cuda]") { check_on_device(nn_cases()); }
TEST_CASE("cuda: convolution and pooling on cuda:0 agree with the host", "[cuda]") { check_on_device(conv_cases()); }
TEST_CASE("cuda: matmul on cuda:0 agrees with the host", "[cuda]") { check_on_device(linalg_cases()); }
TEST_CASE("cuda: indexing ops on cuda:0 agree with the host", "[cuda]") { check_on_device(indexing_cases()); }
TEST_CASE("cuda: copies and casts on cuda:0 agree with the host", "[cuda]") { check_on_device(copy_cases()); }
TEST_CASE("cuda: optimizer steps on cuda:0 agree with the host", "[cuda]") { check_on_device(optim_cases()); }

TEST_CASE("cuda: the sort family says it is not supported on cuda:0, and randint and randperm draw the host's values",
          "[cuda]") {
  forge_test::TestContext gpu(forge_test::context_options(1, 11, {}, forge::Device::cuda(0)));
  forge_test::TestContext cpu(forge_test::context_options(1, 11));
  const Tensor x = gpu.ones({4, 50});
  const auto unsupported = [](const std::string& op, auto&& fn) {
    const std::string message = forge_test::expect_error(forge::ErrorCode::device, op, fn);
    CHECK(message.find("not supported on cuda:0") != std::string::npos);
  };
  unsupported("topk", [&] { (void)forge::topk(x, 3); });
  unsupported("sort", [&] { (void)forge::sort(x); });
  unsupported("argsort", [&] { (void)forge::argsort(x); });
  unsupported("searchsorted", [&] { (void)forge::searchsorted(x, x); });
  unsupported("multinomial", [&] { (void)forge::multinomial(x, 2); });
  for (forge::ExecContext* ctx : {static_cast<forge::ExecContext*>(&gpu), static_cast<forge::ExecContext*>(&cpu)})
    ctx->manual_seed(4);
  CHECK(gpu.randint(-5, 5, {300}).cpu().to_vector<std::int64_t>() ==
        cpu.randint(-5, 5, {300}).to_vector<std::int64_t>());
  CHECK(gpu.randperm(500, DType::f32).cpu().to_vector<float>() == cpu.randperm(500, DType::f32).to_vector<float>());
}
