#pragma once
// Derivative rules of the reductions (forge/ops/reduce.h).

#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

void sum(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim);
void mean(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim);
void prod(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim);
// amax/amin, and max()/min() over every element (dims empty).
void amax(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim);
void amin(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim);
// The values of max(dim)/min(dim); `indices` says where each came from.
void max_dim(const Tensor& values, const Tensor& x, std::int64_t dim, bool keepdim, const Tensor& indices);
void min_dim(const Tensor& values, const Tensor& x, std::int64_t dim, bool keepdim, const Tensor& indices);
void var(const Tensor& out, const Tensor& x, const DimList& dims, std::int64_t correction, bool keepdim);
void std(const Tensor& out, const Tensor& x, const DimList& dims, std::int64_t correction, bool keepdim);
void logsumexp(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim);
void norm(const Tensor& out, const Tensor& x, double p, const DimList& dims, bool keepdim);
void cumsum(const Tensor& out, const Tensor& x, std::int64_t dim);

}  // namespace forge::autograd::rules
