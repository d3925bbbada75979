#pragma once
// Reductions. `dims` names the dimensions to reduce: a braced list ({0, 2}),
// one dim (1), or nothing ({}), which reduces every dimension; negative dims
// count from the end and a dim named twice is an error. `keepdim` keeps each reduced dimension with size 1. Reductions
// over an empty set give the identity (sum 0, prod 1, all true, any false);
// max/min/argmax/argmin of an empty set are errors. Float sums accumulate in a
// wider or compensated form (f16/bf16 in f32; long f32 rows pairwise).
//
// Result dtypes follow libtorch: sum/prod of integers or bool give i64;
// mean/var/std/logsumexp/norm need a floating input; argmax/argmin give i64;
// all/any give bool. Every op has an `_into(out, ...)` form; `out` must have
// the result's shape and dtype exactly.

#include "forge/tensor.h"

namespace forge {

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // i64
};

Tensor sum(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
// The largest/smallest element over dims (NaN propagates).
Tensor amax(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
// max(x) is amax over everything; max(x, dim) gives the values and their
// indices along one dim (the first index among ties), as in libtorch.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim = false);
// The index into the flattened tensor, or along `dim`.
Tensor argmax(const Tensor& x);
Tensor argmin(const Tensor& x);
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Variance with Bessel's correction by default (divides by N - correction;
// N - correction <= 0 gives NaN or inf, as in libtorch).
Tensor var(const Tensor& x, const DimList& dims = {}, std::int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const DimList& dims = {}, std::int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const DimList& dims, bool keepdim = false);
// p = 1 (sum of |x|) or p = 2 (Euclidean); other p are invalid_argument.
Tensor norm(const Tensor& x, double p = 2.0, const DimList& dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, const DimList& dims = {}, bool keepdim = false);
// Running sum along dim; integer and bool inputs give i64.
Tensor cumsum(const Tensor& x, std::int64_t dim);

Tensor& sum_into(Tensor& out, const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor& mean_into(Tensor& out, const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor& prod_into(Tensor& out, const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor& amax_into(Tensor& out, const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor& amin_into(Tensor& out, const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor& argmax_into(Tensor& out, const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor& argmin_into(Tensor& out, const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor& var_into(Tensor& out, const Tensor& x, const DimList& dims = {}, std::int64_t correction = 1,
                 bool keepdim = false);
Tensor& std_into(Tensor& out, const Tensor& x, const DimList& dims = {}, std::int64_t correction = 1,
                 bool keepdim = false);
Tensor& logsumexp_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim = false);
Tensor& norm_into(Tensor& out, const Tensor& x, double p = 2.0, const DimList& dims = {}, bool keepdim = false);
Tensor& all_into(Tensor& out, const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor& any_into(Tensor& out, const Tensor& x, const DimList& dims = {}, bool keepdim = false);
Tensor& cumsum_into(Tensor& out, const Tensor& x, std::int64_t dim);

}  // namespace forge
