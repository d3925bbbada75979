// The short examples of docs/AUTOGRAD.md and docs/TRAINING.md, compiled and
// run: hooks and retain_grad, a post-accumulate hook, higher-order gradients,
// anomaly mode, libtorch-style indexing, autocast and a checkpoint. Each
// prints what it computed next to what it should be.
//
//   build/release/examples/autograd_tour

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "forge/forge.h"

using forge::Tensor;
namespace autograd = forge::autograd;

namespace {

void hooks(forge::ExecContext& ctx) {
  Tensor x = ctx.randn({4, 3});
  Tensor w = (ctx.randn({5, 3}) * 0.5).requires_grad_();
  Tensor w2 = (ctx.randn({2, 5}) * 0.5).requires_grad_();
  Tensor y = ctx.from_vector<std::int64_t>({0, 1, 1, 0}, {4});

  Tensor h = forge::relu(forge::linear(x, w));
  autograd::HookHandle clip = h.register_hook([](const Tensor& g) {
    return forge::clamp(g, -0.01, 0.01);  // replaces h's gradient
  });
  h.retain_grad();  // h.grad() after backward
  int ready = 0;
  autograd::HookHandle post = w.register_post_accumulate_grad_hook([&](const Tensor&) { ++ready; });
  forge::cross_entropy(forge::linear(h, w2), y).backward();
  clip.remove();
  post.remove();
  const std::vector<float> hg = h.grad().to_vector<float>();
  float largest = 0;
  for (float v : hg) largest = std::max(largest, std::abs(v));
  std::printf("hooks: h.grad() holds the clipped gradient (largest |g| %.4f, at most 0.01); post hook ran %d time(s)\n",
              largest, ready);
}

void higher_order(forge::ExecContext& ctx) {
  Tensor x = ctx.from_vector<double>({-1.0, 0.5, 2.0}, {3}).requires_grad_();
  Tensor y = forge::sum(x * x * x);
  std::vector<Tensor> g = autograd::grad({y}, {x}, {.create_graph = true});  // 3x^2, with a history
  forge::sum(g[0]).backward();                                               // x.grad() = 6x
  const std::vector<double> second = x.grad().to_vector<double>();
  std::printf(
      "create_graph: d2/dx2 sum(x^3) at (-1, 0.5, 2) = (%g, %g, %g), "
      "expected (-6, 3, 12)\n",
      second[0], second[1], second[2]);
}

void anomaly(forge::ExecContext& ctx) {
  Tensor x = ctx.from_vector<float>({4.0f, -1.0f}, {2}).requires_grad_();
  autograd::DetectAnomalyGuard guard;
  try {
    forge::sum(forge::sqrt(x)).backward();
    std::printf("anomaly: no NaN found (unexpected)\n");
  } catch (const forge::Error& e) {
    std::printf("anomaly: %s\n", e.what());
  }
}

void indexing(forge::ExecContext& ctx) {
  using forge::indexing::Ellipsis;
  using forge::indexing::None;
  using forge::indexing::Slice;
  Tensor t = ctx.arange(0, 24).reshape({2, 3, 4});
  Tensor view = t.index({1, Slice(None, None, 2), -1});  // t[1, ::2, -1], a view
  Tensor picked = t.index({Ellipsis, ctx.from_vector<std::int64_t>({0, 3}, {2})});
  t.index_put_({0, Slice(), 0}, -1.0);
  const std::vector<float> v = view.to_vector<float>();
  std::printf(
      "indexing: t[1, ::2, -1] = (%g, %g), expected (15, 23); t[..., "
      "[0, 3]] has shape [%lld, %lld, %lld]\n",
      v[0], v[1], static_cast<long long>(picked.size(0)), static_cast<long long>(picked.size(1)),
      static_cast<long long>(picked.size(2)));
}

void mixed_precision(forge::ExecContext& ctx) {
  Tensor x = ctx.randn({8, 16});
  Tensor w = (ctx.randn({4, 16}) * 0.25).requires_grad_();
  Tensor out;
  {
    forge::amp::AutocastGuard autocast(forge::DType::bf16);
    out = forge::linear(x, w);  // computed in bf16
  }
  forge::sum(out.to(forge::DType::f32)).backward();
  std::printf("autocast: linear gave %s, the f32 weight got a %s gradient\n",
              std::string(forge::dtype_name(out.dtype())).c_str(),
              std::string(forge::dtype_name(w.grad().dtype())).c_str());
}

void checkpointed(forge::ExecContext& ctx) {
  Tensor w = (ctx.randn({32, 32}) * 0.2).requires_grad_();
  Tensor x = ctx.randn({16, 32}).requires_grad_();
  auto block = [&](const std::vector<Tensor>& in) {
    return forge::gelu(forge::linear(forge::gelu(forge::linear(in[0], w)), w));
  };
  forge::sum(forge::square(autograd::checkpoint(block, {x}))).backward();
  const Tensor recomputed = w.grad().clone();
  w.zero_grad();
  forge::sum(forge::square(block({x}))).backward();
  const std::vector<float> a = recomputed.to_vector<float>(), b = w.grad().to_vector<float>();
  float diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
  std::printf(
      "checkpoint: largest difference from the plain tape's weight "
      "gradient %g\n",
      diff);
}

}  // namespace

int main() {
  forge::ExecContext ctx({.threads = 2, .seed = 1});
  hooks(ctx);
  higher_order(ctx);
  anomaly(ctx);
  indexing(ctx);
  mixed_precision(ctx);
  checkpointed(ctx);
  return 0;
}
