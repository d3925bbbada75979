#pragma once
// What the indexing, loss, shape, mask and attention ops share: checks on
// `_into` targets and index tensors.

#include <algorithm>
#include <cstdint>
#include <optional>

#include "core/tensor_internal.h"
#include "forge/tensor.h"

namespace forge::detail {

// out (already checked writable and of the same runtime) has exactly this shape and dtype.
inline void check_out_geometry(const char* op, const Tensor& out, const Shape& shape, DType dtype) {
  FORGE_CHECK(out.shape() == shape, shape, op, "out has shape ", out.shape(), " but the result has shape ", shape);
  FORGE_CHECK(out.dtype() == dtype, dtype, op, "out is ", dtype_name(out.dtype()), " but the result is ",
              dtype_name(dtype));
}

// Smallest and largest element offsets a tensor touches (numel > 0).
inline void element_extent(const Tensor& t, std::int64_t& lo, std::int64_t& hi) noexcept {
  lo = hi = t.offset();
  for (int d = 0; d < t.dim(); ++d) {
    const std::int64_t span = (t.shape()[d] - 1) * t.strides()[d];
    if (span < 0)
      lo += span;
    else
      hi += span;
  }
}

// For ops that read an input element after writing others (gathers, copies
// that move elements): out may not share any memory with the input.
inline void check_no_overlap(const char* op, const Tensor& out, const Tensor& in, const char* name) {
  if (out.buffer() != in.buffer() || out.numel() == 0 || in.numel() == 0) return;
  std::int64_t olo, ohi, ilo, ihi;
  element_extent(out, olo, ohi);
  element_extent(in, ilo, ihi);
  const auto eo = static_cast<std::int64_t>(out.element_size()), ei = static_cast<std::int64_t>(in.element_size());
  const bool disjoint = (ohi + 1) * eo <= ilo * ei || (ihi + 1) * ei <= olo * eo;
  FORGE_CHECK(disjoint, invalid_argument, op, "out overlaps ", name, "; write into a separate tensor");
}

inline void check_index_dtype(const char* op, const Tensor& index, const char* name) {
  FORGE_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, dtype, op, name, " must be i64 or i32, not ",
              dtype_name(index.dtype()));
}

inline void check_floating(const char* op, const Tensor& t, const char* name) {
  FORGE_CHECK(is_floating(t.dtype()), dtype, op, name, " must be a floating dtype, not ", dtype_name(t.dtype()));
}

// The multi-index of logical (row-major) position `pos` in `shape`.
inline Dims position_of(const Shape& shape, std::int64_t pos) {
  Dims idx = Dims::filled(shape.rank(), 0);
  for (int d = shape.rank() - 1; d >= 0; --d) {
    if (shape[d] == 0) continue;
    idx[d] = pos % shape[d];
    pos /= shape[d];
  }
  return idx;
}

struct BadIndex {
  std::int64_t value;
  Dims position;
};

// The index helpers the index ops and the class losses share (ops/indexing.cpp);
// `op` names the caller in errors, the kernel table's included.

// The first entry of an i64/i32 tensor, in logical order, outside [0, bound)
// and not equal to `allowed` (an ignore_index).
std::optional<BadIndex> find_bad_index(const char* op, const Tensor& index, std::int64_t bound,
                                       std::optional<std::int64_t> allowed);

// Largest entry of a non-empty i64/i32 tensor and whether any entry is negative.
std::int64_t max_index(const char* op, const Tensor& index, bool& any_negative);

// The entries of an i64/i32 tensor as contiguous i64: the tensor's own memory
// when it already is, else a copy into `scratch` (returned to the pool on scope exit).
const std::int64_t* index_values(const char* op, const Tensor& index, ScratchLease<std::int64_t>& scratch);

}  // namespace forge::detail
