// Fault injection (the reliability harness): every system allocation of
// tensor creation, each op family, a backward pass, an optimizer step, file
// loads, a data loader and the arena calls is made to fail in turn (walk() in
// fault_support.h), with 1 and 2 threads (2 runs the workers' scratch paths of
// GEMM, conv2d and the reductions). Each failure must surface as
// out_of_memory and leave the pool, the inputs and the next call as if it
// never happened. The hidden [.report] case prints the figures per family:
//   ./build/release/tests/forge_tests "[.report]"

#include <unistd.h>

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fault_support.h"
#include "forge/forge.h"
#include "support.h"

using forge::DType;
using forge::ExecContext;
using forge::Tensor;
using forge_test::Fault;
using forge_test::Inputs;
using forge_test::walk;
namespace fs = std::filesystem;
namespace nn = forge::nn;
namespace optim = forge::optim;

namespace {

using forge_test::caller_list;
using forge_test::Results;

// What walking one family found.
struct Tally {
  std::string family;
  int threads = 0;
  int calls = 0;                  // calls walked
  int failures = 0;               // injected failures, each released cleanly
  int absorbed = 0;               // injected nothrow failures the call did without
  std::uint64_t allocations = 0;  // system allocations of the never-failed runs
  void add(const forge_test::Walked& w) {
    ++calls;
    failures += w.failures;
    absorbed += w.absorbed;
    allocations += w.clean_allocations;
  }
  // Every allocation of a clean run was walked.
  bool complete() const { return static_cast<std::uint64_t>(failures + absorbed) == allocations; }
};

struct NamedCall {
  const char* name;
  std::function<Results(ExecContext&, Inputs&)> call;
};

// Walks each call over inputs made by `setup`, summing into one tally.
Tally walk_calls(const std::string& family, int threads, Fault fault, const std::function<Inputs(ExecContext&)>& setup,
                 const std::vector<NamedCall>& calls) {
  Tally tally{family, threads};
  for (const NamedCall& c : calls) tally.add(walk(family + " / " + c.name, threads, fault, setup, c.call));
  return tally;
}

Tally creation(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) { return Inputs{{ctx.randn({64, 48})}}; };
  return walk_calls("creation", threads, fault, setup,
                    {{"empty + fill_",
                      [](ExecContext& ctx, Inputs&) {
                        return Results{ctx.empty({64, 48}).fill_(3)};
                      }},
                     {"zeros",
                      [](ExecContext& ctx, Inputs&) {
                        return Results{ctx.zeros({64, 48}, DType::f64)};
                      }},
                     {"ones", [](ExecContext& ctx, Inputs&) { return Results{ctx.ones({300}, DType::bf16)}; }},
                     {"full",
                      [](ExecContext& ctx, Inputs&) {
                        return Results{ctx.full({7, 9}, 2.5, DType::f16)};
                      }},
                     {"arange", [](ExecContext& ctx, Inputs&) { return Results{ctx.arange(0, 1000, 3, DType::i64)}; }},
                     {"linspace", [](ExecContext& ctx, Inputs&) { return Results{ctx.linspace(-1, 1, 513)}; }},
                     {"eye", [](ExecContext& ctx, Inputs&) { return Results{ctx.eye(33, 17, DType::i32)}; }},
                     {"rand",
                      [](ExecContext& ctx, Inputs&) {
                        return Results{ctx.rand({128, 300})};
                      }},
                     {"randn",
                      [](ExecContext& ctx, Inputs&) {
                        return Results{ctx.randn({128, 300}, DType::f64)};
                      }},
                     {"from_vector",
                      [](ExecContext& ctx, Inputs&) {
                        std::vector<float> values;
                        std::vector<bool> flags;
                        {
                          const forge_test::heap::Pause caller;  // the caller's vectors
                          values.assign(999, 1.5f);
                          flags = {true, false, true};
                        }
                        return Results{ctx.from_vector<float>(values, {27, 37}), ctx.from_vector<bool>(flags)};
                      }},
                     {"casts", [](ExecContext&, Inputs& in) {
                        return Results{in[0].to(DType::f16), in[0].to(DType::bf16),    in[0].to(DType::f64),
                                       in[0].to(DType::i32), in[0].to(DType::boolean), in[0].t().to(DType::f64)};
                      }}});
}

Tally elementwise(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    return Inputs{{ctx.randn({256, 256}), ctx.randn({256}), ctx.randn({256, 1}, DType::f64),
                   ctx.arange(0, 256, 1, DType::i32), ctx.rand({256, 256}) + 0.5}};
  };
  return walk_calls(
      "elementwise binary", threads, fault, setup,
      {{"add, broadcast row", [](ExecContext&, Inputs& in) { return Results{forge::add(in[0], in[1])}; }},
       {"mul, f32 x f64 column", [](ExecContext&, Inputs& in) { return Results{forge::mul(in[0], in[2])}; }},
       {"sub, f32 x i32", [](ExecContext&, Inputs& in) { return Results{forge::sub(in[0], in[3])}; }},
       {"div, transposed", [](ExecContext&, Inputs& in) { return Results{forge::div(in[0].t(), in[4])}; }},
       {"pow, scalar", [](ExecContext&, Inputs& in) { return Results{forge::pow(in[4], 1.5)}; }},
       {"maximum", [](ExecContext&, Inputs& in) { return Results{forge::maximum(in[0], in[1])}; }},
       {"comparisons",
        [](ExecContext&, Inputs& in) {
          return Results{forge::lt(in[0], in[1]), forge::logical_and(forge::gt(in[0], 0.0), forge::le(in[2], 0.5))};
        }},
       // In place: a failure must come before the first write.
       {"add_ of an i32 row", [](ExecContext&, Inputs& in) { return Results{in.t[0].add_(in[3])}; }},
       {"copy_ of its own flip", [](ExecContext&, Inputs& in) { return Results{in.t[4].copy_(in[4].flip({1}))}; }},
       {"mul_ by an f64 column", [](ExecContext&, Inputs& in) { return Results{in.t[0].mul_(in[2])}; }}});
}

Tally unary(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    return Inputs{{ctx.randn({256, 256}), ctx.arange(-500, 500, 1, DType::i32), ctx.randn({256, 256}, DType::bf16)}};
  };
  return walk_calls("unary", threads, fault, setup,
                    {{"exp, tanh, sigmoid",
                      [](ExecContext&, Inputs& in) {
                        return Results{forge::exp(in[0]), forge::tanh(in[0]), forge::sigmoid(in[0].t())};
                      }},
                     {"gelu, silu, softplus",
                      [](ExecContext&, Inputs& in) {
                        return Results{forge::gelu(in[0], forge::GeluApproximation::tanh), forge::silu(in[2]),
                                       forge::softplus(in[0])};
                      }},
                     {"abs, neg, clamp of i32", [](ExecContext&, Inputs& in) {
                        return Results{forge::abs(in[1]), forge::neg(in[1]), forge::clamp(in[1], -3, 7)};
                      }}});
}

Tally reductions(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) { return Inputs{{ctx.randn({256, 256}), ctx.randn({4096, 16})}}; };
  return walk_calls(
      "reductions", threads, fault, setup,
      {{"sum",
        [](ExecContext&, Inputs& in) {
          return Results{forge::sum(in[0]), forge::sum(in[1], {0})};
        }},
       {"mean",
        [](ExecContext&, Inputs& in) {
          return Results{forge::mean(in[0], {1}), forge::mean(in[0].t(), {1})};
        }},
       {"amax, amin",
        [](ExecContext&, Inputs& in) {
          return Results{forge::amax(in[1], {0}), forge::amin(in[0])};
        }},
       {"argmax",
        [](ExecContext&, Inputs& in) {
          return Results{forge::argmax(in[1], 0), forge::argmax(in[0])};
        }},
       {"var, std",
        [](ExecContext&, Inputs& in) {
          return Results{forge::var(in[0], {1}), forge::std(in[1], {0})};
        }},
       {"cumsum",
        [](ExecContext&, Inputs& in) {
          return Results{forge::cumsum(in[0], 1), forge::cumsum(in[1], 0)};
        }},
       {"logsumexp", [](ExecContext&, Inputs& in) { return Results{forge::logsumexp(in[0], {1})}; }},
       {"norm, prod, any", [](ExecContext&, Inputs& in) {
          return Results{forge::norm(in[1], 2.0, {1}), forge::prod(in[1], {1}), forge::any(forge::gt(in[0], 3.0))};
        }}});
}

Tally shape_ops(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    return Inputs{{ctx.randn({64, 96}), ctx.randn({64, 96}), ctx.randn({2, 3, 40, 40})}};
  };
  return walk_calls(
      "shape ops", threads, fault, setup,
      {{"cat",
        [](ExecContext&, Inputs& in) {
          const Tensor b = in[1].t().t();
          return Results{forge::cat(caller_list({in[0], b}), 1)};
        }},
       {"stack",
        [](ExecContext&, Inputs& in) {
          return Results{forge::stack(caller_list({in[0], in[1], in[0]}), 1)};
        }},
       {"split (views)", [](ExecContext&, Inputs& in) { return forge::split(in[0], 10, 1); }},
       {"repeat",
        [](ExecContext&, Inputs& in) {
          return Results{forge::repeat(in[0], {2, 3})};
        }},
       {"flip",
        [](ExecContext&, Inputs& in) {
          return Results{forge::flip(in[0], {0, 1})};
        }},
       {"pad", [](ExecContext&, Inputs& in) {
          return Results{forge::pad(in[2], {1, 2, 3, 4}), forge::pad(in[2], {2, 2, 2, 2}, forge::PadMode::reflect)};
        }}});
}

Tally views(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) { return Inputs{{ctx.randn({64, 96}), ctx.randn({4, 8, 16, 6})}}; };
  return walk_calls("views + contiguous", threads, fault, setup,
                    {{"views (no copy)",
                      [](ExecContext&, Inputs& in) {
                        return Results{in[0].t(), in[0].view({96, 64}), in[1].permute({3, 1, 0, 2}),
                                       in[0].narrow(1, 3, 40), in[0].unsqueeze(0).expand({3, 64, 96})};
                      }},
                     {"contiguous", [](ExecContext&, Inputs& in) {
                        return Results{in[0].t().contiguous(), in[1].permute({3, 1, 0, 2}).contiguous(),
                                       in[0].slice(1, 1, 90, 3).contiguous(),
                                       in[1].transpose(1, 2).reshape({4, 128, 6}),
                                       in[0].unsqueeze(0).expand({3, 64, 96}).contiguous()};
                      }}});
}

Tally indexing(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    return Inputs{{ctx.randn({128, 64}), (ctx.rand({128, 64}) * 64).to(DType::i64),
                   (ctx.rand({200}) * 128).to(DType::i64), ctx.randn({128, 64}), forge::gt(ctx.randn({128, 64}), 0.0)}};
  };
  return walk_calls(
      "indexing", threads, fault, setup,
      {{"index_select", [](ExecContext&, Inputs& in) { return Results{forge::index_select(in[0], 0, in[2])}; }},
       {"gather", [](ExecContext&, Inputs& in) { return Results{forge::gather(in[0], 1, in[1])}; }},
       {"scatter_add", [](ExecContext&, Inputs& in) { return Results{forge::scatter_add(in[0], 1, in[1], in[3])}; }},
       {"masked_fill", [](ExecContext&, Inputs& in) { return Results{forge::masked_fill(in[0], in[4], -1.0)}; }},
       {"where", [](ExecContext&, Inputs& in) { return Results{forge::where(in[4], in[0], in[3].t().t())}; }},
       {"embedding, one_hot", [](ExecContext&, Inputs& in) {
          return Results{forge::embedding(in[0], in[2].view({20, 10})), forge::one_hot(in[2], 128)};
        }}});
}

Tally linalg(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    return Inputs{{ctx.randn({128, 128}), ctx.randn({128, 96}), ctx.randn({4, 64, 48}), ctx.randn({4, 48, 64}),
                   ctx.randn({96}), ctx.randn({128})}};
  };
  return walk_calls(
      "linalg", threads, fault, setup,
      {{"matmul 2-D", [](ExecContext&, Inputs& in) { return Results{forge::matmul(in[0], in[1])}; }},
       {"matmul transposed", [](ExecContext&, Inputs& in) { return Results{forge::matmul(in[1].t(), in[0].t())}; }},
       {"matmul vector",
        [](ExecContext&, Inputs& in) {
          return Results{forge::matmul(in[1], in[4]), forge::matmul(in[5], in[1]), forge::dot(in[5], in[5])};
        }},
       {"matmul batched",
        [](ExecContext&, Inputs& in) {
          return Results{forge::matmul(in[2], in[3]), forge::matmul(in[2], in[3].select(0, 0))};
        }},
       {"matmul f16, bf16",
        [](ExecContext&, Inputs& in) {
          return Results{forge::matmul(in[0].to(DType::f16), in[1].to(DType::f16)),
                         forge::matmul(in[2].to(DType::bf16), in[3].to(DType::bf16))};
        }},
       {"matmul broadcast batch",
        [](ExecContext&, Inputs& in) { return Results{forge::matmul(in[2].unsqueeze(0), in[3].narrow(0, 0, 1))}; }},
       {"linear",
        [](ExecContext&, Inputs& in) {
          const Tensor w = in[3].select(0, 0).t();  // [64, 48]
          return Results{forge::linear(in[0], in[1].t(), in[4]), forge::linear(in[2], w),
                         forge::linear(in[2].to(DType::bf16), w.to(DType::bf16))};
        }},
       {"bmm, addmm, outer", [](ExecContext&, Inputs& in) {
          return Results{forge::bmm(in[2], in[3]), forge::addmm(in[4], in[0], in[1]), forge::outer(in[5], in[4])};
        }}});
}

Tally nn_ops(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    return Inputs{{ctx.randn({64, 256}), ctx.randn({256}), ctx.randn({2, 4, 32, 16}), ctx.randn({8, 3, 32, 32}),
                   ctx.randn({16, 3, 3, 3}), ctx.randn({16})}};
  };
  return walk_calls(
      "nn ops", threads, fault, setup,
      {{"softmax, log_softmax",
        [](ExecContext&, Inputs& in) {
          return Results{forge::softmax(in[0], 1), forge::log_softmax(in[0].t(), 0)};
        }},
       {"layer_norm, rms_norm",
        [](ExecContext&, Inputs& in) {
          return Results{forge::layer_norm(in[0], {256}, in[1], in[1]), forge::rms_norm(in[0].t().t(), {256}, in[1])};
        }},
       {"gelu, dropout",
        [](ExecContext&, Inputs& in) {
          return Results{forge::gelu(in[0]), forge::dropout(in[0], 0.3)};
        }},
       {"attention",
        [](ExecContext&, Inputs& in) {
          return Results{forge::scaled_dot_product_attention(in[2], in[2], in[2]),
                         forge::scaled_dot_product_attention(in[2], in[2], in[2], Tensor(), true)};
        }},
       {"conv2d",
        [](ExecContext&, Inputs& in) {
          return Results{forge::conv2d(in[3], in[4], in[5], {.padding = {1, 1}}),
                         forge::conv2d(in[3], in[4], Tensor(), {.stride = {2, 2}})};
        }},
       {"max_pool2d, avg_pool2d", [](ExecContext&, Inputs& in) {
          return Results{forge::max_pool2d(in[3], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}),
                         forge::avg_pool2d(in[3])};
        }}});
}

Tally losses(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    return Inputs{{ctx.randn({256, 10}), (ctx.rand({256}) * 10).to(DType::i64), ctx.randn({256, 10})}};
  };
  return walk_calls(
      "losses", threads, fault, setup,
      {{"cross_entropy",
        [](ExecContext&, Inputs& in) {
          return Results{
              forge::cross_entropy(in[0], in[1]),
              forge::cross_entropy(in[0], in[1], {.reduction = forge::Reduction::none, .label_smoothing = 0.1})};
        }},
       {"nll_loss",
        [](ExecContext&, Inputs& in) {
          return Results{forge::nll_loss(forge::log_softmax(in[0], 1), in[1], forge::Reduction::sum)};
        }},
       {"mse_loss", [](ExecContext&, Inputs& in) { return Results{forge::mse_loss(in[0], in[2])}; }}});
}

// ---- a backward pass ----

struct Model {
  std::shared_ptr<nn::Module> net;
  Tensor x, y;
  std::vector<Tensor> inputs() const {
    std::vector<Tensor> all = net->parameters();
    all.push_back(x);
    all.push_back(y);
    return all;
  }
  // The .grad a successful backward made. A failed one makes none (Note
  // [All-or-nothing .grad]): the walk checks the pool right after a failure.
  void reset() { net->zero_grad(); }
};

// Backward is the last call that may fail: one that fails after a
// successful backward would leave its .grad behind by contract.
Results train_step(ExecContext&, Model& m) {
  m.net->zero_grad();
  const std::vector<Tensor> params = m.net->parameters();
  const Tensor loss = forge::cross_entropy((*m.net)(m.x), m.y);
  Results out{loss.detach()};
  loss.backward();
  for (const Tensor& p : params) out.push_back(p.grad());
  return out;
}

Model mlp(ExecContext& ctx) {
  auto net = std::make_shared<nn::Sequential>(ctx);
  net->push_back(std::make_shared<nn::Linear>(ctx, 64, 128));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(ctx, 128, 10));
  return {net, ctx.randn({128, 64}), (ctx.rand({128}) * 10).to(DType::i64)};
}

Model cnn(ExecContext& ctx) {
  auto net = std::make_shared<nn::Sequential>(ctx);
  net->push_back(std::make_shared<nn::Conv2d>(ctx, 3, 16, 3, nn::Conv2dOptions{.padding = 1}));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::MaxPool2d>(2));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(ctx, 16 * 12 * 12, 10));
  return {net, ctx.randn({16, 3, 24, 24}), (ctx.rand({16}) * 10).to(DType::i64)};
}

Tally backward(int threads, Fault fault) {
  Tally tally{"backward", threads};
  for (auto [name, setup] : {std::pair{"MLP", &mlp}, std::pair{"CNN", &cnn}})
    tally.add(walk(std::string("backward / ") + name, threads, fault, setup, train_step));
  return tally;
}

// ---- ops inside an exec scope ----
// An open scope adopts every op's outputs; the room for them is made before
// the op computes (detail::ScopeStack::reserve), since adopting cannot fail. The
// scope starts nearly full (its first 64 slots less one), so that an op with
// two outputs (max along a dim) or a backward that adopts two gradients
// (conv2d) needs the room to grow.

struct ScopedInputs {
  Tensor x, w;
  std::vector<Tensor> inputs() const { return {x, w}; }
  void reset() {
    x.zero_grad();
    w.zero_grad();
  }
};

Results scoped_ops(ExecContext& ctx, ScopedInputs& in, std::size_t filler) {
  Results out;
  forge::ExecScope scope = ctx.open_exec_scope();
  for (std::size_t i = 0; i < filler; ++i) (void)ctx.empty({4});
  const forge::ValuesIndices mx = in.x.detach().max(1);
  const forge::ValuesIndices mn = in.x.detach().min(1, true);
  const Tensor y = forge::conv2d(in.x, in.w, Tensor(), {.padding = {1, 1}});
  out.push_back(mx.values);
  out.push_back(mx.indices);
  out.push_back(mn.values);
  out.push_back(mn.indices);
  out.push_back(y.detach());
  forge::sum(y).backward();  // the last call that may fail (see train_step)
  out.push_back(in.x.grad());
  out.push_back(in.w.grad());
  return out;
}

Tally scoped(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    return ScopedInputs{ctx.randn({2, 3, 8, 8}).requires_grad_(), ctx.randn({4, 3, 3, 3}).requires_grad_()};
  };
  Tally tally{"exec scope", threads};
  for (std::size_t filler : {62, 63})
    tally.add(walk("exec scope / " + std::to_string(filler) + " held, then max, min, conv2d backward", threads, fault,
                   setup, [filler](ExecContext& ctx, ScopedInputs& in) { return scoped_ops(ctx, in, filler); }));
  return tally;
}

// ---- nn module constructors ----
// Parameters live in owned memory outside the pool (nn/owned.h); their
// initial values are drawn in pooled temporaries.

Tally modules(int threads, Fault fault) {
  auto setup = [](ExecContext&) { return Inputs{}; };
  auto parameters_of = [](const nn::Module& m) {
    Results out;
    for (const Tensor& p : m.parameters()) out.push_back(p.detach());
    return out;
  };
  return walk_calls(
      "nn modules", threads, fault, setup,
      {{"Linear", [=](ExecContext& ctx, Inputs&) { return parameters_of(nn::Linear(ctx, 48, 32)); }},
       {"Conv2d", [=](ExecContext& ctx,
                      Inputs&) { return parameters_of(nn::Conv2d(ctx, 3, 8, 3, nn::Conv2dOptions{.padding = 1})); }},
       {"Embedding with padding_idx",
        [=](ExecContext& ctx, Inputs&) { return parameters_of(nn::Embedding(ctx, 50, 16, 3)); }},
       {"MultiheadAttention",
        [=](ExecContext& ctx, Inputs&) { return parameters_of(nn::MultiheadAttention(ctx, 32, 4)); }}});
}

}  // namespace

namespace {

// Each family, with 1 and 2 threads, walked at least one failure and as many
// as a clean run's system allocations.
void require_walked(const std::function<Tally(int, Fault)>& family, Fault fault = Fault::pool) {
  for (int threads : {1, 2}) {
    const Tally t = family(threads, fault);
    INFO(t.family << " with " << threads << " thread(s): " << t.calls << " calls, " << t.failures
                  << " injected failures, " << t.allocations << " allocations");
    CHECK(t.failures > 0);
    CHECK(t.complete());
  }
}

}  // namespace

TEST_CASE("fault injection: every allocation failure of tensor creation is released and reported") {
  require_walked(creation);
}
TEST_CASE("fault injection: every allocation failure of elementwise ops is released and reported") {
  require_walked(elementwise);
}
TEST_CASE("fault injection: every allocation failure of unary ops is released and reported") { require_walked(unary); }
TEST_CASE("fault injection: every allocation failure of reductions is released and reported") {
  require_walked(reductions);
}
TEST_CASE("fault injection: every allocation failure of shape ops is released and reported") {
  require_walked(shape_ops);
}
TEST_CASE("fault injection: every allocation failure of views and contiguous is released and reported") {
  require_walked(views);
}
TEST_CASE("fault injection: every allocation failure of indexing is released and reported") {
  require_walked(indexing);
}
TEST_CASE("fault injection: every allocation failure of linalg is released and reported") { require_walked(linalg); }
TEST_CASE("fault injection: every allocation failure of nn ops is released and reported") { require_walked(nn_ops); }
TEST_CASE("fault injection: every allocation failure of losses is released and reported") { require_walked(losses); }
TEST_CASE("fault injection: every allocation failure of a backward pass is released and reported") {
  require_walked(backward);
}

namespace {

// ---- an optimizer step ----

// Three parameters with gradients, and an optimizer that has taken one step
// (so its state is not all zeros). With `packed_grads` false, two gradients
// are transposed views, which a step must pack before its fused update.
struct Step {
  std::vector<Tensor> params;
  std::shared_ptr<optim::Optimizer> opt;
  std::vector<Tensor> inputs() const {
    std::vector<Tensor> all = params;
    for (const Tensor& p : params) all.push_back(p.grad());
    for (const auto& [key, t] : opt->state_dict()) all.push_back(t);  // moments, step counts, hyper-parameters
    return all;
  }
};

template <typename Make>
auto step_setup(bool packed_grads, Make make) {
  return [packed_grads, make](ExecContext& ctx) {
    Step s;
    for (forge::Shape shape : {forge::Shape{96, 64}, forge::Shape{64, 96}, forge::Shape{300, 40}})
      s.params.push_back(ctx.randn(shape).requires_grad_());
    auto set_grads = [&] {
      for (Tensor& p : s.params) {
        const bool view = !packed_grads && &p != &s.params[0];
        p.set_grad(view ? ctx.randn({p.size(1), p.size(0)}).t() : ctx.randn(p.shape()));
      }
    };
    set_grads();
    s.opt = make(s.params);
    s.opt->step();
    set_grads();
    return s;
  };
}

Results optimizer_step(ExecContext&, Step& s) {
  s.opt->step();
  return s.params;
}

Tally optimizer(int threads, bool packed_grads, Fault fault = Fault::pool) {
  using Params = std::vector<Tensor>;
  const std::vector<std::pair<const char*, std::function<std::shared_ptr<optim::Optimizer>(Params)>>> optimizers = {
      {"SGD momentum",
       [](Params p) { return std::make_shared<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9}); }},
      {"Adam", [](Params p) { return std::make_shared<optim::Adam>(p); }},
      {"AdamW", [](Params p) { return std::make_shared<optim::AdamW>(p); }}};
  Tally tally{packed_grads ? "optimizer step, packed grads" : "optimizer step, strided grads", threads};
  for (const auto& [name, make] : optimizers)
    tally.add(walk(tally.family + " / " + name, threads, fault, step_setup(packed_grads, make), optimizer_step));
  // Clipping first (its own call: it scales the gradients in place).
  auto clip = [](ExecContext&, Step& s) {
    forge::optim::clip_grad_norm_(s.params, 0.5);
    Results grads;
    for (const Tensor& p : s.params) grads.push_back(p.grad());
    return grads;
  };
  tally.add(
      walk(tally.family + " / clip_grad_norm_", threads, fault, step_setup(packed_grads, optimizers[0].second), clip));
  return tally;
}

// ---- file loads ----

// A file under /tmp, removed when the last copy of the fixture dies.
struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& name) {
    static std::atomic<int> counter{0};
    // Names of one length, so that every attempt of a walk makes the same
    // string allocations.
    char unique[32];
    std::snprintf(unique, sizeof unique, "%010d_%08d_", static_cast<int>(::getpid()), counter.fetch_add(1));
    path = fs::temp_directory_path() / ("forge_fault_" + std::string(unique) + name);
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

struct File {
  std::shared_ptr<TempFile> file;
  std::vector<Tensor> inputs() const { return {}; }
};

Results values_of(const forge::StateDict& dict) {
  Results out;
  for (const auto& [name, t] : dict) out.push_back(t);
  return out;
}

Tally safetensors_load(int threads, Fault fault) {
  auto setup = [](ExecContext& ctx) {
    File f{std::make_shared<TempFile>("model.safetensors")};
    forge::io::save_safetensors(f.file->path, {{"w", ctx.randn({64, 48})},
                                               {"b", ctx.randn({48}, DType::f16)},
                                               {"steps", ctx.arange(0, 100, 1, DType::i64)},
                                               {"mask", forge::gt(ctx.randn({33}), 0.0)}});
    return f;
  };
  auto load = [](ExecContext& ctx, File& f) { return values_of(forge::io::load_safetensors(ctx, f.file->path)); };
  Tally tally{"safetensors load", threads};
  tally.add(walk("safetensors load", threads, fault, setup, load));
  return tally;
}

// Rewrites `from` as `to` (of the same length) in the header of a file forge wrote.
void patch_header(const fs::path& path, const std::string& from, const std::string& to) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string head(128, '\0');
  file.read(head.data(), static_cast<std::streamsize>(head.size()));
  const auto at = head.find(from);
  REQUIRE(at != std::string::npos);
  file.clear();
  file.seekp(static_cast<std::streamoff>(at));
  file.write(to.data(), static_cast<std::streamsize>(to.size()));
}

Tally npy_load(int threads, Fault fault) {
  Tally tally{"npy load", threads};
  // The last: a big-endian array in Fortran order, swapped and transposed on load.
  for (int variant = 0; variant < 4; ++variant) {
    const DType dtype = std::array{DType::f32, DType::i64, DType::boolean, DType::f32}[variant];
    auto setup = [dtype, variant](ExecContext& ctx) {
      File f{std::make_shared<TempFile>("array.npy")};
      forge::io::save_npy(f.file->path, (ctx.randn({64, 48}) * 10).to(dtype));
      if (variant == 3) {
        patch_header(f.file->path, "'<f4'", "'>f4'");
        patch_header(f.file->path, "False", "True ");
      }
      return f;
    };
    auto load = [](ExecContext& ctx, File& f) { return Results{forge::io::load_npy(ctx, f.file->path)}; };
    tally.add(walk("npy load / " + std::string(variant == 3 ? "fortran >f4" : forge::dtype_name(dtype)), threads, fault,
                   setup, load));
  }
  return tally;
}

// ---- file saves ----

// A checkpoint file that already holds `old` values, and the tensors a save
// will write over it. inputs() reads the file back, so a walk also checks
// that a failed save leaves the old file whole.
struct Save {
  ExecContext* ctx = nullptr;
  Inputs in;
  std::shared_ptr<TempFile> file;
  bool npy = false;
  forge::StateDict dict() const { return {{"w", in[0]}, {"b", in[1]}, {"steps", in[2]}}; }
  std::vector<Tensor> inputs() const {
    std::vector<Tensor> all = in.t;
    if (npy) {
      all.push_back(forge::io::load_npy(*ctx, file->path));
    } else {
      for (const auto& [name, t] : forge::io::load_safetensors(*ctx, file->path)) all.push_back(t);
    }
    return all;
  }
};

Tally file_saves(int threads, Fault fault) {
  Tally tally{"file saves", threads};
  for (bool npy : {false, true}) {
    auto setup = [npy](ExecContext& ctx) {
      Save s{&ctx,
             {{ctx.randn({64, 48}), ctx.randn({48}, DType::f16).t(), ctx.arange(0, 100, 1, DType::i64)}},
             std::make_shared<TempFile>(npy ? "array.npy" : "model.safetensors"),
             npy};
      if (npy)
        forge::io::save_npy(s.file->path, ctx.zeros({3}));
      else
        forge::io::save_safetensors(s.file->path, {{"old", ctx.zeros({3})}});
      return s;
    };
    auto save = [](ExecContext&, Save& s) {
      if (s.npy) {
        forge::io::save_npy(s.file->path, s.in[0].t());
      } else {
        const forge::StateDict dict = [&] {
          const forge_test::heap::Pause test_code;  // the caller's map, not the save's allocations
          return s.dict();
        }();
        forge::io::save_safetensors(s.file->path, dict);
      }
      return Results{};
    };
    tally.add(walk(npy ? "save_npy" : "save_safetensors", threads, fault, setup, save));
  }
  return tally;
}

// ---- arena calls ----

// Inputs and an arena that already served a small call, so a walked call
// grows it rather than filling it for the first time.
struct ArenaInputs {
  Inputs in;
  std::shared_ptr<forge::Arena> lent;
  std::vector<Tensor> inputs() const { return in.t; }
  forge::Arena* arena() const { return lent.get(); }
};

ArenaInputs arena_setup(ExecContext& ctx) {
  ArenaInputs s{{{ctx.randn({8, 16, 4}), forge::gt(ctx.randn({8, 16}), 0.0), ctx.randn({32, 8}),
                  forge::gt(ctx.randn({32}), 0.0), forge::gt(ctx.randn({8, 16, 4}), 0.0)}},
                std::make_shared<forge::Arena>(ctx)};
  forge::nonzero(ctx.ones({2}), s.arena());
  return s;
}

Tally arena_calls(int threads, Fault fault) {
  using Call = std::function<Results(ExecContext&, ArenaInputs&)>;
  const std::vector<std::pair<const char*, Call>> calls = {
      {"masked_select",
       [](ExecContext&, ArenaInputs& s) { return Results{forge::masked_select(s.in[0], s.in[4], s.arena())}; }},
      {"nonzero", [](ExecContext&, ArenaInputs& s) { return Results{forge::nonzero(s.in[2], s.arena())}; }},
      {"rows_where",
       [](ExecContext&, ArenaInputs& s) { return Results{forge::rows_where(s.in[2], s.in[3], s.arena()).tensor()}; }},
      {"nonzero_per_row",
       [](ExecContext&, ArenaInputs& s) {
         const forge::TapeView v = forge::nonzero_per_row(s.in[1], s.arena());
         return Results{v.values(), v.offsets()};
       }},
      {"rows_where_per_item", [](ExecContext&, ArenaInputs& s) {
         const forge::RowsTapeView v = forge::rows_where_per_item(s.in[0], s.in[1], s.arena());
         return Results{v.rows(), v.offsets()};
       }}};
  Tally tally{fault == Fault::pool    ? "arena calls, pool"
              : fault == Fault::arena ? "arena calls, arena growth"
                                      : "arena calls, heap",
              threads};
  for (const auto& [name, call] : calls)
    tally.add(walk(tally.family + " / " + name, threads, fault, arena_setup, call));
  return tally;
}

// ---- a data loader ----

// A loader that has handed out batch 0; the walked call takes batch 1, which
// a failed call must not skip.
struct Loader {
  Inputs data;
  std::shared_ptr<forge::data::DataLoader> loader;
  std::vector<Tensor> inputs() const { return data.t; }
};

Tally data_loader(int threads, Fault fault) {
  Tally tally{"data loader", threads};
  for (bool prefetch : {false, true}) {
    auto setup = [prefetch](ExecContext& ctx) {
      Loader s{{{(ctx.rand({64, 1, 8, 8}) * 255).to(DType::u8), (ctx.rand({64}) * 10).to(DType::i64)}}};
      s.loader = std::make_shared<forge::data::DataLoader>(
          ctx, s.data[0], s.data[1],
          forge::data::DataLoaderOptions{
              .batch_size = 16, .seed = 3, .prefetch = prefetch, .transform = [](const Tensor& x) {
                return x.to(DType::f32) / 255.0;
              }});
      s.loader->begin_epoch(0);
      s.loader->next();
      return s;
    };
    auto next = [](ExecContext&, Loader& s) {
      const forge::data::Batch b = s.loader->next().value();  // a skipped batch has other rows
      return Results{b.input, b.target};
    };
    tally.add(walk(prefetch ? "data loader / prefetch" : "data loader", threads, fault, setup, next));
  }
  return tally;
}

}  // namespace

TEST_CASE("fault injection: a DataLoader batch that fails to reach the caller is handed out by the next call") {
  require_walked(data_loader);
}

TEST_CASE("fault injection: every allocation failure of an npy load is released and reported") {
  require_walked(npy_load);
}

TEST_CASE("fault injection: an optimizer step with packed gradients takes no pool memory") {
  // Optimizer state lives outside the pool (allocated when the optimizer is
  // built), and a step updates in place: nothing to fail.
  for (int threads : {1, 2}) {
    const Tally t = optimizer(threads, true);
    CHECK(t.allocations == 0);
    CHECK(t.failures == 0);
  }
}

TEST_CASE("fault injection: an optimizer step that packs strided gradients fails before it updates anything") {
  for (int threads : {1, 2}) {
    const Tally t = optimizer(threads, false);
    INFO(threads << " thread(s)");
    CHECK(t.failures > 0);
    CHECK(t.complete());
  }
}

TEST_CASE("fault injection: a safetensors load maps the file and takes no pool memory") {
  for (int threads : {1, 2}) {
    const Tally t = safetensors_load(threads, Fault::pool);
    CHECK(t.allocations == 0);
    CHECK(t.failures == 0);
  }
}

TEST_CASE("fault injection: every pool and arena allocation failure of an arena call is released and reported") {
  for (int threads : {1, 2}) {
    for (Fault fault : {Fault::pool, Fault::arena}) {
      const Tally t = arena_calls(threads, fault);
      INFO(t.family << " with " << threads << " thread(s)");
      CHECK(t.failures >= t.calls);  // every call takes pool scratch and grows the arena once
      CHECK(t.complete());
    }
  }
}

// ---- heap allocations ----
// The same walks, failing the calling thread's heap allocations (operator
// new: tensor and autograd bookkeeping, containers, strings, files) one at a
// time instead of the pool's. Each must surface as out_of_memory from the
// public call, never as a raw std::bad_alloc or std::terminate.

TEST_CASE("fault injection: every heap allocation failure of creation and elementwise ops is out_of_memory") {
  require_walked(creation, Fault::heap);
  require_walked(elementwise, Fault::heap);
  require_walked(unary, Fault::heap);
}
TEST_CASE("fault injection: every heap allocation failure of reductions, shape ops and views is out_of_memory") {
  require_walked(reductions, Fault::heap);
  require_walked(shape_ops, Fault::heap);
  require_walked(views, Fault::heap);
}
TEST_CASE("fault injection: every heap allocation failure of indexing, linalg, nn ops and losses is out_of_memory") {
  require_walked(indexing, Fault::heap);
  require_walked(linalg, Fault::heap);
  require_walked(nn_ops, Fault::heap);
  require_walked(losses, Fault::heap);
}
TEST_CASE("fault injection: every heap allocation failure of a backward pass is out_of_memory") {
  require_walked(backward, Fault::heap);
}
TEST_CASE("fault injection: every allocation failure of ops inside an exec scope is released and reported") {
  require_walked(scoped);
  require_walked(scoped, Fault::heap);
}
TEST_CASE("fault injection: every heap allocation failure of an nn module constructor is out_of_memory") {
  require_walked(modules, Fault::heap);
}
TEST_CASE("fault injection: every heap allocation failure of an optimizer step is out_of_memory") {
  for (bool packed : {true, false})
    require_walked([packed](int threads, Fault fault) { return optimizer(threads, packed, fault); }, Fault::heap);
}
TEST_CASE("fault injection: every heap allocation failure of a file load or save is out_of_memory") {
  require_walked(safetensors_load, Fault::heap);
  require_walked(npy_load, Fault::heap);
  require_walked(file_saves, Fault::heap);
}
TEST_CASE("fault injection: every heap allocation failure of a DataLoader batch or an arena call is out_of_memory") {
  require_walked(data_loader, Fault::heap);
  require_walked(arena_calls, Fault::heap);
}

TEST_CASE("fault injection: report of the failures walked per family", "[.report]") {
  using Family = std::function<Tally(int, Fault)>;
  const std::vector<Family> families = {creation,
                                        elementwise,
                                        unary,
                                        reductions,
                                        shape_ops,
                                        views,
                                        indexing,
                                        linalg,
                                        nn_ops,
                                        losses,
                                        backward,
                                        scoped,
                                        modules,
                                        [](int threads, Fault fault) { return optimizer(threads, true, fault); },
                                        [](int threads, Fault fault) { return optimizer(threads, false, fault); },
                                        safetensors_load,
                                        npy_load,
                                        file_saves,
                                        data_loader,
                                        arena_calls};
  std::printf(
      "| family | fault | threads | calls | injected failures | absorbed (nothrow) | outcome |\n"
      "|---|---|---|---|---|---|---|\n");
  auto report = [](const Tally& t, const char* fault) {
    std::printf("| %s | %s | %d | %d | %d | %d | %s |\n", t.family.c_str(), fault, t.threads, t.calls, t.failures,
                t.absorbed,
                !t.complete()     ? "MISMATCH"
                : t.failures == 0 ? "no allocation taken"
                                  : "all out_of_memory, released");
    CHECK(t.complete());
  };
  for (const Family& family : families)
    for (int threads : {1, 2})
      for (auto [fault, name] : {std::pair{Fault::pool, "pool"}, std::pair{Fault::heap, "heap"}})
        report(family(threads, fault), name);
  for (int threads : {1, 2}) report(arena_calls(threads, Fault::arena), "arena growth");
}

TEST_CASE("fault injection: a heap allocation failure is out_of_memory naming the public call") {
  // Note [Allocation failure at the API]: the failure surfaces from the call
  // the program made, with that call's name, whatever inside it allocated
  // (the first heap allocation of each of these is its own).
  forge_test::TestContext ctx(forge_test::context_options(1, 7));
  Tensor a = ctx.randn({8, 8}).requires_grad_();
  const Tensor b = ctx.randn({8, 8});
  const Tensor loss = forge::sum(a * 2.0);
  const std::vector<Tensor> params{a};
  const fs::path file = fs::temp_directory_path() / "forge_fault_named.npy";
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"[zeros] ", [&] { (void)ctx.zeros({4}); }},
      {"[matmul] ", [&] { (void)forge::matmul(a, b); }},
      {"[view] ", [&] { (void)b.view({64}); }},
      {"[sum] ", [&] { (void)forge::sum(b); }},
      {"[backward] ", [&] { loss.backward(); }},
      {"[Adam] ",
       [&] {
         std::vector<Tensor> list;
         {
           const forge_test::heap::Pause caller;  // the caller's copy of the list
           list = params;
         }
         optim::Adam adam(std::move(list));
       }},
      {"[save_npy] ", [&] { forge::io::save_npy(file, b); }}};
  for (const auto& [prefix, call] : calls) {
    INFO(prefix);
    std::string message;
    std::optional<forge::ErrorCode> code;
    forge_test::heap::fail_after(1);
    try {
      call();
    } catch (const forge::Error& e) {
      forge_test::heap::fail_after(0);
      code = e.code();
      message = e.what();
    }
    forge_test::heap::fail_after(0);
    UNSCOPED_INFO(message);
    CHECK(code == forge::ErrorCode::out_of_memory);
    CHECK(message.rfind(prefix, 0) == 0);
  }
  a.zero_grad();
  fs::remove(file);
}
