#pragma once
// The reduce family of the kernel table (backend/kernels.h): reductions over
// any set of dims, arg reductions along one dim, and cumsum, with the
// device-neutral arguments they take. Every entry is fetched with the
// input's dtype (the outputs' dtypes follow from it and the op).

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/kernels/copy.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::backend {

enum class ReduceOp { sum, mean, prod, amax, amin, all, any, norm1, norm2, var, std, logsumexp };

// One reduction over x: `shape` and `in_strides` are x's; `out_strides` are
// the output's strides over x's rank (reduced dims take any value);
// `reduced` flags the dims to reduce. `out` has the dtype the op promised
// (sum/prod of integers and bool: i64; all/any: bool; otherwise x's dtype).
// mean, norm1, norm2, var, std and logsumexp take floating x only.
struct ReduceArgs {
  Shape shape;
  Strides in_strides;
  Strides out_strides;
  bool reduced[kMaxRank] = {};
  const std::byte* in = nullptr;
  DType in_dtype = DType::f32;
  std::byte* out = nullptr;
  DType out_dtype = DType::f32;
  std::int64_t correction = 1;  // var and std
};

// Index of the largest (smallest) element along `dim` (the first among ties;
// NaN counts as the largest and the smallest), written as i64 into
// `indices`; the element itself into `values` when that is not null (same
// dtype as x). Strides of both outputs are over x's rank; dim's size is > 0.
struct ArgReduceArgs {
  Shape shape;
  Strides in_strides;
  Strides values_strides;
  Strides indices_strides;
  int dim = 0;
  const std::byte* in = nullptr;
  DType dtype = DType::f32;
  std::byte* values = nullptr;
  std::byte* indices = nullptr;
};

using ReduceFn = void(detail::DeviceRuntime& dev, ReduceOp op, const ReduceArgs& args);
using ArgReduceFn = void(detail::DeviceRuntime& dev, bool is_max, const ArgReduceArgs& args);
// out = running sum of in along dim (out's dtype: i64 for integers and bool,
// else in's).
using CumsumFn = void(detail::DeviceRuntime& dev, const Shape& shape, const Strides& in_strides,
                      const Strides& out_strides, int dim, const std::byte* in, DType in_dtype, std::byte* out,
                      DType out_dtype);

struct ReduceKernels {
  Entry<ReduceFn> reduce;         // sum, mean, prod, amax, amin, all, any, norm, var, std, logsumexp
  Entry<ArgReduceFn> arg_reduce;  // argmax, argmin, max and min along a dim
  Entry<CumsumFn> cumsum;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("reduce", k.reduce);
    f("arg_reduce", k.arg_reduce);
    f("cumsum", k.cumsum);
  }
};

}  // namespace forge::backend
