// The examples of docs/AUTOGRAD.md "Hooks", "Custom functions" and "Anomaly
// mode", compiled so that they stay true: a custom op checked with
// gradcheck, a tensor hook, a post-accumulate hook and anomaly mode.
#include <forge/forge.h>

#include <iostream>

using forge::autograd::AutogradContext;
using forge::autograd::variable_list;

struct ScaledCube : forge::autograd::Function<ScaledCube> {
  static constexpr const char* name = "ScaledCube";
  static forge::Tensor forward(AutogradContext* ctx, const forge::Tensor& x, double c) {
    ctx->save_for_backward({x});
    ctx->saved_data["c"] = c;
    return x * x * x * c;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    forge::Tensor x = ctx->get_saved_variables()[0];
    return {grad_outputs[0] * x * x * (3.0 * ctx->saved_data["c"].to_double())};
  }
};

int main() {
  forge::ExecContext ctx;
  forge::Tensor x = ctx.randn({3, 4}, forge::DType::f64).requires_grad_();

  // A custom function: its node, and its gradient against finite differences.
  forge::Tensor y = ScaledCube::apply(x, 2.0);
  std::cout << "recorded as " << y.grad_fn_name() << "\n";
  const forge::autograd::GradcheckResult check = forge::autograd::gradcheck(
      [](const std::vector<forge::Tensor>& in) { return ScaledCube::apply(in[0], 2.0); }, {x});
  std::cout << "gradcheck " << (check ? "passed" : "failed") << ", largest error " << check.max_abs_error << "\n";

  // Hooks: clip the gradient flowing through y, keep it, and hear when x.grad is final.
  forge::autograd::HookHandle clip = y.register_hook([](const forge::Tensor& g) { return forge::clamp(g, -1.0, 1.0); });
  y.retain_grad();
  forge::autograd::HookHandle ready = x.register_post_accumulate_grad_hook(
      [](const forge::Tensor& leaf) { std::cout << "x.grad is final: " << leaf.grad().shape() << "\n"; });
  forge::sum(y * 4.0).backward();
  std::cout << "y.grad after the clip: " << forge::amax(y.grad()).item<double>() << "\n";
  clip.remove();

  // Anomaly mode: names the op whose backward produced NaN.
  forge::Tensor z = ctx.from_vector<double>({4, -1}, {2}).requires_grad_();
  try {
    forge::autograd::DetectAnomalyGuard anomaly;
    forge::sum(forge::sqrt(z)).backward();
  } catch (const forge::Error& e) {
    std::cout << e.what() << "\n";
  }
  return check ? 0 : 1;
}
