#pragma once
// Helpers the derivative rules share.

#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

// `input` with the reduced dims (empty = all) set to 1: a reduction's output
// shape under keepdim.
Shape keepdim_shape(const Shape& input, const DimList& dims);

// A reduction's output gradient laid back over the input's shape: reshaped to
// the keepdim shape and expanded (a view, no copy).
Tensor unreduce(const Tensor& grad, const Shape& input, const DimList& dims, bool keepdim);

// A fresh zero tensor of `shape` and `dtype` in like's context.
Tensor zeros_like_shape(const Tensor& like, const Shape& shape, DType dtype);

}  // namespace forge::autograd::rules
