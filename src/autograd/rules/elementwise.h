#pragma once
// Derivative rules of the elementwise ops (forge/ops/elementwise.h). Each
// records `out` as the result of its op over the arguments given; the op
// calls it only when autograd::needs_grad(...) holds.

#include <optional>

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
void div(const Tensor& out, const Tensor& a, const Tensor& b);
void div(const Tensor& out, const Tensor& a, Scalar b);
void div(const Tensor& out, Scalar a, const Tensor& b);
void pow(const Tensor& out, const Tensor& a, const Tensor& b);
void pow(const Tensor& out, const Tensor& a, Scalar b);
void pow(const Tensor& out, Scalar a, const Tensor& b);
void maximum(const Tensor& out, const Tensor& a, const Tensor& b);
void minimum(const Tensor& out, const Tensor& a, const Tensor& b);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, Scalar b);
void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, Scalar value);
void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

}  // namespace forge::autograd::rules
