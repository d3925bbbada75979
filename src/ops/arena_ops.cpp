// Calls whose output size only the call knows. Each opens an ArenaCall (which
// checks the arena and rewinds it), validates its inputs, sizes every output
// first and reserves them together, so a steady loop allocates once.

#include <cstring>
#include <vector>

#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge {
namespace {

// A packed pool temporary holding `t` broadcast to `shape`, converted to `dtype`.
Tensor packed(const Tensor& t, const Shape& shape, DType dtype) {
  Tensor out = detail::allocate(t.runtime(), shape, dtype);
  cpu::copy_cast(t.runtime(), shape, detail::operand(out), detail::operand_broadcast(t, shape));
  return out;
}

void check_mask(const char* op, const Tensor& mask) {
  FORGE_CHECK(mask.dtype() == DType::boolean, dtype, op, "mask must be bool, got ", dtype_name(mask.dtype()));
}

void check_pair(const char* op, const Tensor& x, const Tensor& mask) {
  detail::check_input(op, x, "x");
  detail::check_input(op, mask, "mask");
  detail::check_same_runtime(op, x, mask);
  check_mask(op, mask);
}

std::size_t bytes_of(std::int64_t count, DType dtype) {
  return (static_cast<std::size_t>(count) * dtype_size(dtype) + 63) / 64 * 64;
}

}  // namespace

Tensor masked_select(const Tensor& x, const Tensor& mask, Arena* arena) {
  const char* op = "masked_select";
  check_pair(op, x, mask);
  ArenaCall call(op, arena, x.runtime(), {x, mask});
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), op);
  const Tensor m = packed(mask, shape, DType::boolean);
  const Tensor v = packed(x, shape, x.dtype());
  const auto* flags = reinterpret_cast<const bool*>(detail::first_element(m));
  const std::int64_t n = shape.numel();
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) count += flags[i];
  Tensor out = call.allocate(Shape{count}, x.dtype());
  const std::size_t es = x.element_size();
  std::byte* dst = detail::first_element(out);
  const std::byte* src = detail::first_element(v);
  for (std::int64_t i = 0; i < n; ++i)
    if (flags[i]) {
      std::memcpy(dst, src + i * static_cast<std::int64_t>(es), es);
      dst += es;
    }
  call.commit();
  return out;
}

Tensor nonzero(const Tensor& x, Arena* arena) {
  const char* op = "nonzero";
  detail::check_input(op, x, "x");
  ArenaCall call(op, arena, x.runtime(), {x});
  const Tensor m = packed(x, x.shape(), DType::boolean);
  const auto* flags = reinterpret_cast<const bool*>(detail::first_element(m));
  const std::int64_t n = x.numel();
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) count += flags[i];
  const int rank = x.dim();
  Tensor out = call.allocate(Shape{count, rank}, DType::i64);
  auto* idx = reinterpret_cast<std::int64_t*>(detail::first_element(out));
  for (std::int64_t i = 0; i < n; ++i) {
    if (!flags[i]) continue;
    std::int64_t rest = i;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = rest % x.shape()[d];
      rest /= x.shape()[d];
    }
    idx += rank;
  }
  call.commit();
  return out;
}

RowsView rows_where(const Tensor& x, const Tensor& mask, Arena* arena) {
  const char* op = "rows_where";
  check_pair(op, x, mask);
  ArenaCall call(op, arena, x.runtime(), {x, mask});
  FORGE_CHECK(x.dim() == 2, shape, op, "x must be [N, D], got ", x.shape());
  FORGE_CHECK(mask.dim() == 1 && mask.size(0) == x.size(0), shape, op, "mask must be [", x.size(0), "], got ",
              mask.shape());
  const Tensor m = packed(mask, mask.shape(), DType::boolean);
  const Tensor v = packed(x, x.shape(), x.dtype());
  const auto* flags = reinterpret_cast<const bool*>(detail::first_element(m));
  const std::int64_t rows = x.size(0), cols = x.size(1);
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < rows; ++i) count += flags[i];
  Tensor out = call.allocate(Shape{count, cols}, x.dtype());
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * x.element_size();
  std::byte* dst = detail::first_element(out);
  for (std::int64_t i = 0; i < rows; ++i)
    if (flags[i]) {
      std::memcpy(dst, detail::first_element(v) + static_cast<std::size_t>(i) * row_bytes, row_bytes);
      dst += row_bytes;
    }
  call.commit();
  return RowsView(std::move(out));
}

TapeView nonzero_per_row(const Tensor& mask, Arena* arena) {
  const char* op = "nonzero_per_row";
  detail::check_input(op, mask, "mask");
  check_mask(op, mask);
  ArenaCall call(op, arena, mask.runtime(), {mask});
  FORGE_CHECK(mask.dim() == 2, shape, op, "mask must be [B, T], got ", mask.shape());
  const Tensor m = packed(mask, mask.shape(), DType::boolean);
  const auto* flags = reinterpret_cast<const bool*>(detail::first_element(m));
  const std::int64_t items = mask.size(0), width = mask.size(1);
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < items * width; ++i) total += flags[i];
  call.reserve(bytes_of(total, DType::i64) + bytes_of(items + 1, DType::i64));
  Tensor values = call.allocate(Shape{total}, DType::i64);
  Tensor offsets = call.allocate(Shape{items + 1}, DType::i64);
  auto* val = reinterpret_cast<std::int64_t*>(detail::first_element(values));
  auto* off = reinterpret_cast<std::int64_t*>(detail::first_element(offsets));
  std::int64_t k = 0;
  for (std::int64_t b = 0; b < items; ++b) {
    off[b] = k;
    for (std::int64_t t = 0; t < width; ++t)
      if (flags[b * width + t]) val[k++] = t;
  }
  off[items] = k;
  call.commit();
  return TapeView(std::move(values), std::move(offsets));
}

RowsTapeView rows_where_per_item(const Tensor& x, const Tensor& mask, Arena* arena) {
  const char* op = "rows_where_per_item";
  check_pair(op, x, mask);
  ArenaCall call(op, arena, x.runtime(), {x, mask});
  FORGE_CHECK(x.dim() == 3, shape, op, "x must be [B, T, D], got ", x.shape());
  FORGE_CHECK(mask.dim() == 2 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1), shape, op, "mask must be [",
              x.size(0), ", ", x.size(1), "], got ", mask.shape());
  const Tensor m = packed(mask, mask.shape(), DType::boolean);
  const Tensor v = packed(x, x.shape(), x.dtype());
  const auto* flags = reinterpret_cast<const bool*>(detail::first_element(m));
  const std::int64_t items = x.size(0), width = x.size(1), cols = x.size(2);
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < items * width; ++i) total += flags[i];
  call.reserve(bytes_of(total * cols, x.dtype()) + bytes_of(items + 1, DType::i64));
  Tensor rows = call.allocate(Shape{total, cols}, x.dtype());
  Tensor offsets = call.allocate(Shape{items + 1}, DType::i64);
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * x.element_size();
  std::byte* dst = detail::first_element(rows);
  auto* off = reinterpret_cast<std::int64_t*>(detail::first_element(offsets));
  std::int64_t k = 0;
  for (std::int64_t b = 0; b < items; ++b) {
    off[b] = k;
    for (std::int64_t t = 0; t < width; ++t)
      if (flags[b * width + t]) {
        std::memcpy(dst, detail::first_element(v) + static_cast<std::size_t>(b * width + t) * row_bytes, row_bytes);
        dst += row_bytes;
        ++k;
      }
  }
  off[items] = k;
  call.commit();
  return RowsTapeView(std::move(rows), std::move(offsets));
}

}  // namespace forge
