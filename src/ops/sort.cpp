// Sorting, selection and sampling ops (forge/ops/sort.h): check the
// arguments, allocate (or check the caller's outputs), then run the sort
// family's kernels (backend/kernels/sort.h) of the output's device. A 0-d
// tensor sorts as one element and takes dim 0 or -1, as in libtorch.
// multinomial's weights are checked by its kernel, which reads every row
// before it draws: a refused call leaves the context's generator untouched.

#include "autograd/rules/sort.h"

#include <limits>
#include <optional>
#include <string>

#include "autograd/record.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"
#include "ops/nn_internal.h"

namespace forge {
namespace {

// ---- sort, argsort, topk ----

struct SelectPlan {
  int dim = 0;
  std::int64_t k = 0;
  Shape out_shape;  // x's shape with k along dim
};

SelectPlan select_plan(const char* op, const Tensor& x, std::int64_t dim, std::optional<std::int64_t> k) {
  SelectPlan p;
  p.dim = wrap_dim(dim, x.dim(), op);
  const std::int64_t size = x.dim() == 0 ? 1 : x.shape()[p.dim];
  p.k = k.value_or(size);
  FORGE_CHECK(p.k >= 0 && p.k <= size, out_of_range, op, "k = ", p.k, " is out of range for dim ", p.dim, " of size ",
              size, " (shape ", x.shape(), ")");
  p.out_shape = x.shape();
  if (x.dim() > 0) p.out_shape[p.dim] = p.k;
  return p;
}

// Runs the sort or topk entry: values may be null (argsort).
void run_select(const char* op, bool topk, const Tensor& x, const SelectPlan& p, bool descending, bool sorted,
                Tensor* values, Tensor& indices) {
  if (x.numel() == 0 || p.k == 0) return;
  backend::SortArgs a;
  const bool scalar = x.dim() == 0;
  a.shape = scalar ? Shape{1} : x.shape();
  a.dim = p.dim;
  a.in = detail::first_element(x);
  a.dtype = x.dtype();
  a.in_strides = scalar ? Strides{1} : x.strides();
  if (values) {
    a.values = detail::first_element(*values);
    a.values_strides = scalar ? Strides{1} : values->strides();
  }
  a.indices = detail::first_element(indices);
  a.indices_strides = scalar ? Strides{1} : indices.strides();
  a.k = p.k;
  a.descending = descending;
  a.sorted = sorted;
  detail::DeviceRuntime& dev = detail::device_runtime(indices);
  const backend::SortKernels& k = dev.kernels().sort;
  (topk ? k.topk : k.sort).get(op, x.dtype(), dev)(dev, a);
}

// Fresh values and indices of x selected along the plan.
std::tuple<Tensor, Tensor> select_new(const char* op, bool topk, const Tensor& x, const SelectPlan& p, bool descending,
                                      bool sorted) {
  Tensor values = detail::allocate(x.runtime(), p.out_shape, x.dtype(), op);
  Tensor indices = detail::allocate(x.runtime(), p.out_shape, DType::i64, op);
  run_select(op, topk, x, p, descending, sorted, &values, indices);
  detail::adopt_output(values);
  detail::adopt_output(indices);
  return {std::move(values), std::move(indices)};
}

// The checks of an _into target: writable, the input's context, the result's
// shape and dtype, and no memory shared with the input.
void check_target(const char* op, const Tensor& out, const char* name, const Tensor& in, const char* in_name,
                  const Shape& shape, DType dtype) {
  detail::check_writable(op, out, name);
  detail::check_same_runtime(op, out, in);
  FORGE_CHECK(out.shape() == shape, shape, op, name, " has shape ", out.shape(), " but the result has shape ", shape);
  FORGE_CHECK(out.dtype() == dtype, dtype, op, name, " is ", dtype_name(out.dtype()), " but the result is ",
              dtype_name(dtype));
  detail::check_no_overlap(op, out, in, in_name);
}

std::tuple<Tensor&, Tensor&> select_into(const char* op, bool topk, Tensor& values, Tensor& indices, const Tensor& x,
                                         const SelectPlan& p, bool descending, bool sorted) {
  check_target(op, values, "values", x, "x", p.out_shape, x.dtype());
  check_target(op, indices, "indices", x, "x", p.out_shape, DType::i64);
  detail::check_no_overlap(op, indices, values, "values");
  run_select(op, topk, x, p, descending, sorted, &values, indices);
  values.buffer()->bump_version();
  indices.buffer()->bump_version();
  return {values, indices};
}

// ---- multinomial ----

// The shape of the samples, after checking probs and num_samples.
Shape samples_shape(const char* op, const Tensor& probs, std::int64_t n, bool replacement) {
  FORGE_CHECK(is_floating(probs.dtype()), dtype, op, "probs must be a floating dtype, not ", dtype_name(probs.dtype()));
  FORGE_CHECK(probs.dim() == 1 || probs.dim() == 2, shape, op, "probs must be [V] or [B, V], got shape ",
              probs.shape());
  const std::int64_t categories = probs.shape().back();
  FORGE_CHECK(categories > 0, invalid_argument, op, "probs has no categories (shape ", probs.shape(), ")");
  FORGE_CHECK(categories <= (std::int64_t{1} << 24), invalid_argument, op, "probs has ", categories,
              " categories; at most 2^24 = 16777216 are supported, as in libtorch");
  FORGE_CHECK(n > 0, invalid_argument, op, "num_samples must be positive, got ", n);
  FORGE_CHECK(replacement || n <= categories, invalid_argument, op, "cannot draw ", n,
              " samples without replacement from ", categories, " categories");
  return probs.dim() == 1 ? Shape{n} : Shape{probs.shape()[0], n};
}

[[noreturn]] void refuse_weights(const char* op, const Tensor& probs, const backend::MultinomialCheck& c,
                                 std::int64_t n) {
  const std::string row = probs.dim() == 2 ? " row " + std::to_string(c.row) : std::string();
  switch (c.problem) {
    case backend::BadWeights::negative:
    case backend::BadWeights::non_finite:
      if (c.column >= 0)
        FORGE_FAIL(invalid_argument, op, "probs", row, " has weight ", c.value, " at category ", c.column,
                   "; weights must be finite and non-negative");
      FORGE_FAIL(invalid_argument, op, "probs", row, " sums to ", c.value, "; the sum must be finite");
    case backend::BadWeights::zero_sum:
      FORGE_FAIL(invalid_argument, op, "probs", row, " sums to ", c.value,
                 "; an invalid distribution (the sum must be positive)");
    case backend::BadWeights::too_few_nonzero:
      FORGE_FAIL(invalid_argument, op, "probs", row, " has ", c.nonzero, " positive weights, fewer than the ", n,
                 " samples drawn without replacement");
    case backend::BadWeights::none:
      break;
  }
  FORGE_FAIL(internal, op, "unexpected weights check");
}

void run_multinomial(const char* op, Tensor& out, const Tensor& probs, std::int64_t n, bool replacement) {
  if (out.numel() == 0) return;
  const bool batched = probs.dim() == 2;
  backend::MultinomialArgs a;
  a.rows = batched ? probs.shape()[0] : 1;
  a.categories = probs.shape().back();
  a.probs = detail::first_element(probs);
  a.dtype = probs.dtype();
  a.row_stride = batched ? probs.strides()[0] : 0;
  a.col_stride = probs.strides().back();
  a.out = detail::first_element(out);
  a.out_row_stride = batched ? out.strides()[0] : 0;
  a.out_col_stride = out.strides().back();
  a.samples = n;
  a.replacement = replacement;
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::MultinomialFn* const kernel = dev.kernels().sort.multinomial.get(op, probs.dtype(), dev);
  const detail::Generator::Lease lease = probs.runtime().generator().lease(op);
  const backend::MultinomialCheck check = kernel(dev, a, &*lease);
  if (check.problem != backend::BadWeights::none) refuse_weights(op, probs, check, n);
}

// ---- searchsorted ----

// The result's shape (values'), after checking that the sequence fits the values.
void check_search(const char* op, const Tensor& sequence, const Tensor& values) {
  FORGE_CHECK(sequence.dtype() == values.dtype(), dtype, op, "sorted_sequence is ", dtype_name(sequence.dtype()),
              " but values is ", dtype_name(values.dtype()), "; convert one to the other's dtype");
  FORGE_CHECK(sequence.dim() >= 1, shape, op, "sorted_sequence must have at least one dimension, got shape ",
              sequence.shape());
  if (sequence.dim() == 1) return;
  bool leading_match = values.dim() == sequence.dim();
  for (int d = 0; leading_match && d + 1 < sequence.dim(); ++d)
    leading_match = sequence.shape()[d] == values.shape()[d];
  FORGE_CHECK(leading_match, shape, op, "sorted_sequence ", sequence.shape(),
              " must be 1-D or have the leading dims of values ", values.shape(), " (all but the last)");
}

void run_search(const char* op, Tensor& out, const Tensor& sequence, const Tensor& values, bool right) {
  if (out.numel() == 0) return;
  backend::SearchArgs a;
  const bool scalar = values.dim() == 0;
  a.shape = scalar ? Shape{1} : values.shape();
  a.values = detail::first_element(values);
  a.values_strides = scalar ? Strides{1} : values.strides();
  a.dtype = values.dtype();
  a.sequence = detail::first_element(sequence);
  a.sequence_strides = Strides::filled(a.shape.rank(), 0);
  if (sequence.dim() > 1)
    for (int d = 0; d + 1 < sequence.dim(); ++d) a.sequence_strides[d] = sequence.strides()[d];
  a.sequence_len = sequence.shape().back();
  a.sequence_step = sequence.strides().back();
  a.out = detail::first_element(out);
  a.out_strides = scalar ? Strides{1} : out.strides();
  a.out_dtype = out.dtype();
  a.right = right;
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  dev.kernels().sort.searchsorted.get(op, values.dtype(), dev)(dev, a);
}

void check_index_width(const char* op, const Tensor& sequence, DType out_dtype) {
  FORGE_CHECK(out_dtype == DType::i64 || sequence.shape().back() < std::numeric_limits<std::int32_t>::max(),
              out_of_range, op, "sorted_sequence rows of ", sequence.shape().back(),
              " elements do not fit i32 indices; use i64");
}

}  // namespace

std::tuple<Tensor, Tensor> topk(const Tensor& x, std::int64_t k, std::int64_t dim, bool largest, bool sorted) try {
  const char* op = "topk";
  detail::check_input(op, x, "x");
  const SelectPlan p = select_plan(op, x, dim, k);
  auto r = select_new(op, true, x, p, largest, sorted);
  FORGE_RECORD(topk, std::get<0>(r), x, p.dim, std::get<1>(r));
  return r;
}
FORGE_CATCH_OOM("topk")

std::tuple<Tensor, Tensor> sort(const Tensor& x, std::int64_t dim, bool descending, bool /*stable*/) try {
  const char* op = "sort";
  detail::check_input(op, x, "x");
  const SelectPlan p = select_plan(op, x, dim, std::nullopt);
  auto r = select_new(op, false, x, p, descending, true);
  FORGE_RECORD(sort, std::get<0>(r), x, p.dim, std::get<1>(r));
  return r;
}
FORGE_CATCH_OOM("sort")

Tensor argsort(const Tensor& x, std::int64_t dim, bool descending, bool /*stable*/) try {
  const char* op = "argsort";
  detail::check_input(op, x, "x");
  const SelectPlan p = select_plan(op, x, dim, std::nullopt);
  Tensor indices = detail::allocate(x.runtime(), p.out_shape, DType::i64, op);
  run_select(op, false, x, p, descending, true, nullptr, indices);
  detail::adopt_output(indices);
  return indices;
}
FORGE_CATCH_OOM("argsort")

Tensor multinomial(const Tensor& probs, std::int64_t num_samples, bool replacement) try {
  const char* op = "multinomial";
  detail::check_input(op, probs, "probs");
  const Shape shape = samples_shape(op, probs, num_samples, replacement);
  Tensor out = detail::allocate(probs.runtime(), shape, DType::i64, op);
  run_multinomial(op, out, probs, num_samples, replacement);
  detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM("multinomial")

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool right, bool out_int32) try {
  const char* op = "searchsorted";
  detail::check_input(op, sorted_sequence, "sorted_sequence");
  detail::check_input(op, values, "values");
  detail::check_same_runtime(op, sorted_sequence, values);
  check_search(op, sorted_sequence, values);
  const DType dtype = out_int32 ? DType::i32 : DType::i64;
  check_index_width(op, sorted_sequence, dtype);
  Tensor out = detail::allocate(values.runtime(), values.shape(), dtype, op);
  run_search(op, out, sorted_sequence, values, right);
  detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM("searchsorted")

std::tuple<Tensor&, Tensor&> topk_into(Tensor& values, Tensor& indices, const Tensor& x, std::int64_t k,
                                       std::int64_t dim, bool largest, bool sorted) try {
  const char* op = "topk_into";
  detail::check_input(op, x, "x");
  return select_into(op, true, values, indices, x, select_plan(op, x, dim, k), largest, sorted);
}
FORGE_CATCH_OOM("topk_into")

std::tuple<Tensor&, Tensor&> sort_into(Tensor& values, Tensor& indices, const Tensor& x, std::int64_t dim,
                                       bool descending, bool /*stable*/) try {
  const char* op = "sort_into";
  detail::check_input(op, x, "x");
  return select_into(op, false, values, indices, x, select_plan(op, x, dim, std::nullopt), descending, true);
}
FORGE_CATCH_OOM("sort_into")

Tensor& argsort_into(Tensor& out, const Tensor& x, std::int64_t dim, bool descending, bool /*stable*/) try {
  const char* op = "argsort_into";
  detail::check_input(op, x, "x");
  const SelectPlan p = select_plan(op, x, dim, std::nullopt);
  check_target(op, out, "out", x, "x", p.out_shape, DType::i64);
  run_select(op, false, x, p, descending, true, nullptr, out);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("argsort_into")

Tensor& multinomial_into(Tensor& out, const Tensor& probs, std::int64_t num_samples, bool replacement) try {
  const char* op = "multinomial_into";
  detail::check_input(op, probs, "probs");
  const Shape shape = samples_shape(op, probs, num_samples, replacement);
  check_target(op, out, "out", probs, "probs", shape, DType::i64);
  run_multinomial(op, out, probs, num_samples, replacement);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("multinomial_into")

Tensor& searchsorted_into(Tensor& out, const Tensor& sorted_sequence, const Tensor& values, bool right) try {
  const char* op = "searchsorted_into";
  detail::check_input(op, sorted_sequence, "sorted_sequence");
  detail::check_input(op, values, "values");
  detail::check_same_runtime(op, sorted_sequence, values);
  check_search(op, sorted_sequence, values);
  FORGE_CHECK(out.dtype() == DType::i64 || out.dtype() == DType::i32, dtype, op, "out must be i64 or i32, not ",
              dtype_name(out.dtype()));
  check_index_width(op, sorted_sequence, out.dtype());
  check_target(op, out, "out", values, "values", values.shape(), out.dtype());
  detail::check_no_overlap(op, out, sorted_sequence, "sorted_sequence");
  run_search(op, out, sorted_sequence, values, right);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("searchsorted_into")

}  // namespace forge
