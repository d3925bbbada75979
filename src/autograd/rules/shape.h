#pragma once
// Derivative rules of the ops that assemble or rearrange tensors
// (forge/ops/shape_ops.h). split and chunk record each piece through
// rules::narrow (views.h).

#include <cstdint>
#include <vector>

#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

// dim: already wrapped against out's rank.
void cat(const Tensor& out, const std::vector<Tensor>& tensors, int dim);
void stack(const Tensor& out, const std::vector<Tensor>& tensors, int dim);
void repeat(const Tensor& out, const Tensor& x, const Dims& repeats);
// dims: already wrapped.
void flip(const Tensor& out, const Tensor& x, const Dims& dims);

}  // namespace forge::autograd::rules
