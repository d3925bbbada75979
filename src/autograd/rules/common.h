#pragma once
// Helpers the derivative rules share.

#include "autograd/node.h"
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

// Note [Fused backward kernels]
// Some VJPs run a fused kernel: the unary activations, softmax and
// log_softmax, layer_norm and rms_norm, the class losses, conv2d and the
// pools. Fast, but what a kernel writes has no history, so under
// create_graph (Note [Backward that records] in engine.cpp) a kernel's
// gradient would be a constant: a wrong second derivative, silently. So each
// such rule, when v.create_graph(), either computes the same gradient from
// forge ops (the activations, softmax, log_softmax, layer_norm, rms_norm,
// cross_entropy, nll_loss), or calls refuse_recording (conv2d and the pools),
// which fails by name when anything the VJP reads has a history (when
// nothing does, the kernel's constant is the right answer).
void refuse_recording(const Vjp& v, const char* op);

}  // namespace forge::autograd::rules
