#pragma once
// Derivative rules of convolution and pooling (forge/ops/nn.h).

#include "forge/ops/nn.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

void conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options);
void max_pool2d(const Tensor& out, const Tensor& x, const Pool2dOptions& options);
void avg_pool2d(const Tensor& out, const Tensor& x, const Pool2dOptions& options);

}  // namespace forge::autograd::rules
