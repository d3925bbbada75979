#pragma once
// Derivative rules of the view, copy and cast methods of Tensor (tensor.h).
// A view op's record must stay cheap: no saved tensors, only dims by value.
// Dims are already wrapped (non-negative) when a rule gets them.

#include <cstdint>

#include "forge/shape.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

void clone(const Tensor& out, const Tensor& x);
void clone_view(const Tensor& out, const Tensor& x);
// out: any view of x's buffer (view_with_strides). Refuses (not_implemented)
// when x's elements overlap or out reads an element that is not one of x's.
void as_strided(const Tensor& out, const Tensor& x);
// view, reshape, squeeze, unsqueeze: the same elements in another shape.
void view(const Tensor& out, const Tensor& x);
void reshape(const Tensor& out, const Tensor& x);
void squeeze(const Tensor& out, const Tensor& x);
void unsqueeze(const Tensor& out, const Tensor& x);
// broadcast_to and expand; `op` names the node.
void expand(const Tensor& out, const Tensor& x, const char* op);
void narrow(const Tensor& out, const Tensor& x, int dim, std::int64_t start, std::int64_t length);
// start: already clamped into [0, size]; out.size(dim) elements every `step`.
void slice(const Tensor& out, const Tensor& x, int dim, std::int64_t start, std::int64_t step);
void select(const Tensor& out, const Tensor& x, int dim, std::int64_t index);
void permute(const Tensor& out, const Tensor& x, const Dims& dims);
void transpose(const Tensor& out, const Tensor& x, int dim0, int dim1);
void to(const Tensor& out, const Tensor& x);

}  // namespace forge::autograd::rules
