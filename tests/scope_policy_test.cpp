// Scope policies (docs/MEMORY.md, "Scope policies"): a small transformer
// trained under hold, release and recompute gets the same gradients (recompute
// bitwise, dropout included) with peak live bytes recompute < release <= hold;
// what each policy holds and reports; checkpoint gradients against the plain
// tape and finite differences; failures (a function that throws in the
// forward or the recompute, a tensor read from outside, an input written in
// place, a recompute of another shape, offload) that leave the pool where it
// was and no .grad behind.

#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::ExecScope;
using forge::ScopePolicy;
using forge::Tensor;
using forge_test::TestContext;

namespace {

using Inputs = std::vector<Tensor>;

std::vector<std::uint32_t> bits(const Tensor& t) {
  std::vector<std::uint32_t> out;
  for (float v : t.to_vector<float>()) out.push_back(std::bit_cast<std::uint32_t>(v));
  return out;
}

// Two pre-norm transformer blocks (attention + MLP, dropout 0.1) and a head
// over [B, L, E] inputs; each block is one ExecScope::run.
struct TinyTransformer {
  static constexpr std::int64_t kBatch = 4, kLength = 48, kDim = 32, kHeads = 4, kVocab = 16;
  std::shared_ptr<forge::nn::TransformerBlock> b1, b2;
  std::shared_ptr<forge::nn::Linear> head;

  explicit TinyTransformer(forge::ExecContext& ctx)
      : b1(std::make_shared<forge::nn::TransformerBlock>(
            ctx, kDim, kHeads, forge::nn::TransformerBlockOptions{.causal = true, .dropout = 0.1})),
        b2(std::make_shared<forge::nn::TransformerBlock>(
            ctx, kDim, kHeads, forge::nn::TransformerBlockOptions{.causal = true, .dropout = 0.1})),
        head(std::make_shared<forge::nn::Linear>(ctx, kDim, kVocab)) {
    b1->train();
    b2->train();
  }
  std::vector<Tensor> params() const {
    std::vector<Tensor> all = b1->parameters();
    for (const Tensor& p : b2->parameters()) all.push_back(p);
    for (const Tensor& p : head->parameters()) all.push_back(p);
    return all;
  }
  Tensor loss(ExecScope& scope, const Tensor& x, const Tensor& y) {
    Tensor h = scope.run([&](const Inputs& in) { return b1->forward(in[0]); }, {x});
    h = scope.run([&](const Inputs& in) { return b2->forward(in[0]); }, {h});
    return forge::cross_entropy(head->forward(h).reshape({kBatch * kLength, kVocab}), y);
  }
};

struct PolicyRun {
  std::vector<std::vector<std::vector<std::uint32_t>>> grads;  // [step][param] bits
  std::vector<forge::ExecScopeStats> stats;                    // per step
};

// Three Adam steps of the transformer, one scope of `policy` per step, on a
// fresh context with a fixed seed and thread count.
PolicyRun train(ScopePolicy policy) {
  TestContext ctx({.threads = 2, .seed = 21});
  TinyTransformer model(ctx);
  const Tensor x = ctx.randn({TinyTransformer::kBatch, TinyTransformer::kLength, TinyTransformer::kDim});
  const Tensor y = ctx.randint(0, TinyTransformer::kVocab, {TinyTransformer::kBatch * TinyTransformer::kLength});
  forge::optim::Adam adam(model.params(), {.lr = 1e-3});
  PolicyRun run;
  for (int step = 0; step < 3; ++step) {
    auto scope = ctx.open_exec_scope(policy);
    model.loss(scope, x, y).backward();
    run.grads.emplace_back();
    for (const Tensor& p : model.params()) run.grads.back().push_back(bits(p.grad()));
    adam.step();
    adam.zero_grad();
    scope.close();
    run.stats.push_back(scope.stats());
  }
  return run;
}

}  // namespace

TEST_CASE("scope policy: a transformer gets the same gradients under each policy, peaks recompute < release <= hold") {
  const PolicyRun hold = train(ScopePolicy::hold);
  const PolicyRun release = train(ScopePolicy::release);
  const PolicyRun recompute = train(ScopePolicy::recompute);
  REQUIRE(hold.grads.size() == 3);
  for (std::size_t step = 0; step < 3; ++step) {
    INFO("step " << step);
    CHECK(release.grads[step] == hold.grads[step]);
    CHECK(recompute.grads[step] == hold.grads[step]);  // bitwise: the same dropout masks
    const auto &h = hold.stats[step], &r = release.stats[step], &c = recompute.stats[step];
    INFO("peak live bytes: hold " << h.peak_live_bytes << ", release " << r.peak_live_bytes << ", recompute "
                                  << c.peak_live_bytes);
    CHECK(c.peak_live_bytes < r.peak_live_bytes);
    CHECK(r.peak_live_bytes <= h.peak_live_bytes);
    CHECK(h.policy == ScopePolicy::hold);
    CHECK(h.buffers > 0);
    CHECK(r.buffers == 0);
    CHECK(c.buffers == 0);
    CHECK(r.allocations > 0);
    CHECK(c.allocations > r.allocations);  // the recompute runs the blocks' forward again
    CHECK(c.checkpoints == 2);
    CHECK(c.recomputes == 2);
    CHECK(c.recompute_seconds > 0.0);
    CHECK(c.checkpoint_bytes ==
          2 * TinyTransformer::kBatch * TinyTransformer::kLength * TinyTransformer::kDim * sizeof(float));
    CHECK(h.checkpoints == 0);
    CHECK(r.recomputes == 0);
  }
  // The pool is warm after the first step: later steps take nothing from the system.
  CHECK(release.stats[2].system_allocations == 0);
  CHECK(recompute.stats[2].system_allocations == 0);
}

TEST_CASE("scope policy: a release scope holds nothing and counts what the step allocated") {
  TestContext ctx;
  const Tensor x = ctx.rand({64, 64});
  const std::int64_t baseline = ctx.pool().outstanding();
  auto scope = ctx.open_exec_scope(ScopePolicy::release);
  Tensor h = x;
  for (int i = 0; i < 8; ++i) h = forge::relu(h + x);  // 16 ops
  CHECK(ctx.pool().outstanding() == baseline + 1);     // only h
  const forge::ExecScopeStats s = scope.stats();
  CHECK(s.policy == ScopePolicy::release);
  CHECK(s.buffers == 0);
  CHECK(s.bytes == 0);
  CHECK(s.allocations == 16);
  CHECK(s.peak_live_bytes >= ctx.pool().live_bytes() + 16384);  // two 16 KiB blocks live at once
  h = Tensor();
  scope.close();
  CHECK(scope.stats().allocations == 16);
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("scope policy: the innermost scope decides, a hold scope inside a release scope holds its own") {
  TestContext ctx;
  const Tensor x = ctx.ones({64, 64});
  const std::int64_t baseline = ctx.pool().outstanding();
  auto outer = ctx.open_exec_scope(ScopePolicy::release);
  (void)(x + x);
  {
    auto inner = ctx.open_exec_scope(ScopePolicy::hold);
    (void)(x * x);
    (void)(x * x);
    CHECK(ctx.pool().outstanding() == baseline + 2);
    CHECK(inner.stats().buffers == 2);
    {
      auto innermost = ctx.open_exec_scope(ScopePolicy::release);
      (void)(x - x);
      CHECK(ctx.pool().outstanding() == baseline + 2);
    }
  }
  CHECK(ctx.pool().outstanding() == baseline);
  (void)(x + x);
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("scope policy: run() is a plain call under hold and release, a checkpoint under recompute") {
  TestContext ctx;
  const Tensor w = ctx.rand({8, 8}).requires_grad_();
  const Tensor x = ctx.rand({4, 8});
  const auto fn = [&](const Inputs& in) { return forge::tanh(forge::linear(in[0], w)); };
  for (ScopePolicy policy : {ScopePolicy::hold, ScopePolicy::release}) {
    auto scope = ctx.open_exec_scope(policy);
    CHECK(std::string(scope.run(fn, {x}).grad_fn_name()) == "tanh");
  }
  auto scope = ctx.open_exec_scope(ScopePolicy::recompute);
  CHECK(scope.policy() == ScopePolicy::recompute);
  CHECK(std::string(scope.run(fn, {x}).grad_fn_name()) == "checkpoint");
  CHECK(scope.stats().checkpoints == 1);
}

TEST_CASE("scope policy: run() on a closed scope is invalid_argument") {
  TestContext ctx;
  auto scope = ctx.open_exec_scope(ScopePolicy::recompute);
  scope.close();
  FORGE_REQUIRE_ERROR(invalid_argument, "ExecScope::run", scope.run([](const Inputs& in) { return in[0]; }, {}));
}

TEST_CASE("scope policy: offload is refused on a host context, naming the policies that work") {
  TestContext ctx;
  const std::string message = FORGE_REQUIRE_ERROR(device, "open_exec_scope", ctx.open_exec_scope(ScopePolicy::offload));
  CHECK(message.find("ScopePolicy::recompute") != std::string::npos);
  auto after = ctx.open_exec_scope();  // nothing was left claimed
  CHECK(after.is_open());
}

TEST_CASE("checkpoint: gradients of inputs and parameters equal the plain tape's, bitwise") {
  TestContext ctx({.threads = 2, .seed = 4});
  const Tensor w1 = (ctx.randn({16, 8}) * 0.3).requires_grad_();
  const Tensor b1 = ctx.zeros({16}).requires_grad_();
  const Tensor w2 = (ctx.randn({8, 16}) * 0.3).requires_grad_();
  const Tensor x0 = ctx.randn({5, 8}).requires_grad_();
  const Tensor scale = ctx.randn({8}).requires_grad_();
  // x is a non-leaf input, scale a second input that is a leaf.
  const auto block = [&](const Inputs& in) {
    return forge::linear(forge::gelu(forge::linear(in[0], w1, b1)), w2) * in[1] + in[0];
  };
  const auto grads = [&](bool checkpointed) {
    const Tensor x = x0 * 2.0;
    const Tensor y = checkpointed ? forge::autograd::checkpoint(block, {x, scale}) : block({x, scale});
    (y * y).sum().backward();
    std::vector<std::vector<std::uint32_t>> out;
    for (const Tensor& t : {w1, b1, w2, x0, scale}) {
      out.push_back(bits(t.grad()));
      Tensor(t).zero_grad();
    }
    return out;
  };
  const auto plain = grads(false);
  CHECK(grads(true) == plain);
}

TEST_CASE("checkpoint: gradcheck in f64 through a checkpoint, nested checkpoints and autograd::grad") {
  TestContext ctx({.threads = 2, .seed = 5});
  const Tensor w = ctx.randn({4, 4}, forge::DType::f64).requires_grad_();
  const auto inner = [&](const Inputs& in) { return forge::sigmoid(forge::matmul(in[0], w)) * in[1]; };
  const auto outer = [&](const Inputs& in) {
    return forge::autograd::checkpoint(inner, {forge::tanh(in[0]), in[1]}) + in[0];
  };
  const auto fn = [&](const Inputs& in) { return forge::autograd::checkpoint(outer, in); };
  const Tensor a = ctx.randn({3, 4}, forge::DType::f64).requires_grad_();
  const Tensor b = ctx.randn({3, 4}, forge::DType::f64).requires_grad_();
  const auto result = forge::autograd::gradcheck(fn, {a, b, w});
  INFO(result.message);
  CHECK(result.ok);
  // autograd::grad through the checkpoint: captured, no .grad written.
  const auto g = forge::autograd::grad({fn({a, b}).sum()}, {a, w});
  const auto expected = forge::autograd::grad({outer({a, b}).sum()}, {a, w});
  CHECK(g[0].to_vector<double>() == expected[0].to_vector<double>());
  CHECK(g[1].to_vector<double>() == expected[1].to_vector<double>());
  CHECK_FALSE(w.grad().defined());
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("checkpoint: with grad mode off, or an output that needs no gradient, it is a plain call") {
  TestContext ctx;
  const Tensor w = ctx.rand({4, 4}).requires_grad_();
  const Tensor x = ctx.rand({2, 4});
  {
    forge::autograd::NoGradGuard no_grad;
    CHECK_FALSE(
        forge::autograd::checkpoint([&](const Inputs& in) { return forge::matmul(in[0], w); }, {x}).requires_grad());
  }
  const Tensor plain = forge::autograd::checkpoint([](const Inputs& in) { return in[0] * 2.0; }, {x});
  CHECK_FALSE(plain.requires_grad());
  // A function returning its input records nothing either.
  const Tensor same = forge::autograd::checkpoint([](const Inputs& in) { return in[0]; }, {w});
  CHECK(same.is_leaf());
}

TEST_CASE("checkpoint: the forward's activations are freed, only inputs and the output stay") {
  TestContext ctx({.threads = 2, .seed = 6});
  const Tensor w = (ctx.randn({64, 64}) * 0.1).requires_grad_();
  const Tensor x = ctx.randn({32, 64}).requires_grad_();
  const auto deep = [&](const Inputs& in) {
    Tensor h = in[0];
    for (int i = 0; i < 8; ++i) h = forge::tanh(forge::matmul(h, w));
    return h;
  };
  const std::int64_t baseline = ctx.pool().outstanding();
  Tensor plain = deep({x});
  const std::int64_t plain_held = ctx.pool().outstanding() - baseline;
  plain = Tensor();
  Tensor y = forge::autograd::checkpoint(deep, {x});
  CHECK(ctx.pool().outstanding() - baseline == 1);  // the output; x and w were there before
  CHECK(plain_held >= 8);                           // the tape saves each tanh's output
  y.sum().backward();
  CHECK(x.grad().defined());
  CHECK(w.grad().defined());
  y = Tensor();
  Tensor(x).zero_grad();
  Tensor(w).zero_grad();
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("checkpoint: a function that throws in the forward leaves the pool at its baseline") {
  TestContext ctx;
  const Tensor w = ctx.rand({8, 8}).requires_grad_();
  const Tensor x = ctx.rand({4, 8}).requires_grad_();
  const std::int64_t baseline = ctx.pool().outstanding();
  auto scope = ctx.open_exec_scope(ScopePolicy::recompute);
  const auto failing = [&](const Inputs& in) {
    const Tensor h = forge::matmul(in[0], w);
    return forge::matmul(h, ctx.rand({3, 3}));  // shapes do not match
  };
  FORGE_REQUIRE_ERROR(shape, "matmul", scope.run(failing, {x}));
  CHECK(ctx.pool().outstanding() == baseline);
  CHECK(scope.stats().checkpoints == 0);
}

TEST_CASE("checkpoint: a function that throws during the recompute fails backward, no .grad, pool at baseline") {
  TestContext ctx;
  const Tensor w = ctx.rand({8, 8}).requires_grad_();
  const Tensor v = ctx.rand({8}).requires_grad_();
  const Tensor x = ctx.rand({4, 8});
  int calls = 0;
  const auto flaky = [&](const Inputs& in) {
    const Tensor h = forge::tanh(forge::matmul(in[0], w));
    if (++calls == 2) throw std::runtime_error("flaky recompute");
    return h;
  };
  const std::int64_t baseline = ctx.pool().outstanding();
  {
    auto scope = ctx.open_exec_scope(ScopePolicy::recompute);
    const Tensor loss = (scope.run(flaky, {x}) * v).sum();
    CHECK_THROWS_WITH(loss.backward(), "flaky recompute");
  }
  CHECK(calls == 2);
  CHECK_FALSE(w.grad().defined());  // Note [All-or-nothing .grad]: v's gradient was not committed either
  CHECK_FALSE(v.grad().defined());
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("checkpoint: a non-leaf read from outside the function is refused, naming the op that made it") {
  TestContext ctx;
  const Tensor w = ctx.rand({8, 8}).requires_grad_();
  const Tensor x = ctx.rand({4, 8});
  const Tensor outside = forge::matmul(x, w);  // has history, not passed in
  const std::int64_t baseline = ctx.pool().outstanding();
  const std::string message = FORGE_REQUIRE_ERROR(
      invalid_argument, "checkpoint",
      forge::autograd::checkpoint([&](const Inputs& in) { return forge::tanh(in[0]) + outside; }, {x}));
  CHECK(message.find("made by matmul") != std::string::npos);
  CHECK(message.find("pass it in the inputs") != std::string::npos);
  CHECK(ctx.pool().outstanding() == baseline);
  // Passed in, it works.
  const Tensor y =
      forge::autograd::checkpoint([&](const Inputs& in) { return forge::tanh(in[0]) + in[1]; }, {x, outside});
  y.sum().backward();
  CHECK(w.grad().defined());
}

TEST_CASE("checkpoint: a function writing its input in place is refused") {
  TestContext ctx;
  const Tensor w = ctx.rand({4}).requires_grad_();
  const Tensor x = ctx.rand({4});
  const std::int64_t baseline = ctx.pool().outstanding();
  FORGE_REQUIRE_ERROR(invalid_argument, "checkpoint",
                      forge::autograd::checkpoint(
                          [&](const Inputs& in) {
                            Tensor t = in[0];
                            t.mul_(2.0);
                            return t * w;
                          },
                          {x}));
  CHECK(ctx.pool().outstanding() == baseline);
}

TEST_CASE("checkpoint: an input written in place after the forward makes backward refuse") {
  TestContext ctx;
  const Tensor w = ctx.rand({4}).requires_grad_();
  Tensor x = ctx.rand({4});
  const Tensor y = forge::autograd::checkpoint([&](const Inputs& in) { return in[0] * w; }, {x});
  x.add_(1.0);
  FORGE_REQUIRE_ERROR(backward, "checkpoint", y.sum().backward());
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("checkpoint: a recompute of another shape is refused as backward") {
  TestContext ctx;
  const Tensor w = ctx.rand({4, 4}).requires_grad_();
  const Tensor x = ctx.rand({2, 4});
  int calls = 0;
  const auto changing = [&](const Inputs& in) {
    const Tensor y = forge::matmul(in[0], w);
    return ++calls == 1 ? y : y.sum(0);
  };
  const Tensor y = forge::autograd::checkpoint(changing, {x});
  const std::string message = FORGE_REQUIRE_ERROR(backward, "checkpoint", y.sum().backward());
  CHECK(message.find("same thing when run again") != std::string::npos);
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("checkpoint: backward inside a hold scope does not hold the recompute's activations") {
  const auto held = [](ScopePolicy inner) {
    TestContext ctx({.threads = 2, .seed = 8});
    const Tensor w = (ctx.randn({128, 128}) * 0.1).requires_grad_();
    const Tensor x = ctx.randn({64, 128});
    const auto deep = [&](const Inputs& in) {
      Tensor h = in[0];
      for (int i = 0; i < 8; ++i) h = forge::tanh(forge::matmul(h, w));
      return h;
    };
    auto scope = ctx.open_exec_scope(ScopePolicy::hold);
    Tensor y;
    {
      auto forward = ctx.open_exec_scope(inner);
      y = forward.run(deep, {x});
    }
    y.sum().backward();
    Tensor(w).zero_grad();
    return scope.stats().buffers;
  };
  // The outer scope holds what backward makes outside the checkpoint: with
  // one, the recompute (16 activations) and its gradients are not held.
  const std::size_t plain = held(ScopePolicy::hold), checkpointed = held(ScopePolicy::recompute);
  INFO("held: plain " << plain << ", checkpointed " << checkpointed);
  CHECK(plain >= 16);
  CHECK(checkpointed <= 4);
}

TEST_CASE("checkpoint: integer inputs pass through and a tensor passed twice gets both gradients") {
  TestContext ctx({.threads = 2, .seed = 9});
  const Tensor table = ctx.randn({10, 4}).requires_grad_();
  const Tensor ids = ctx.from_vector<std::int64_t>({1, 3, 3, 7}, {4});
  const Tensor x0 = ctx.randn({4, 4}).requires_grad_();
  const auto fn = [&](const Inputs& in) { return forge::embedding(table, in[0]) * in[1] + forge::exp(in[2]); };
  const auto grads = [&](bool checkpointed) {
    const Tensor x = x0 * 1.5;  // a non-leaf, passed as inputs 1 and 2
    const Inputs in{ids, x, x};
    (checkpointed ? forge::autograd::checkpoint(fn, in) : fn(in)).sum().backward();
    std::vector<std::vector<std::uint32_t>> out{bits(table.grad()), bits(x0.grad())};
    Tensor(table).zero_grad();
    Tensor(x0).zero_grad();
    return out;
  };
  const auto plain = grads(false);
  CHECK(grads(true) == plain);
}

TEST_CASE("checkpoint: a parameter's hooks run once per backward, not again in the recompute") {
  TestContext ctx({.threads = 2, .seed = 4});
  const Tensor w = (ctx.randn({4, 4}) * 0.3).requires_grad_();
  Tensor wh = w;
  int pre = 0, post = 0;
  auto h1 = wh.register_hook([&](const Tensor&) {
    ++pre;
    return Tensor();
  });
  auto h2 = wh.register_post_accumulate_grad_hook([&](const Tensor&) { ++post; });
  const Tensor x = ctx.randn({3, 4}).requires_grad_();
  const Tensor y =
      forge::autograd::checkpoint([&](const Inputs& in) { return forge::tanh(forge::linear(in[0], w)); }, {x});
  (y * y).sum().backward();
  CHECK(pre == 1);
  CHECK(post == 1);
  h1.remove();
  h2.remove();
}
