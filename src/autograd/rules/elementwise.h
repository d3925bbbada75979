#pragma once
// Derivative rules of the elementwise ops (forge/ops/elementwise.h). Each
// records `out` as the result of its op over the arguments given; the op
// calls it only when autograd::needs_grad(...) holds.

#include "forge/scalar.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

void add(const Tensor& out, const Tensor& a, const Tensor& b);
void add(const Tensor& out, const Tensor& a, Scalar b);
void sub(const Tensor& out, const Tensor& a, const Tensor& b);
void sub(const Tensor& out, const Tensor& a, Scalar b);
void sub(const Tensor& out, Scalar a, const Tensor& b);
void mul(const Tensor& out, const Tensor& a, const Tensor& b);
void mul(const Tensor& out, const Tensor& a, Scalar b);

}  // namespace forge::autograd::rules
