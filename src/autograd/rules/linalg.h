#pragma once
// Derivative rules of the linear-algebra ops (forge/ops/linalg.h).

#include "forge/scalar.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

void matmul(const Tensor& out, const Tensor& a, const Tensor& b);
void mm(const Tensor& out, const Tensor& a, const Tensor& b);
void bmm(const Tensor& out, const Tensor& a, const Tensor& b);
void linear(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias);
void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha);
void outer(const Tensor& out, const Tensor& a, const Tensor& b);
void dot(const Tensor& out, const Tensor& a, const Tensor& b);

}  // namespace forge::autograd::rules
