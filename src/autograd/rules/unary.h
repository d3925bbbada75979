#pragma once
// Derivative rules of the unary ops (forge/ops/elementwise.h, "unary"). Each
// records `out` as the result of its op over the arguments given; the op
// calls it only when autograd::needs_grad(...) holds.

#include "forge/ops.h"

namespace forge::autograd::rules {

// t, widened to f32 when it is a 16-bit float: the rules compute 16-bit
// gradients in f32 (Vjp::set casts them back).
Tensor wide(const Tensor& t);

void neg(const Tensor& out, const Tensor& x);
void abs(const Tensor& out, const Tensor& x);
void sign(const Tensor& out, const Tensor& x);
void exp(const Tensor& out, const Tensor& x);
void expm1(const Tensor& out, const Tensor& x);
void log(const Tensor& out, const Tensor& x);
void log1p(const Tensor& out, const Tensor& x);
void sqrt(const Tensor& out, const Tensor& x);
void rsqrt(const Tensor& out, const Tensor& x);
void square(const Tensor& out, const Tensor& x);
void reciprocal(const Tensor& out, const Tensor& x);
void sin(const Tensor& out, const Tensor& x);
void cos(const Tensor& out, const Tensor& x);
void tanh(const Tensor& out, const Tensor& x);
void sigmoid(const Tensor& out, const Tensor& x);
void relu(const Tensor& out, const Tensor& x);
void leaky_relu(const Tensor& out, const Tensor& x, double negative_slope);
void gelu(const Tensor& out, const Tensor& x, GeluApproximation approximate);
void silu(const Tensor& out, const Tensor& x);
void softplus(const Tensor& out, const Tensor& x, double beta, double threshold);
void elu(const Tensor& out, const Tensor& x, double alpha);
void erf(const Tensor& out, const Tensor& x);

}  // namespace forge::autograd::rules
