#pragma once
// Derivative rules of the view, copy and cast methods of Tensor (tensor.h).

#include "forge/tensor.h"

namespace forge::autograd::rules {

void clone(const Tensor& out, const Tensor& x);

}  // namespace forge::autograd::rules
