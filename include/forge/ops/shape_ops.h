#pragma once
// Ops that assemble or rearrange tensors. cat, stack, repeat and flip write a
// new tensor; split and chunk return views of x (as libtorch does), which
// retain x's buffer. Any dtype; cat/stack promote their inputs' dtypes.

#include <cstdint>
#include <vector>

#include "forge/tensor.h"

namespace forge {

// Joins along an existing dim; every other dim must agree. Empty 1-D tensors
// ([0]) are skipped, as in libtorch.
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
// Joins along a new dim; every shape must be equal.
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
// Pieces of split_size along dim (the last may be shorter).
std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim = 0);
// Pieces of the given sizes, which must add up to x.size(dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim = 0);
// At most `chunks` pieces of ceil(size / chunks).
std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim = 0);
// Tiles x; repeats has at least x.dim() entries (extra leading ones add dims).
Tensor repeat(const Tensor& x, const Dims& repeats);
// Reverses the order along each dim in dims.
Tensor flip(const Tensor& x, const Dims& dims);

Tensor& cat_into(Tensor& out, const std::vector<Tensor>& tensors, std::int64_t dim = 0);
Tensor& stack_into(Tensor& out, const std::vector<Tensor>& tensors, std::int64_t dim = 0);
Tensor& repeat_into(Tensor& out, const Tensor& x, const Dims& repeats);
Tensor& flip_into(Tensor& out, const Tensor& x, const Dims& dims);

}  // namespace forge
