// embedding, index_select, gather, scatter_add, one_hot. Indices are i64 or
// i32 and never wrap: a negative index is out of range, as in libtorch. Every
// index is checked (and a bad one named with its position) before anything
// is allocated; the kernels then trust them.

#include <algorithm>
#include <limits>

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "forge/ops.h"
#include "ops/nn_internal.h"

namespace forge {
namespace detail {

std::optional<BadIndex> find_bad_index(const char* op, const Tensor& index, std::int64_t bound,
                                       std::optional<std::int64_t> allowed) {
  if (index.numel() == 0) return std::nullopt;
  DeviceRuntime& dev = device_runtime(index);
  const std::int64_t allowed_value = allowed.value_or(0);
  std::int64_t value = 0;
  const std::int64_t pos = dev.kernels().indexing.find_bad_index.get(op, index.dtype(), dev)(
      dev, index.shape(), operand(index), bound, allowed ? &allowed_value : nullptr, &value);
  if (pos < 0) return std::nullopt;
  return BadIndex{value, position_of(index.shape(), pos)};
}

const std::int64_t* index_values(const char* op, const Tensor& index, ScratchLease<std::int64_t>& scratch) {
  if (index.dtype() == DType::i64 && index.is_contiguous())
    return reinterpret_cast<const std::int64_t*>(first_element(index));
  const auto n = static_cast<std::size_t>(index.numel());
  scratch = device_runtime(index).pool().scratch<std::int64_t>(std::max<std::size_t>(n, 1));
  if (n) {
    copy_cast(op, index, index.shape(),
              {reinterpret_cast<std::byte*>(scratch.data()), DType::i64, contiguous_strides(index.shape())},
              operand(index));
  }
  return scratch.data();
}

std::int64_t max_index(const char* op, const Tensor& index, bool& any_negative) {
  any_negative = false;
  if (index.numel() == 0) return std::numeric_limits<std::int64_t>::min();
  DeviceRuntime& dev = device_runtime(index);
  return dev.kernels().indexing.max_index.get(op, index.dtype(), dev)(dev, index.shape(), operand(index),
                                                                      &any_negative);
}

}  // namespace detail

namespace {

using detail::BadIndex;

template <typename... Args>
[[noreturn]] void fail_index(const char* op, const BadIndex& bad, const Args&... what) {
  FORGE_FAIL(out_of_range, op, "index ", bad.value, " at position ", bad.position, " is out of range for ", what...);
}

void check_pair(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  detail::check_input(op, a, an);
  detail::check_input(op, b, bn);
  detail::check_same_runtime(op, a, b);
}

void check_into_target(const char* op, const Tensor& out, const Tensor& other) {
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, other);
}

// ---- embedding ----

Shape embedding_shape(const char* op, const Tensor& weight, const Tensor& indices) {
  detail::check_index_dtype(op, indices, "indices");
  FORGE_CHECK(weight.dim() == 2, shape, op, "weight must be 2-D [rows, dim], got shape ", weight.shape());
  FORGE_CHECK(indices.dim() < kMaxRank, invalid_argument, op, "indices of rank ", indices.dim(),
              " would give a result above the maximum rank ", kMaxRank);
  if (auto bad = detail::find_bad_index(op, indices, weight.size(0), std::nullopt))
    fail_index(op, *bad, weight.size(0), " rows");
  Shape s = indices.shape();
  s.push_back(weight.size(1));
  return s;
}

// padding_idx wrapped into [0, rows), or -1 for none (weight already checked 2-D).
std::int64_t padding_row(const char* op, const Tensor& weight, std::optional<std::int64_t> padding_idx) {
  if (!padding_idx) return -1;
  const std::int64_t rows = weight.size(0), p = *padding_idx;
  FORGE_CHECK(p >= -rows && p < rows, out_of_range, op, "padding_idx ", p, " is out of range for ", rows, " rows");
  return p < 0 ? p + rows : p;
}

void embedding_kernel(const char* op, Tensor& out, const Tensor& weight, const Tensor& indices) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto take_rows = dev.kernels().indexing.take_rows.get(op, out.dtype(), dev);
  if (out.numel() == 0) return;
  ScratchLease<std::int64_t> scratch;
  const std::int64_t* rows = detail::index_values(op, indices, scratch);
  backend::RowTake geo;
  const int r = out.dim();
  for (int d = 0; d < r - 1; ++d) {
    geo.lead_shape.push_back(out.shape()[d]);
    geo.lead_strides.push_back(out.strides()[d]);
  }
  geo.row_len = out.shape()[r - 1];
  geo.out_col_stride = out.strides()[r - 1];
  geo.src_row_stride = weight.strides()[0];
  geo.src_col_stride = weight.strides()[1];
  take_rows(dev, geo, out.dtype(), rows, detail::first_element(out), detail::first_element(weight));
}

// ---- index_select ----

struct Selection {
  int dim;
  Shape shape;
};

Selection index_select_shape(const char* op, const Tensor& x, std::int64_t dim, const Tensor& index) {
  detail::check_index_dtype(op, index, "index");
  FORGE_CHECK(index.dim() <= 1, shape, op, "index must be 0-D or 1-D, got shape ", index.shape());
  const int d = wrap_dim(dim, x.dim(), op);
  FORGE_CHECK(x.dim() > 0 || index.numel() == 1, shape, op, "a 0-D x takes exactly one index, got ", index.numel());
  const std::int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  if (auto bad = detail::find_bad_index(op, index, size, std::nullopt))
    fail_index(op, *bad, "dimension ", d, " of size ", size);
  Shape s = x.shape();
  if (x.dim() > 0) s[d] = index.numel();
  return {d, s};
}

void index_select_kernel(const char* op, Tensor& out, const Tensor& x, int d, const Tensor& index) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto mapped_copy = dev.kernels().indexing.mapped_copy.get(op, out.dtype(), dev);
  if (out.numel() == 0) return;
  if (x.dim() == 0) {
    detail::copy_cast(op, out, out.shape(), detail::operand(out), detail::operand(x));
    return;
  }
  ScratchLease<std::int64_t> scratch;
  const std::int64_t* const values = detail::index_values(op, index, scratch);
  const std::int64_t* maps[kMaxRank] = {};
  maps[d] = values;
  mapped_copy(dev, out.shape(), detail::operand(out), detail::operand(x), maps, 0, nullptr);
}

// ---- gather / scatter_add ----

int gather_dim(const char* op, const Tensor& x, std::int64_t dim, const Tensor& index) {
  detail::check_index_dtype(op, index, "index");
  FORGE_CHECK(index.dim() == x.dim(), shape, op, "index has rank ", index.dim(), " but x has rank ", x.dim());
  const int d = wrap_dim(dim, x.dim(), op);
  for (int k = 0; k < x.dim(); ++k) {
    FORGE_CHECK(k == d || index.shape()[k] <= x.shape()[k], shape, op, "index of shape ", index.shape(),
                " is larger than x of shape ", x.shape(), " in dimension ", k);
  }
  const std::int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  if (auto bad = detail::find_bad_index(op, index, size, std::nullopt))
    fail_index(op, *bad, "dimension ", d, " of size ", size);
  return d;
}

// x's operand over index's shape, with the gathered dim's stride left to the kernel.
backend::Operand along(const Tensor& t, int d) {
  backend::Operand o = detail::operand(t);
  if (t.dim() > 0) o.strides[d] = 0;
  return o;
}

void gather_kernel(const char* op, Tensor& out, const Tensor& x, int d, const Tensor& index) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto gather = dev.kernels().indexing.gather.get(op, out.dtype(), dev);
  if (out.numel() == 0) return;
  gather(dev, index.shape(), detail::operand(out), detail::operand(index), along(x, d),
         x.dim() == 0 ? 0 : x.strides()[d]);
}

int scatter_dim(const char* op, const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_index_dtype(op, index, "index");
  FORGE_CHECK(src.dtype() == x.dtype(), dtype, op, "src is ", dtype_name(src.dtype()), " but x is ",
              dtype_name(x.dtype()));
  FORGE_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), shape, op,
              "x, index and src must have the same rank, got ", x.shape(), ", ", index.shape(), " and ", src.shape());
  const int d = wrap_dim(dim, x.dim(), op);
  for (int k = 0; k < x.dim(); ++k) {
    FORGE_CHECK(index.shape()[k] <= src.shape()[k] && (k == d || index.shape()[k] <= x.shape()[k]), shape, op,
                "index of shape ", index.shape(), " is larger than src ", src.shape(), " or x ", x.shape(),
                " in dimension ", k);
  }
  const std::int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  if (auto bad = detail::find_bad_index(op, index, size, std::nullopt))
    fail_index(op, *bad, "dimension ", d, " of size ", size);
  return d;
}

void scatter_add_kernel(const char* op, Tensor& out, const Tensor& x, int d, const Tensor& index, const Tensor& src) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto scatter_add = dev.kernels().indexing.scatter_add.get(op, out.dtype(), dev);
  if (!(out.buffer() == x.buffer() && out.offset() == x.offset() && out.strides() == x.strides()))
    detail::copy_cast(op, out, x.shape(), detail::operand(out), detail::operand(x));
  if (index.numel() == 0) return;
  if (index.dim() == 0) {  // one element: a rank-1 loop of length 1
    const Shape one{1};
    const backend::Operand o{detail::first_element(out), out.dtype(), Strides{0}};
    const backend::Operand i{detail::first_element(index), index.dtype(), Strides{0}};
    const backend::Operand s{detail::first_element(src), src.dtype(), Strides{0}};
    scatter_add(dev, one, 0, o, i, s, 0);
    return;
  }
  scatter_add(dev, index.shape(), d, along(out, d), detail::operand(index), detail::operand(src), out.strides()[d]);
}

// ---- one_hot ----

std::int64_t one_hot_classes(const char* op, const Tensor& indices, std::int64_t num_classes) {
  detail::check_index_dtype(op, indices, "indices");
  FORGE_CHECK(num_classes >= -1, invalid_argument, op, "num_classes must be -1 or at least 0, got ", num_classes);
  FORGE_CHECK(indices.dim() < kMaxRank, invalid_argument, op, "indices of rank ", indices.dim(),
              " would give a result above the maximum rank ", kMaxRank);
  if (num_classes == -1) {
    FORGE_CHECK(indices.numel() > 0, invalid_argument, op,
                "cannot infer the number of classes from an empty tensor; pass num_classes");
    bool negative = false;
    const std::int64_t m = detail::max_index(op, indices, negative);
    if (negative) {
      fail_index(op, *detail::find_bad_index(op, indices, std::numeric_limits<std::int64_t>::max(), std::nullopt),
                 "classes");
    }
    FORGE_CHECK(m < std::numeric_limits<std::int64_t>::max(), out_of_range, op, "index ", m, " is too large");
    num_classes = m + 1;
  } else if (auto bad = detail::find_bad_index(op, indices, num_classes, std::nullopt)) {
    fail_index(op, *bad, num_classes, " classes");
  }
  return num_classes;
}

void one_hot_kernel(const char* op, Tensor& out, const Tensor& indices) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto one_hot = dev.kernels().indexing.one_hot.get(op, out.dtype(), dev);
  detail::fill(op, out, out.shape(), detail::operand(out), 0.0);
  if (indices.numel() == 0 || out.numel() == 0) return;
  ScratchLease<std::int64_t> scratch;
  const std::int64_t* values = detail::index_values(op, indices, scratch);
  one_hot(dev, out.shape(), detail::operand(out), values);
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx) try {
  const char* op = "embedding";
  check_pair(op, weight, "weight", indices, "indices");
  const Shape shape = embedding_shape(op, weight, indices);
  const std::int64_t padding = padding_row(op, weight, padding_idx);
  Tensor out = detail::allocate(weight.runtime(), shape, weight.dtype(), op);
  embedding_kernel(op, out, weight, indices);
  detail::adopt_output(out);
  FORGE_RECORD(embedding, out, weight, indices, padding);
  return out;
}
FORGE_CATCH_OOM("embedding")

Tensor& embedding_into(Tensor& out, const Tensor& weight, const Tensor& indices) try {
  const char* op = "embedding_into";
  check_pair(op, weight, "weight", indices, "indices");
  check_into_target(op, out, weight);
  detail::check_out_geometry(op, out, embedding_shape(op, weight, indices), weight.dtype());
  detail::check_no_overlap(op, out, weight, "weight");
  detail::check_no_overlap(op, out, indices, "indices");
  embedding_kernel(op, out, weight, indices);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("embedding_into")

Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index) try {
  const char* op = "index_select";
  check_pair(op, x, "x", index, "index");
  const Selection sel = index_select_shape(op, x, dim, index);
  Tensor out = detail::allocate(x.runtime(), sel.shape, x.dtype(), op);
  index_select_kernel(op, out, x, sel.dim, index);
  detail::adopt_output(out);
  FORGE_RECORD(index_select, out, x, dim, index);
  return out;
}
FORGE_CATCH_OOM("index_select")

Tensor& index_select_into(Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index) try {
  const char* op = "index_select_into";
  check_pair(op, x, "x", index, "index");
  check_into_target(op, out, x);
  const Selection sel = index_select_shape(op, x, dim, index);
  detail::check_out_geometry(op, out, sel.shape, x.dtype());
  detail::check_no_overlap(op, out, x, "x");
  detail::check_no_overlap(op, out, index, "index");
  index_select_kernel(op, out, x, sel.dim, index);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("index_select_into")

Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index) try {
  const char* op = "gather";
  check_pair(op, x, "x", index, "index");
  const int d = gather_dim(op, x, dim, index);
  Tensor out = detail::allocate(x.runtime(), index.shape(), x.dtype(), op);
  gather_kernel(op, out, x, d, index);
  detail::adopt_output(out);
  FORGE_RECORD(gather, out, x, d, index);
  return out;
}
FORGE_CATCH_OOM("gather")

Tensor& gather_into(Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index) try {
  const char* op = "gather_into";
  check_pair(op, x, "x", index, "index");
  check_into_target(op, out, x);
  const int d = gather_dim(op, x, dim, index);
  detail::check_out_geometry(op, out, index.shape(), x.dtype());
  detail::check_no_overlap(op, out, x, "x");
  detail::check_no_overlap(op, out, index, "index");
  gather_kernel(op, out, x, d, index);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("gather_into")

Tensor scatter_add(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src) try {
  const char* op = "scatter_add";
  check_pair(op, x, "x", index, "index");
  check_pair(op, x, "x", src, "src");
  const int d = scatter_dim(op, x, dim, index, src);
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  scatter_add_kernel(op, out, x, d, index, src);
  detail::adopt_output(out);
  FORGE_RECORD(scatter_add, out, x, d, index, src);
  return out;
}
FORGE_CATCH_OOM("scatter_add")

Tensor& scatter_add_into(Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src) try {
  const char* op = "scatter_add_into";
  check_pair(op, x, "x", index, "index");
  check_pair(op, x, "x", src, "src");
  check_into_target(op, out, x);
  const int d = scatter_dim(op, x, dim, index, src);
  detail::check_out_geometry(op, out, x.shape(), x.dtype());
  detail::check_no_partial_overlap(op, out, x, "x");  // out may be x itself: an in-place scatter_add
  detail::check_no_overlap(op, out, index, "index");
  detail::check_no_overlap(op, out, src, "src");
  scatter_add_kernel(op, out, x, d, index, src);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("scatter_add_into")

Tensor one_hot(const Tensor& indices, std::int64_t num_classes) try {
  const char* op = "one_hot";
  detail::check_input(op, indices, "indices");
  const std::int64_t classes = one_hot_classes(op, indices, num_classes);
  Shape shape = indices.shape();
  shape.push_back(classes);
  Tensor out = detail::allocate(indices.runtime(), shape, DType::i64, op);
  one_hot_kernel(op, out, indices);
  detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM("one_hot")

Tensor& one_hot_into(Tensor& out, const Tensor& indices, std::int64_t num_classes) try {
  const char* op = "one_hot_into";
  detail::check_input(op, indices, "indices");
  check_into_target(op, out, indices);
  const std::int64_t classes = one_hot_classes(op, indices, num_classes);
  Shape shape = indices.shape();
  shape.push_back(classes);
  detail::check_out_geometry(op, out, shape, DType::i64);
  detail::check_no_overlap(op, out, indices, "indices");
  one_hot_kernel(op, out, indices);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("one_hot_into")

Tensor Tensor::index_select(std::int64_t dim, const Tensor& index) const {
  return forge::index_select(*this, dim, index);
}
Tensor Tensor::gather(std::int64_t dim, const Tensor& index) const { return forge::gather(*this, dim, index); }

}  // namespace forge
