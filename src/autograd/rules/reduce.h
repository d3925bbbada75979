#pragma once
// Derivative rules of the reductions (forge/ops/reduce.h).

#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

void sum(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim);

}  // namespace forge::autograd::rules
