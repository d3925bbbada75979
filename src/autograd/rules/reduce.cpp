// VJPs of the reductions: one short function per op (see record.h).
//
// A reduction's gradient is computed in the keepdim shape (the reduced dims
// kept with size 1) and broadcast back over the input.

#include "autograd/rules/reduce.h"

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "forge/ops.h"

namespace forge::autograd::rules {
namespace {

// t (shaped like a reduction's output) in the keepdim shape, ready to broadcast over the input.
Tensor kept(const Tensor& t, const Shape& input, const DimList& dims, bool keepdim) {
  if (keepdim || input.rank() == 0) return t;
  return t.reshape(keepdim_shape(input, dims));
}

// How many elements each output of the reduction summarizes.
std::int64_t reduced_count(const Shape& input, const DimList& dims) {
  const Shape k = keepdim_shape(input, dims);
  std::int64_t n = 1;
  for (int d = 0; d < input.rank(); ++d)
    if (k[d] == 1) n *= input[d];
  return input.rank() == 0 ? 1 : n;
}

// amax/amin: the gradient split evenly among the elements equal to the
// extreme (among the NaNs when the extreme is NaN), as libtorch does.
void extreme(const char* name, const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) {
  record(out, name, inputs(x), saves(x, out), [dims, keepdim](Vjp& v) {
    const Shape& in = v.input_shape(0);
    const Tensor& xv = v.saved(0);
    const Tensor o = kept(v.saved(1), in, dims, keepdim);
    const Tensor both_nan = logical_and(ne(xv, xv), ne(o, o));
    const Tensor mask = logical_or(eq(xv, o), both_nan).to(v.grad().dtype());
    const Tensor count = sum(mask, in.rank() == 0 ? DimList() : dims, /*keepdim=*/true);
    const Tensor share = div(kept(v.grad(), in, dims, keepdim), count);
    v.set(0, mul(mask, share));
  });
}

// max(dim)/min(dim): the gradient goes to the index each value came from.
void extreme_dim(const char* name, const Tensor& values, const Tensor& x, std::int64_t dim, bool keepdim,
                 const Tensor& indices) {
  const int d = wrap_dim(dim, x.dim(), name);
  record(values, name, inputs(x), saves(indices), [d, keepdim](Vjp& v) {
    const Shape& in = v.input_shape(0);
    if (in.rank() == 0) return v.set(0, v.grad());
    const Tensor idx = keepdim ? v.saved(0) : v.saved(0).unsqueeze(d);
    const Tensor g = keepdim ? v.grad() : v.grad().unsqueeze(d);
    v.set(0, scatter_add(zeros_like_shape(g, in, g.dtype()), d, idx, g));
  });
}

}  // namespace

void sum(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) {
  record(out, "sum", inputs(x), saves(),
         [dims, keepdim](Vjp& v) { v.set(0, unreduce(v.grad(), v.input_shape(0), dims, keepdim)); });
}

void mean(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) {
  const double scale = 1.0 / static_cast<double>(reduced_count(x.shape(), dims));
  record(out, "mean", inputs(x), saves(),
         [dims, keepdim, scale](Vjp& v) { v.set(0, mul(unreduce(v.grad(), v.input_shape(0), dims, keepdim), scale)); });
}

// d prod / d x_i is the product of the other elements of x_i's slice. With
// no zero in the slice that is prod / x_i; with one zero, only the zero's
// position gets the product of the rest; with two or more, everything is 0.
void prod(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) {
  record(out, "prod", inputs(x), saves(x), [dims, keepdim](Vjp& v) {
    const Tensor& xv = v.saved(0);
    const DimList rd = v.input_shape(0).rank() == 0 ? DimList() : dims;
    const Tensor is_zero = eq(xv, 0.0);
    const Tensor nonzero = masked_fill(xv, is_zero, 1.0);
    const Tensor rest = prod(nonzero, rd, /*keepdim=*/true);  // product of the nonzero elements
    const Tensor zeros = sum(is_zero, rd, /*keepdim=*/true);
    const Tensor at_zero = where(eq(zeros, 1.0), rest, 0.0);
    const Tensor elsewhere = where(eq(zeros, 0.0), div(rest, nonzero), 0.0);
    const Tensor local = where(is_zero, at_zero, elsewhere);
    v.set(0, mul(kept(v.grad(), v.input_shape(0), dims, keepdim), local));
  });
}

void amax(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) {
  extreme("amax", out, x, dims, keepdim);
}
void amin(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) {
  extreme("amin", out, x, dims, keepdim);
}

void max_dim(const Tensor& values, const Tensor& x, std::int64_t dim, bool keepdim, const Tensor& indices) {
  extreme_dim("max", values, x, dim, keepdim, indices);
}
void min_dim(const Tensor& values, const Tensor& x, std::int64_t dim, bool keepdim, const Tensor& indices) {
  extreme_dim("min", values, x, dim, keepdim, indices);
}

// d var / d x_i = 2 (x_i - mean) / (N - correction).
void var(const Tensor& out, const Tensor& x, const DimList& dims, std::int64_t correction, bool keepdim) {
  const double scale = 2.0 / static_cast<double>(reduced_count(x.shape(), dims) - correction);
  record(out, "var", inputs(x), saves(x), [dims, keepdim, scale](Vjp& v) {
    const Tensor& xv = v.saved(0);
    const DimList rd = v.input_shape(0).rank() == 0 ? DimList() : dims;
    const Tensor centered = sub(xv, mean(xv, rd, /*keepdim=*/true));
    v.set(0, mul(mul(centered, kept(v.grad(), v.input_shape(0), dims, keepdim)), scale));
  });
}

// d std / d x_i = (x_i - mean) / ((N - correction) std).
void std(const Tensor& out, const Tensor& x, const DimList& dims, std::int64_t correction, bool keepdim) {
  const double scale = 1.0 / static_cast<double>(reduced_count(x.shape(), dims) - correction);
  record(out, "std", inputs(x), saves(x, out), [dims, keepdim, scale](Vjp& v) {
    const Tensor& xv = v.saved(0);
    const Shape& in = v.input_shape(0);
    const DimList rd = in.rank() == 0 ? DimList() : dims;
    const Tensor centered = sub(xv, mean(xv, rd, /*keepdim=*/true));
    const Tensor g = div(kept(v.grad(), in, dims, keepdim), kept(v.saved(1), in, dims, keepdim));
    v.set(0, mul(mul(centered, g), scale));
  });
}

// d logsumexp / d x_i = softmax(x)_i = exp(x_i - out).
void logsumexp(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) {
  record(out, "logsumexp", inputs(x), saves(x, out), [dims, keepdim](Vjp& v) {
    const Shape& in = v.input_shape(0);
    const Tensor weights = exp(sub(v.saved(0), kept(v.saved(1), in, dims, keepdim)));
    v.set(0, mul(weights, kept(v.grad(), in, dims, keepdim)));
  });
}

// p = 1: sign(x). p = 2: x / norm, and 0 where the norm is 0 (libtorch's subgradient).
void norm(const Tensor& out, const Tensor& x, double p, const DimList& dims, bool keepdim) {
  const Tensor none;
  record(out, "norm", inputs(x), saves(x, p == 2.0 ? out : none), [p, dims, keepdim](Vjp& v) {
    const Shape& in = v.input_shape(0);
    const Tensor g = kept(v.grad(), in, dims, keepdim);
    if (p == 1.0) return v.set(0, mul(sign(v.saved(0)), g));
    const Tensor n = kept(v.saved(1), in, dims, keepdim);
    const Tensor unit = where(ne(n, 0.0), div(v.saved(0), n), 0.0);
    v.set(0, mul(unit, g));
  });
}

// Each x_i feeds out_j for j >= i: the gradient is the reversed cumsum of the output's.
void cumsum(const Tensor& out, const Tensor& x, std::int64_t dim) {
  const int d = wrap_dim(dim, x.dim(), "cumsum");
  record(out, "cumsum", inputs(x), saves(), [d](Vjp& v) {
    if (v.input_shape(0).rank() == 0) return v.set(0, v.grad());
    v.set(0, flip(cumsum(flip(v.grad(), {d}), d), {d}));
  });
}

}  // namespace forge::autograd::rules
