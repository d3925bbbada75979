// Training in C++ with forge's autograd: a two-layer MLP learns to classify
// points of two interleaved spirals, with Adam, one exec scope per step, and
// a test of the analytic gradients against finite differences.
//
//   build/release/examples/train_mlp [steps]

#include <forge/forge.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  forge::ExecContext ctx({.seed = 1});

  // Two spirals of 128 points each: x [256, 2], labels y [256].
  std::vector<float> points;
  std::vector<std::int64_t> labels;
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 128; ++i) {
      const double r = 0.1 + 0.9 * i / 128.0, a = 3.5 * r + c * M_PI;
      points.push_back(static_cast<float>(r * std::cos(a)));
      points.push_back(static_cast<float>(r * std::sin(a)));
      labels.push_back(c);
    }
  const forge::Tensor x = ctx.from_vector(points, {256, 2});
  const forge::Tensor y = ctx.from_vector(labels, {256});

  // Parameters are leaves that require grad.
  forge::Tensor w1 = (ctx.randn({64, 2}) * 0.7).requires_grad_();
  forge::Tensor b1 = ctx.zeros({64}).requires_grad_();
  forge::Tensor w2 = (ctx.randn({2, 64}) * 0.12).requires_grad_();
  forge::Tensor b2 = ctx.zeros({2}).requires_grad_();
  auto logits = [&](const forge::Tensor& in) { return forge::linear(forge::tanh(forge::linear(in, w1, b1)), w2, b2); };
  forge::optim::Adam adam({w1, b1, w2, b2}, {.lr = 0.02});

  for (int step = 1; step <= steps; ++step) {
    auto scope = ctx.open_exec_scope(forge::ScopePolicy::release);  // holds nothing: peak = working set
    forge::Tensor loss = forge::cross_entropy(logits(x), y);
    loss.backward();  // fills w1.grad() ... b2.grad()
    adam.step();
    adam.zero_grad();
    if (step % 50 == 0 || step == 1) std::printf("step %4d  loss %.4f\n", step, loss.item<float>());
  }

  {
    forge::autograd::NoGradGuard no_grad;  // evaluation records nothing
    const forge::Tensor predicted = forge::argmax(logits(x), 1);
    const double accuracy = (predicted == y).to(forge::DType::f32).mean().item<float>();
    std::printf("training accuracy %.1f%%; pool: %llu system allocations, %lld buffers outstanding\n", 100 * accuracy,
                static_cast<unsigned long long>(ctx.stats().system_allocations),
                static_cast<long long>(ctx.stats().outstanding));
  }

  // The same network's gradient checked against central differences in f64.
  forge::Tensor probe = ctx.randn({4, 2}, forge::DType::f64).requires_grad_();
  forge::Tensor w = ctx.randn({3, 2}, forge::DType::f64).requires_grad_();
  const auto check = forge::autograd::gradcheck(
      [](const std::vector<forge::Tensor>& in) { return forge::tanh(forge::linear(in[0], in[1])).sum(1); }, {probe, w});
  std::printf("gradcheck: %s (largest error %.2e)\n", check.ok ? "ok" : check.message.c_str(), check.max_abs_error);
  return check.ok ? 0 : 1;
}
