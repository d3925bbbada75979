// Reductions and cumsum: resolve the dims, check dtypes and the empty cases,
// allocate (or check the caller's `out`), then run the reduce family's
// kernels (backend/kernels/reduce.h) of the output's device. A 0-d tensor reduces as one element and
// takes dim 0 or -1, as in libtorch.

#include "autograd/rules/reduce.h"

#include <string>

#include "autograd/record.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge {
namespace {

using backend::ReduceOp;

// The dims a reduction runs over and the shape of its result.
struct Plan {
  bool reduced[kMaxRank] = {};
  Shape out_shape;
  std::int64_t n_reduced = 1;
  int first_empty = -1;  // a reduced dim of size 0, if any
};

Plan make_plan(const char* op, const Tensor& x, const DimList& dims, bool keepdim) {
  Plan p;
  const int rank = x.dim();
  if (dims.empty()) {
    for (int d = 0; d < rank; ++d) p.reduced[d] = true;
  } else {
    bool named[kMaxRank + 1] = {};
    for (std::int64_t dim : dims) {
      const int d = wrap_dim(dim, rank, op);
      FORGE_CHECK(!named[d], invalid_argument, op, "dim ", d, " appears more than once in the dims ", Dims(dims));
      named[d] = true;
      if (rank > 0) p.reduced[d] = true;
    }
  }
  for (int d = 0; d < rank; ++d) {
    if (!p.reduced[d]) {
      p.out_shape.push_back(x.shape()[d]);
      continue;
    }
    p.n_reduced *= x.shape()[d];
    if (x.shape()[d] == 0 && p.first_empty < 0) p.first_empty = d;
    if (keepdim) p.out_shape.push_back(1);
  }
  return p;
}

bool is_float_op(ReduceOp kind) {
  switch (kind) {
    case ReduceOp::mean:
    case ReduceOp::var:
    case ReduceOp::std:
    case ReduceOp::logsumexp:
    case ReduceOp::norm1:
    case ReduceOp::norm2:
      return true;
    default:
      return false;
  }
}

// The result dtype, after checking that the op takes x's dtype.
DType result_dtype(const char* op, ReduceOp kind, DType in) {
  if (is_float_op(kind)) FORGE_CHECK(is_floating(in), dtype, op, "needs a floating input, got ", dtype_name(in));
  switch (kind) {
    case ReduceOp::sum:
    case ReduceOp::prod:
      return is_floating(in) ? in : DType::i64;
    case ReduceOp::all:
    case ReduceOp::any:
      return DType::boolean;
    default:
      return in;
  }
}

void check_nonempty(const char* op, const Tensor& x, const Plan& p) {
  FORGE_CHECK(p.first_empty < 0, invalid_argument, op, "cannot reduce over dim ", p.first_empty, " of size 0 (shape ",
              x.shape(), "): the operation has no identity");
}

// The output strides over x's rank, for an output of shape out_shape.
Strides spread_strides(const Tensor& x, const Plan& p, const Strides& out_strides, bool keepdim) {
  Strides s = Strides::filled(x.dim(), 0);
  for (int d = 0, o = 0; d < x.dim(); ++d) {
    if (!p.reduced[d])
      s[d] = out_strides[o++];
    else if (keepdim)
      ++o;
  }
  return s;
}

void run_reduce(const char* op, ReduceOp kind, Tensor& out, const Tensor& x, const Plan& p, bool keepdim,
                std::int64_t correction) {
  backend::ReduceArgs a;
  if (x.dim() == 0) {
    a.shape = Shape{1};
    a.in_strides = Strides{1};
    a.out_strides = Strides{1};
    a.reduced[0] = true;
  } else {
    a.shape = x.shape();
    a.in_strides = x.strides();
    a.out_strides = spread_strides(x, p, out.strides(), keepdim);
    for (int d = 0; d < x.dim(); ++d) a.reduced[d] = p.reduced[d];
  }
  a.in = detail::first_element(x);
  a.in_dtype = x.dtype();
  a.out = detail::first_element(out);
  a.out_dtype = out.dtype();
  a.correction = correction;
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  dev.kernels().reduce.reduce.get(op, x.dtype(), dev)(dev, kind, a);
}

bool needs_nonempty(ReduceOp kind) { return kind == ReduceOp::amax || kind == ReduceOp::amin; }

Tensor reduce_op(const char* op, ReduceOp kind, const Tensor& x, const DimList& dims, bool keepdim,
                 std::int64_t correction = 1) {
  detail::check_input(op, x, "x");
  const DType dtype = result_dtype(op, kind, x.dtype());
  const Plan p = make_plan(op, x, dims, keepdim);
  if (needs_nonempty(kind)) check_nonempty(op, x, p);
  Tensor out = detail::allocate(x.runtime(), p.out_shape, dtype, op);
  run_reduce(op, kind, out, x, p, keepdim, correction);
  detail::adopt_output(out);
  return out;
}

void check_out(const char* op, const Tensor& out, const Shape& shape, DType dtype) {
  FORGE_CHECK(out.shape() == shape, shape, op, "out has shape ", out.shape(), " but the result has shape ", shape);
  FORGE_CHECK(out.dtype() == dtype, dtype, op, "out is ", dtype_name(out.dtype()), " but the result is ",
              dtype_name(dtype));
}

Tensor& reduce_into(const char* op, ReduceOp kind, Tensor& out, const Tensor& x, const DimList& dims, bool keepdim,
                    std::int64_t correction = 1) {
  detail::check_writable(op, out, "out");
  detail::check_input(op, x, "x");
  detail::check_same_runtime(op, out, x);
  const DType dtype = result_dtype(op, kind, x.dtype());
  const Plan p = make_plan(op, x, dims, keepdim);
  if (needs_nonempty(kind)) check_nonempty(op, x, p);
  check_out(op, out, p.out_shape, dtype);
  detail::check_no_partial_overlap(op, out, x, "x");
  run_reduce(op, kind, out, x, p, keepdim, correction);
  out.buffer()->bump_version();
  return out;
}

ReduceOp norm_kind(const char* op, double p) {
  FORGE_CHECK(p == 1.0 || p == 2.0, invalid_argument, op, "p = ", p, " is not supported (p must be 1 or 2)");
  return p == 1.0 ? ReduceOp::norm1 : ReduceOp::norm2;
}

// ---- argmax / argmin and max / min along a dim ----

struct ArgPlan {
  int dim = 0;
  Shape out_shape;
};

ArgPlan make_arg_plan(const char* op, const Tensor& x, std::int64_t dim, bool keepdim) {
  ArgPlan p;
  p.dim = wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return p;
  FORGE_CHECK(x.shape()[p.dim] > 0, invalid_argument, op, "cannot reduce over dim ", p.dim, " of size 0 (shape ",
              x.shape(), ")");
  for (int d = 0; d < x.dim(); ++d) {
    if (d != p.dim)
      p.out_shape.push_back(x.shape()[d]);
    else if (keepdim)
      p.out_shape.push_back(1);
  }
  return p;
}

Strides arg_strides(const Tensor& x, int dim, const Tensor& out, bool keepdim) {
  Strides s = Strides::filled(x.dim(), 0);
  for (int d = 0, o = 0; d < x.dim(); ++d) {
    if (d != dim)
      s[d] = out.strides()[o++];
    else if (keepdim)
      ++o;
  }
  return s;
}

void run_arg(const char* op, bool is_max, const Tensor& x, int dim, bool keepdim, Tensor* values, Tensor& indices) {
  backend::ArgReduceArgs a;
  if (x.dim() == 0) {
    a.shape = Shape{1};
    a.in_strides = Strides{1};
    a.values_strides = Strides{1};
    a.indices_strides = Strides{1};
  } else {
    a.shape = x.shape();
    a.in_strides = x.strides();
    a.dim = dim;
    a.indices_strides = arg_strides(x, dim, indices, keepdim);
    if (values) a.values_strides = arg_strides(x, dim, *values, keepdim);
  }
  a.in = detail::first_element(x);
  a.dtype = x.dtype();
  a.values = values ? detail::first_element(*values) : nullptr;
  a.indices = detail::first_element(indices);
  detail::DeviceRuntime& dev = detail::device_runtime(indices);
  dev.kernels().reduce.arg_reduce.get(op, x.dtype(), dev)(dev, is_max, a);
}

ValuesIndices values_indices(const char* op, bool is_max, const Tensor& x, std::int64_t dim, bool keepdim) {
  detail::check_input(op, x, "x");
  const ArgPlan p = make_arg_plan(op, x, dim, keepdim);
  ValuesIndices r;
  r.values = detail::allocate(x.runtime(), p.out_shape, x.dtype(), op);
  r.indices = detail::allocate(x.runtime(), p.out_shape, DType::i64, op);
  run_arg(op, is_max, x, p.dim, keepdim, &r.values, r.indices);
  detail::adopt_output(r.values);
  detail::adopt_output(r.indices);
  return r;
}

Tensor arg_dim(const char* op, bool is_max, const Tensor& x, std::int64_t dim, bool keepdim) try {
  detail::check_input(op, x, "x");
  const ArgPlan p = make_arg_plan(op, x, dim, keepdim);
  Tensor out = detail::allocate(x.runtime(), p.out_shape, DType::i64, op);
  run_arg(op, is_max, x, p.dim, keepdim, nullptr, out);
  detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM(op)

// The index into the flattened tensor: a packed 1-d view (or copy) of x.
Tensor arg_flat(const char* op, bool is_max, const Tensor& x) try {
  detail::check_input(op, x, "x");
  FORGE_CHECK(x.numel() > 0, invalid_argument, op, "cannot reduce an empty tensor (shape ", x.shape(), ")");
  const Tensor packed = x.is_contiguous() ? x : detail::cast_temporary(x, x.dtype(), op);
  const Tensor flat = detail::make_view(packed, Shape{packed.numel()}, Strides{1}, packed.offset());
  Tensor out = detail::allocate(x.runtime(), Shape{}, DType::i64, op);
  run_arg(op, is_max, flat, 0, false, nullptr, out);
  detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM(op)

Tensor& arg_into(const char* op, bool is_max, Tensor& out, const Tensor& x, std::int64_t dim, bool keepdim) {
  detail::check_writable(op, out, "out");
  detail::check_input(op, x, "x");
  detail::check_same_runtime(op, out, x);
  const ArgPlan p = make_arg_plan(op, x, dim, keepdim);
  check_out(op, out, p.out_shape, DType::i64);
  detail::check_no_partial_overlap(op, out, x, "x");
  run_arg(op, is_max, x, p.dim, keepdim, nullptr, out);
  out.buffer()->bump_version();
  return out;
}

// ---- cumsum ----

DType cumsum_dtype(DType in) { return is_floating(in) ? in : DType::i64; }

void run_cumsum(const char* op, Tensor& out, const Tensor& x, int dim) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::CumsumFn* const kernel = dev.kernels().reduce.cumsum.get(op, x.dtype(), dev);
  if (x.dim() == 0) {
    kernel(dev, Shape{1}, Strides{1}, Strides{1}, 0, detail::first_element(x), x.dtype(), detail::first_element(out),
           out.dtype());
    return;
  }
  kernel(dev, x.shape(), x.strides(), out.strides(), dim, detail::first_element(x), x.dtype(),
         detail::first_element(out), out.dtype());
}

}  // namespace

Tensor sum(const Tensor& x, const DimList& dims, bool keepdim) try {
  Tensor out = reduce_op("sum", ReduceOp::sum, x, dims, keepdim);
  FORGE_RECORD(sum, out, x, dims, keepdim);
  return out;
}
FORGE_CATCH_OOM("sum")
Tensor mean(const Tensor& x, const DimList& dims, bool keepdim) try {
  Tensor out = reduce_op("mean", ReduceOp::mean, x, dims, keepdim);
  FORGE_RECORD(mean, out, x, dims, keepdim);
  return out;
}
FORGE_CATCH_OOM("mean")
Tensor prod(const Tensor& x, const DimList& dims, bool keepdim) try {
  Tensor out = reduce_op("prod", ReduceOp::prod, x, dims, keepdim);
  FORGE_RECORD(prod, out, x, dims, keepdim);
  return out;
}
FORGE_CATCH_OOM("prod")
Tensor amax(const Tensor& x, const DimList& dims, bool keepdim) try {
  Tensor out = reduce_op("amax", ReduceOp::amax, x, dims, keepdim);
  FORGE_RECORD(amax, out, x, dims, keepdim);
  return out;
}
FORGE_CATCH_OOM("amax")
Tensor amin(const Tensor& x, const DimList& dims, bool keepdim) try {
  Tensor out = reduce_op("amin", ReduceOp::amin, x, dims, keepdim);
  FORGE_RECORD(amin, out, x, dims, keepdim);
  return out;
}
FORGE_CATCH_OOM("amin")
Tensor max(const Tensor& x) try {
  Tensor out = reduce_op("max", ReduceOp::amax, x, {}, false);
  FORGE_RECORD(amax, out, x, DimList(), false);
  return out;
}
FORGE_CATCH_OOM("max")
Tensor min(const Tensor& x) try {
  Tensor out = reduce_op("min", ReduceOp::amin, x, {}, false);
  FORGE_RECORD(amin, out, x, DimList(), false);
  return out;
}
FORGE_CATCH_OOM("min")
// Only the values record: the indices are not differentiable.
ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim) try {
  ValuesIndices r = values_indices("max", true, x, dim, keepdim);
  FORGE_RECORD(max_dim, r.values, x, dim, keepdim, r.indices);
  return r;
}
FORGE_CATCH_OOM("max")
ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim) try {
  ValuesIndices r = values_indices("min", false, x, dim, keepdim);
  FORGE_RECORD(min_dim, r.values, x, dim, keepdim, r.indices);
  return r;
}
FORGE_CATCH_OOM("min")
Tensor argmax(const Tensor& x) { return arg_flat("argmax", true, x); }
Tensor argmin(const Tensor& x) { return arg_flat("argmin", false, x); }
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) { return arg_dim("argmax", true, x, dim, keepdim); }
Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim) { return arg_dim("argmin", false, x, dim, keepdim); }
Tensor var(const Tensor& x, const DimList& dims, std::int64_t correction, bool keepdim) try {
  Tensor out = reduce_op("var", ReduceOp::var, x, dims, keepdim, correction);
  FORGE_RECORD(var, out, x, dims, correction, keepdim);
  return out;
}
FORGE_CATCH_OOM("var")
Tensor std(const Tensor& x, const DimList& dims, std::int64_t correction, bool keepdim) try {
  Tensor out = reduce_op("std", ReduceOp::std, x, dims, keepdim, correction);
  FORGE_RECORD(std, out, x, dims, correction, keepdim);
  return out;
}
FORGE_CATCH_OOM("std")
Tensor logsumexp(const Tensor& x, const DimList& dims, bool keepdim) try {
  Tensor out = reduce_op("logsumexp", ReduceOp::logsumexp, x, dims, keepdim);
  FORGE_RECORD(logsumexp, out, x, dims, keepdim);
  return out;
}
FORGE_CATCH_OOM("logsumexp")
Tensor norm(const Tensor& x, double p, const DimList& dims, bool keepdim) try {
  Tensor out = reduce_op("norm", norm_kind("norm", p), x, dims, keepdim);
  FORGE_RECORD(norm, out, x, p, dims, keepdim);
  return out;
}
FORGE_CATCH_OOM("norm")
Tensor all(const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_op("all", ReduceOp::all, x, dims, keepdim);
}
FORGE_CATCH_OOM("all")
Tensor any(const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_op("any", ReduceOp::any, x, dims, keepdim);
}
FORGE_CATCH_OOM("any")
Tensor cumsum(const Tensor& x, std::int64_t dim) try {
  detail::check_input("cumsum", x, "x");
  const int d = wrap_dim(dim, x.dim(), "cumsum");
  Tensor out = detail::allocate(x.runtime(), x.shape(), cumsum_dtype(x.dtype()), "cumsum");
  run_cumsum("cumsum", out, x, d);
  detail::adopt_output(out);
  FORGE_RECORD(cumsum, out, x, d);
  return out;
}
FORGE_CATCH_OOM("cumsum")

Tensor& sum_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_into("sum_into", ReduceOp::sum, out, x, dims, keepdim);
}
FORGE_CATCH_OOM("sum_into")
Tensor& mean_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_into("mean_into", ReduceOp::mean, out, x, dims, keepdim);
}
FORGE_CATCH_OOM("mean_into")
Tensor& prod_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_into("prod_into", ReduceOp::prod, out, x, dims, keepdim);
}
FORGE_CATCH_OOM("prod_into")
Tensor& amax_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_into("amax_into", ReduceOp::amax, out, x, dims, keepdim);
}
FORGE_CATCH_OOM("amax_into")
Tensor& amin_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_into("amin_into", ReduceOp::amin, out, x, dims, keepdim);
}
FORGE_CATCH_OOM("amin_into")
Tensor& argmax_into(Tensor& out, const Tensor& x, std::int64_t dim, bool keepdim) try {
  return arg_into("argmax_into", true, out, x, dim, keepdim);
}
FORGE_CATCH_OOM("argmax_into")
Tensor& argmin_into(Tensor& out, const Tensor& x, std::int64_t dim, bool keepdim) try {
  return arg_into("argmin_into", false, out, x, dim, keepdim);
}
FORGE_CATCH_OOM("argmin_into")
Tensor& var_into(Tensor& out, const Tensor& x, const DimList& dims, std::int64_t correction, bool keepdim) try {
  return reduce_into("var_into", ReduceOp::var, out, x, dims, keepdim, correction);
}
FORGE_CATCH_OOM("var_into")
Tensor& std_into(Tensor& out, const Tensor& x, const DimList& dims, std::int64_t correction, bool keepdim) try {
  return reduce_into("std_into", ReduceOp::std, out, x, dims, keepdim, correction);
}
FORGE_CATCH_OOM("std_into")
Tensor& logsumexp_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_into("logsumexp_into", ReduceOp::logsumexp, out, x, dims, keepdim);
}
FORGE_CATCH_OOM("logsumexp_into")
Tensor& norm_into(Tensor& out, const Tensor& x, double p, const DimList& dims, bool keepdim) try {
  return reduce_into("norm_into", norm_kind("norm_into", p), out, x, dims, keepdim);
}
FORGE_CATCH_OOM("norm_into")
Tensor& all_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_into("all_into", ReduceOp::all, out, x, dims, keepdim);
}
FORGE_CATCH_OOM("all_into")
Tensor& any_into(Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) try {
  return reduce_into("any_into", ReduceOp::any, out, x, dims, keepdim);
}
FORGE_CATCH_OOM("any_into")
Tensor& cumsum_into(Tensor& out, const Tensor& x, std::int64_t dim) try {
  const char* op = "cumsum_into";
  detail::check_writable(op, out, "out");
  detail::check_input(op, x, "x");
  detail::check_same_runtime(op, out, x);
  const int d = wrap_dim(dim, x.dim(), op);
  check_out(op, out, x.shape(), cumsum_dtype(x.dtype()));
  detail::check_no_partial_overlap(op, out, x, "x");
  run_cumsum(op, out, x, d);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("cumsum_into")

Tensor Tensor::sum(const DimList& dims, bool keepdim) const { return forge::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const DimList& dims, bool keepdim) const { return forge::mean(*this, dims, keepdim); }
Tensor Tensor::prod(const DimList& dims, bool keepdim) const { return forge::prod(*this, dims, keepdim); }
Tensor Tensor::amax(const DimList& dims, bool keepdim) const { return forge::amax(*this, dims, keepdim); }
Tensor Tensor::amin(const DimList& dims, bool keepdim) const { return forge::amin(*this, dims, keepdim); }
Tensor Tensor::max() const { return forge::max(*this); }
Tensor Tensor::min() const { return forge::min(*this); }
ValuesIndices Tensor::max(std::int64_t dim, bool keepdim) const { return forge::max(*this, dim, keepdim); }
ValuesIndices Tensor::min(std::int64_t dim, bool keepdim) const { return forge::min(*this, dim, keepdim); }
Tensor Tensor::argmax() const { return forge::argmax(*this); }
Tensor Tensor::argmin() const { return forge::argmin(*this); }
Tensor Tensor::argmax(std::int64_t dim, bool keepdim) const { return forge::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(std::int64_t dim, bool keepdim) const { return forge::argmin(*this, dim, keepdim); }
Tensor Tensor::var(const DimList& dims, std::int64_t correction, bool keepdim) const {
  return forge::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const DimList& dims, std::int64_t correction, bool keepdim) const {
  return forge::std(*this, dims, correction, keepdim);
}
Tensor Tensor::logsumexp(const DimList& dims, bool keepdim) const { return forge::logsumexp(*this, dims, keepdim); }
Tensor Tensor::norm(double p, const DimList& dims, bool keepdim) const { return forge::norm(*this, p, dims, keepdim); }
Tensor Tensor::all(const DimList& dims, bool keepdim) const { return forge::all(*this, dims, keepdim); }
Tensor Tensor::any(const DimList& dims, bool keepdim) const { return forge::any(*this, dims, keepdim); }
Tensor Tensor::cumsum(std::int64_t dim) const { return forge::cumsum(*this, dim); }

}  // namespace forge
