#pragma once
// Sorting, selection and sampling, with libtorch's semantics. Values keep x's
// dtype; indices are i64. Every dtype sorts; NaN sorts after every number
// (first when descending), and equal values keep their input order in both
// directions, so every sort is stable and topk's choice among ties is the
// lowest indices (the `stable` flag is accepted for libtorch's signature).
// A 0-d x sorts as one element along dim 0 or -1.
//
// topk and sort record the gradient of their values (it flows back to the
// positions the indices name); indices, argsort, searchsorted and
// multinomial are not differentiable. The _into forms write into the
// caller's tensors (exact shape and dtype, no overlap with an input).

#include <cstdint>
#include <tuple>

#include "forge/tensor.h"

namespace forge {

// The k largest (smallest) elements along dim, best first when `sorted`,
// else in index order. 0 <= k <= x.size(dim).
std::tuple<Tensor, Tensor> topk(const Tensor& x, std::int64_t k, std::int64_t dim = -1, bool largest = true,
                                bool sorted = true);
std::tuple<Tensor, Tensor> sort(const Tensor& x, std::int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, std::int64_t dim = -1, bool descending = false, bool stable = false);
// Samples category indices from probs [V] or [B, V] (floating, finite,
// non-negative, each row with a positive sum; need not be normalised): i64
// [n] or [B, n], drawn from the context's generator, so a seed reproduces
// them. Without replacement a row needs at least n positive weights.
Tensor multinomial(const Tensor& probs, std::int64_t num_samples, bool replacement = false);
// For each value, the index where it would be inserted into its row of the
// ascending sorted_sequence: the first position whose element is >= value
// (> value when `right`). sorted_sequence is 1-D (every value searches it) or
// has values' leading dims ([..., N] against [..., M]); the result has
// values' shape, i64 or (out_int32) i32.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool right = false, bool out_int32 = false);

std::tuple<Tensor&, Tensor&> topk_into(Tensor& values, Tensor& indices, const Tensor& x, std::int64_t k,
                                       std::int64_t dim = -1, bool largest = true, bool sorted = true);
std::tuple<Tensor&, Tensor&> sort_into(Tensor& values, Tensor& indices, const Tensor& x, std::int64_t dim = -1,
                                       bool descending = false, bool stable = false);
Tensor& argsort_into(Tensor& out, const Tensor& x, std::int64_t dim = -1, bool descending = false, bool stable = false);
Tensor& multinomial_into(Tensor& out, const Tensor& probs, std::int64_t num_samples, bool replacement = false);
// out's dtype (i64 or i32) chooses the index type.
Tensor& searchsorted_into(Tensor& out, const Tensor& sorted_sequence, const Tensor& values, bool right = false);

}  // namespace forge
