// Dataset, HostArray and TensorDataset (include/forge/data/dataset.h).
//
// Note [Dataset examples are host arrays]
// A DataLoader calls Dataset::fill on worker threads, and one thread drives
// an ExecContext (DESIGN §5): its pool, scopes and tape are not for a second
// thread, so a worker may not make a Tensor. An example is therefore plain
// host memory (HostArray: shape, dtype, bytes) that the loader owns, one per
// row of each batch slot, and reuses: fill() resets it to the example's shape
// and writes the bytes, and once the slot has held a batch this costs no
// allocation. The caller's thread then makes the batch's pool tensors (the
// collate: one memcpy per row for the default one). Two alternatives were
// weighed. Returning a fresh Example by value allocates per example on every
// batch forever. Writing straight into a staging row of the batch saves that
// copy but fixes every example's shape before the dataset has said it, which
// rules out a custom collate over examples of varying shape (padding text,
// say). The copy is a memcpy of rows the gather has just touched.

#include "forge/data/dataset.h"

#include <cstring>

#include "core/tensor_internal.h"

namespace forge::data {
namespace {

constexpr const char* kTensorDataset = "TensorDataset";

std::size_t row_bytes(const Tensor& t) {
  if (!t.defined()) return 0;
  std::size_t n = t.element_size();
  for (int d = 1; d < t.dim(); ++d) n *= static_cast<std::size_t>(t.size(d));
  return n;
}

Shape row_shape(const Tensor& t) {
  Shape shape = t.shape();
  shape.erase(0);
  return shape;
}

}  // namespace

std::byte* HostArray::reset(const Shape& shape, DType dtype) {
  for (std::int64_t d : shape) FORGE_CHECK(d >= 0, invalid_argument, "HostArray", "negative extent in shape ", shape);
  bytes_.resize(static_cast<std::size_t>(shape.numel()) * dtype_size(dtype));  // keeps its capacity
  shape_ = shape;
  dtype_ = dtype;
  defined_ = true;
  return bytes_.data();
}

void HostArray::check_type(DType wanted) const {
  FORGE_CHECK(defined_, invalid_argument, "HostArray", "the array is undefined");
  FORGE_CHECK(wanted == dtype_, dtype, "HostArray", "elements of ", dtype_name(wanted), " asked of a ",
              dtype_name(dtype_), " array");
}

Example Dataset::get(std::int64_t i) const {
  const std::int64_t n = size();
  FORGE_CHECK(i >= 0 && i < n, out_of_range, "Dataset", "index ", i, " is out of range for a dataset of ", n,
              " examples");
  Example out;
  fill(i, out);
  return out;
}

namespace detail {

void check_dataset_tensors(const char* op, const Tensor& inputs, const Tensor& targets) {
  FORGE_CHECK(inputs.defined(), invalid_argument, op, "inputs are undefined");
  FORGE_CHECK(inputs.dim() >= 1, shape, op, "inputs need a leading sample dim, got shape ", inputs.shape());
  if (!targets.defined()) return;
  FORGE_CHECK(&targets.runtime() == &inputs.runtime(), device, op, "inputs and targets belong to two contexts");
  FORGE_CHECK(targets.dim() >= 1 && targets.size(0) == inputs.size(0), shape, op, "targets of shape ", targets.shape(),
              " do not match ", inputs.size(0), " inputs of shape ", inputs.shape());
}

}  // namespace detail

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) try {
  detail::check_dataset_tensors(kTensorDataset, inputs, targets);
  // Read on the host (a device tensor is copied back once), packed so that a
  // row is one memcpy.
  inputs_ = forge::detail::packed_where_it_is(inputs.cpu(), kTensorDataset);
  if (targets.defined()) targets_ = forge::detail::packed_where_it_is(targets.cpu(), kTensorDataset);
  size_ = inputs_.size(0);
  auto rows_of = [](const Tensor& t) {
    Rows rows;
    if (!t.defined()) return rows;
    rows.defined = true;
    rows.base = t.numel() > 0 ? static_cast<const std::byte*>(t.raw_data(kTensorDataset)) : nullptr;
    rows.row_bytes = row_bytes(t);
    rows.row_shape = row_shape(t);
    rows.dtype = t.dtype();
    return rows;
  };
  input_rows_ = rows_of(inputs_);
  target_rows_ = rows_of(targets_);
}
FORGE_CATCH_OOM(kTensorDataset)

void TensorDataset::Rows::copy(std::int64_t i, HostArray& out) const {
  std::byte* to = out.reset(row_shape, dtype);
  if (row_bytes > 0) std::memcpy(to, base + static_cast<std::size_t>(i) * row_bytes, row_bytes);
}

void TensorDataset::fill(std::int64_t i, Example& out) const {
  input_rows_.copy(i, out.input);
  if (target_rows_.defined)
    target_rows_.copy(i, out.target);
  else
    out.target.clear();
}

}  // namespace forge::data
