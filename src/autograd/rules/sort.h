#pragma once
// Derivative rules of the sorting ops (forge/ops/sort.h): only the values of
// topk and sort are differentiable.

#include <cstdint>

#include "forge/tensor.h"

namespace forge::autograd::rules {

// The values of topk / sort along dim (already wrapped); `indices` says where each came from.
void topk(const Tensor& values, const Tensor& x, int dim, const Tensor& indices);
void sort(const Tensor& values, const Tensor& x, int dim, const Tensor& indices);

}  // namespace forge::autograd::rules
