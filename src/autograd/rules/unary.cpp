// VJPs of the unary ops: one short function per op (see record.h), with
// libtorch's conventions where the derivative is undefined: abs'(0) = 0,
// relu'(0) = 0, sign' = 0. Where the formula allows, a rule saves its output
// rather than its input. relu, sigmoid, tanh, the gelus and silu run one
// fused kernel over packed f32/f64 (unary_backward_flat, of the elementwise
// family: backend/kernels/elementwise.h), packing other layouts first; the
// rest compose public ops. Under create_graph the fused five compose ops too
// (Note [Fused backward kernels] in rules/common.h). 16-bit floats compute in f32 (Vjp::set casts the
// result back).

#include "autograd/rules/unary.h"

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "backend/kernels/elementwise.h"
#include "core/tensor_internal.h"

namespace forge::autograd::rules {
namespace {

using backend::UnaryBackward;

constexpr double kTwoOverSqrtPi = 1.12837916709551257389615890312154517;

// g * f'(saved) in one pass of the fused kernel: f32 or f64, packed, one
// shape. Other layouts are packed and 16-bit dtypes widened to f32 first, so
// every path computes the same tail-safe formulas (Note [Activation tails]
// in backend/cpu/vec_math.h); the result comes back in f32 for 16-bit
// inputs, and Vjp::set casts it to the input's dtype.
Tensor fused(UnaryBackward kind, const Tensor& g_in, const Tensor& saved_in) {
  const DType dtype = g_in.dtype() == DType::f64 && saved_in.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor g = g_in.to(dtype).contiguous();
  const Tensor saved = saved_in.to(dtype).contiguous();  // of g's shape: x or the output
  Tensor out = detail::allocate(g.runtime(), g.shape(), dtype, "backward");
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  dev.kernels().elementwise.unary_backward_flat.get("backward", dtype, dev)(
      dev, kind, dtype, g.numel(), detail::first_element(out), detail::first_element(g), detail::first_element(saved));
  detail::adopt_output(out);
  return out;
}

constexpr double kInvSqrt2 = 0.70710678118654752440084436210484904;
constexpr double kInvSqrt2Pi = 0.39894228040143267793994605993438187;
constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876374;
constexpr double kGeluTanhCoeff = 0.044715;

// The same derivatives composed of ops, for a backward that records (Note
// [Fused backward kernels] in rules/common.h): y the output, x the input.
Tensor relu_ops(const Tensor& g, const Tensor& y) { return forge::masked_fill(g, forge::le(y, 0), 0); }
Tensor sigmoid_ops(const Tensor& g, const Tensor& y) { return g * (y * (1.0 - y)); }
Tensor tanh_ops(const Tensor& g, const Tensor& y) { return g * (1.0 - forge::square(y)); }
Tensor silu_ops(const Tensor& g, const Tensor& x) {
  const Tensor s = forge::sigmoid(x);
  return g * (s * (x * (1.0 - s) + 1.0));
}
// d/dx x Phi(x) = Phi(x) + x phi(x); the tanh form differentiates
// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
Tensor gelu_ops(const Tensor& g, const Tensor& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::none) {
    const Tensor cdf = (forge::erf(x * kInvSqrt2) + 1.0) * 0.5;
    const Tensor pdf = forge::exp(forge::square(x) * -0.5) * kInvSqrt2Pi;
    return g * (cdf + x * pdf);
  }
  const Tensor x2 = forge::square(x);
  const Tensor t = forge::tanh((x + x * x2 * kGeluTanhCoeff) * kSqrt2OverPi);
  const Tensor du = (x2 * (3.0 * kGeluTanhCoeff) + 1.0) * kSqrt2OverPi;
  return g * ((t + 1.0) * 0.5 + x * (1.0 - forge::square(t)) * du * 0.5);
}

Tensor relu_vjp(const Vjp& v) {
  const Tensor &g = v.grad(), &y = v.saved(0);
  return v.create_graph() ? relu_ops(wide(g), wide(y)) : fused(UnaryBackward::relu, g, y);
}
Tensor sigmoid_vjp(const Vjp& v) {
  const Tensor &g = v.grad(), &y = v.saved(0);
  return v.create_graph() ? sigmoid_ops(wide(g), wide(y)) : fused(UnaryBackward::sigmoid, g, y);
}
Tensor tanh_vjp(const Vjp& v) {
  const Tensor &g = v.grad(), &y = v.saved(0);
  return v.create_graph() ? tanh_ops(wide(g), wide(y)) : fused(UnaryBackward::tanh, g, y);
}
Tensor gelu_vjp(const Vjp& v, GeluApproximation approximate) {
  const Tensor &g = v.grad(), &x = v.saved(0);
  if (v.create_graph()) return gelu_ops(wide(g), wide(x), approximate);
  return fused(approximate == GeluApproximation::none ? UnaryBackward::gelu : UnaryBackward::gelu_tanh, g, x);
}
Tensor silu_vjp(const Vjp& v) {
  const Tensor &g = v.grad(), &x = v.saved(0);
  return v.create_graph() ? silu_ops(wide(g), wide(x)) : fused(UnaryBackward::silu, g, x);
}

}  // namespace

Tensor wide(const Tensor& t) { return t.dtype() == DType::f16 || t.dtype() == DType::bf16 ? t.to(DType::f32) : t; }

void neg(const Tensor& out, const Tensor& x) {
  record(out, "neg", inputs(x), saves(), [](Vjp& v) { v.set(0, forge::neg(v.grad())); });
}

void abs(const Tensor& out, const Tensor& x) {
  record(out, "abs", inputs(x), saves(x), [](Vjp& v) { v.set(0, wide(v.grad()) * forge::sign(wide(v.saved(0)))); });
}

void sign(const Tensor& out, const Tensor& x) {
  record(out, "sign", inputs(x), saves(),
         [](Vjp& v) { v.set(0, zeros_like_shape(v.grad(), v.grad().shape(), v.grad().dtype())); });
}

void exp(const Tensor& out, const Tensor& x) {
  record(out, "exp", inputs(x), saves(out), [](Vjp& v) { v.set(0, wide(v.grad()) * wide(v.saved(0))); });
}

void expm1(const Tensor& out, const Tensor& x) {
  record(out, "expm1", inputs(x), saves(out), [](Vjp& v) { v.set(0, wide(v.grad()) * (wide(v.saved(0)) + 1.0)); });
}

void log(const Tensor& out, const Tensor& x) {
  record(out, "log", inputs(x), saves(x), [](Vjp& v) { v.set(0, wide(v.grad()) / wide(v.saved(0))); });
}

void log1p(const Tensor& out, const Tensor& x) {
  record(out, "log1p", inputs(x), saves(x), [](Vjp& v) { v.set(0, wide(v.grad()) / (wide(v.saved(0)) + 1.0)); });
}

void sqrt(const Tensor& out, const Tensor& x) {
  record(out, "sqrt", inputs(x), saves(out), [](Vjp& v) { v.set(0, wide(v.grad()) / (wide(v.saved(0)) * 2.0)); });
}

void rsqrt(const Tensor& out, const Tensor& x) {
  record(out, "rsqrt", inputs(x), saves(out), [](Vjp& v) {
    const Tensor y = wide(v.saved(0));
    v.set(0, wide(v.grad()) * (forge::square(y) * y * -0.5));
  });
}

void square(const Tensor& out, const Tensor& x) {
  record(out, "square", inputs(x), saves(x), [](Vjp& v) { v.set(0, wide(v.grad()) * (wide(v.saved(0)) * 2.0)); });
}

void reciprocal(const Tensor& out, const Tensor& x) {
  record(out, "reciprocal", inputs(x), saves(out),
         [](Vjp& v) { v.set(0, wide(v.grad()) * (forge::square(wide(v.saved(0))) * -1.0)); });
}

void sin(const Tensor& out, const Tensor& x) {
  record(out, "sin", inputs(x), saves(x), [](Vjp& v) { v.set(0, wide(v.grad()) * forge::cos(wide(v.saved(0)))); });
}

void cos(const Tensor& out, const Tensor& x) {
  record(out, "cos", inputs(x), saves(x),
         [](Vjp& v) { v.set(0, wide(v.grad()) * (forge::sin(wide(v.saved(0))) * -1.0)); });
}

void tanh(const Tensor& out, const Tensor& x) {
  record(out, "tanh", inputs(x), saves(out), [](Vjp& v) { v.set(0, tanh_vjp(v)); });
}

void sigmoid(const Tensor& out, const Tensor& x) {
  record(out, "sigmoid", inputs(x), saves(out), [](Vjp& v) { v.set(0, sigmoid_vjp(v)); });
}

void relu(const Tensor& out, const Tensor& x) {
  record(out, "relu", inputs(x), saves(out), [](Vjp& v) { v.set(0, relu_vjp(v)); });
}

void leaky_relu(const Tensor& out, const Tensor& x, double negative_slope) {
  record(out, "leaky_relu", inputs(x), saves(x), [negative_slope](Vjp& v) {
    const Tensor g = wide(v.grad());
    v.set(0, forge::where(forge::gt(v.saved(0), 0), g, g * negative_slope));
  });
}

void gelu(const Tensor& out, const Tensor& x, GeluApproximation approximate) {
  record(out, "gelu", inputs(x), saves(x), [approximate](Vjp& v) { v.set(0, gelu_vjp(v, approximate)); });
}

void silu(const Tensor& out, const Tensor& x) {
  record(out, "silu", inputs(x), saves(x), [](Vjp& v) { v.set(0, silu_vjp(v)); });
}

// Above the threshold softplus is x itself; below, its slope is sigmoid(beta x).
void softplus(const Tensor& out, const Tensor& x, double beta, double threshold) {
  record(out, "softplus", inputs(x), saves(x), [beta, threshold](Vjp& v) {
    const Tensor g = wide(v.grad());
    const Tensor bx = wide(v.saved(0)) * beta;
    v.set(0, forge::where(forge::gt(bx, threshold), g, g * forge::sigmoid(bx)));
  });
}

void elu(const Tensor& out, const Tensor& x, double alpha) {
  record(out, "elu", inputs(x), saves(x), [alpha](Vjp& v) {
    const Tensor g = wide(v.grad());
    const Tensor xs = wide(v.saved(0));
    v.set(0, forge::where(forge::le(xs, 0), g * forge::exp(xs) * alpha, g));
  });
}

void erf(const Tensor& out, const Tensor& x) {
  record(out, "erf", inputs(x), saves(x), [](Vjp& v) {
    const Tensor xs = wide(v.saved(0));
    v.set(0, wide(v.grad()) * (forge::exp(forge::square(xs) * -1.0) * kTwoOverSqrtPi));
  });
}

}  // namespace forge::autograd::rules
