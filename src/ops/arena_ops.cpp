// Calls whose output size only the call knows. Each opens its ArenaCall first
// (which checks the arena and rewinds it), then validates its inputs, sizes
// every output and reserves them together, so a steady loop allocates once.

#include <cstring>

#include "autograd/record.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge {
namespace {

// A packed pool temporary holding `t` broadcast to `shape`, converted to `dtype`.
Tensor packed(const char* op, const Tensor& t, const Shape& shape, DType dtype) {
  Tensor out = detail::allocate(t.runtime(), shape, dtype, op);
  detail::copy_cast(op, out, shape, detail::operand(out), detail::operand_broadcast(t, shape));
  return out;
}

// A mask as 0/1 bytes (packed, any source dtype's "!= 0") and how many are set.
struct Flags {
  Tensor bytes;
  const std::uint8_t* data;
  std::int64_t count;
};

Flags flags_of(const char* op, const Tensor& t, const Shape& shape) {
  Flags f{packed(op, t, shape, DType::boolean), nullptr, 0};
  f.data = reinterpret_cast<const std::uint8_t*>(detail::first_element(f.bytes));
  const std::int64_t n = shape.numel();
  for (std::int64_t i = 0; i < n; ++i) f.count += f.data[i];
  return f;
}

void check_mask(const char* op, const Tensor& mask) {
  detail::check_input(op, mask, "mask");
  FORGE_CHECK(mask.dtype() == DType::boolean, dtype, op, "mask must be bool, got ", dtype_name(mask.dtype()));
}

void check_pair(const char* op, const Tensor& x, const Tensor& mask) {
  detail::check_input(op, x, "x");
  // Arena outputs are the caller's memory, outside the tape: refuse rather than
  // hand back values whose gradient would silently be lost.
  FORGE_CHECK(!autograd::needs_grad(x), not_implemented, op,
              "x requires grad, and arena outputs are not recorded by autograd; "
              "call under NoGradGuard or pass x.detach()");
  check_mask(op, mask);
  detail::check_same_runtime(op, x, mask);
}

// Copies the rows of `src` ([n, row_bytes] packed) whose flag is set, in order.
std::byte* copy_flagged_rows(std::byte* dst, const std::byte* src, const std::uint8_t* flags, std::int64_t n,
                             std::size_t row_bytes) {
  for (std::int64_t i = 0; i < n; ++i)
    if (flags[i]) {
      std::memcpy(dst, src + static_cast<std::size_t>(i) * row_bytes, row_bytes);
      dst += row_bytes;
    }
  return dst;
}

}  // namespace

Tensor masked_select(const Tensor& x, const Tensor& mask, Arena* arena) try {
  const char* op = "masked_select";
  ArenaCall call(op, arena, {x, mask});
  check_pair(op, x, mask);
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), op);
  const Flags flags = flags_of(op, mask, shape);
  const Tensor values = packed(op, x, shape, x.dtype());
  Tensor out = call.allocate(Shape{flags.count}, x.dtype());
  copy_flagged_rows(detail::first_element(out), detail::first_element(values), flags.data, shape.numel(),
                    x.element_size());
  call.commit();
  return out;
}
FORGE_CATCH_OOM("masked_select")

Tensor nonzero(const Tensor& x, Arena* arena) try {
  const char* op = "nonzero";
  ArenaCall call(op, arena, {x});
  detail::check_input(op, x, "x");
  const Flags flags = flags_of(op, x, x.shape());
  const int rank = x.dim();
  Tensor out = call.allocate(Shape{flags.count, rank}, DType::i64);
  auto* idx = reinterpret_cast<std::int64_t*>(detail::first_element(out));
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    if (!flags.data[i]) continue;
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
FORGE_CATCH_OOM("nonzero")

RowsView rows_where(const Tensor& x, const Tensor& mask, Arena* arena) try {
  const char* op = "rows_where";
  ArenaCall call(op, arena, {x, mask});
  check_pair(op, x, mask);
  FORGE_CHECK(x.dim() == 2, shape, op, "x must be [N, D], got ", x.shape());
  FORGE_CHECK(mask.dim() == 1 && mask.size(0) == x.size(0), shape, op, "mask must be [", x.size(0), "], got ",
              mask.shape());
  const Flags flags = flags_of(op, mask, mask.shape());
  const Tensor values = packed(op, x, x.shape(), x.dtype());
  const std::int64_t cols = x.size(1);
  Tensor out = call.allocate(Shape{flags.count, cols}, x.dtype());
  copy_flagged_rows(detail::first_element(out), detail::first_element(values), flags.data, x.size(0),
                    static_cast<std::size_t>(cols) * x.element_size());
  call.commit();
  return RowsView(std::move(out));
}
FORGE_CATCH_OOM("rows_where")

TapeView nonzero_per_row(const Tensor& mask, Arena* arena) try {
  const char* op = "nonzero_per_row";
  ArenaCall call(op, arena, {mask});
  check_mask(op, mask);
  FORGE_CHECK(mask.dim() == 2, shape, op, "mask must be [B, T], got ", mask.shape());
  const Flags flags = flags_of(op, mask, mask.shape());
  const std::int64_t items = mask.size(0), width = mask.size(1);
  call.reserve(ArenaCall::bytes_for(Shape{flags.count}, DType::i64) +
               ArenaCall::bytes_for(Shape{items + 1}, DType::i64));
  Tensor values = call.allocate(Shape{flags.count}, DType::i64);
  Tensor offsets = call.allocate(Shape{items + 1}, DType::i64);
  auto* val = reinterpret_cast<std::int64_t*>(detail::first_element(values));
  auto* off = reinterpret_cast<std::int64_t*>(detail::first_element(offsets));
  std::int64_t k = 0;
  for (std::int64_t b = 0; b < items; ++b) {
    off[b] = k;
    for (std::int64_t t = 0; t < width; ++t)
      if (flags.data[b * width + t]) val[k++] = t;
  }
  off[items] = k;
  call.commit();
  return TapeView(std::move(values), std::move(offsets));
}
FORGE_CATCH_OOM("nonzero_per_row")

RowsTapeView rows_where_per_item(const Tensor& x, const Tensor& mask, Arena* arena) try {
  const char* op = "rows_where_per_item";
  ArenaCall call(op, arena, {x, mask});
  check_pair(op, x, mask);
  FORGE_CHECK(x.dim() == 3, shape, op, "x must be [B, T, D], got ", x.shape());
  FORGE_CHECK(mask.dim() == 2 && mask.size(0) == x.size(0) && mask.size(1) == x.size(1), shape, op, "mask must be [",
              x.size(0), ", ", x.size(1), "], got ", mask.shape());
  const Flags flags = flags_of(op, mask, mask.shape());
  const Tensor values = packed(op, x, x.shape(), x.dtype());
  const std::int64_t items = x.size(0), width = x.size(1), cols = x.size(2);
  call.reserve(ArenaCall::bytes_for(Shape{flags.count, cols}, x.dtype()) +
               ArenaCall::bytes_for(Shape{items + 1}, DType::i64));
  Tensor rows = call.allocate(Shape{flags.count, cols}, x.dtype());
  Tensor offsets = call.allocate(Shape{items + 1}, DType::i64);
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * x.element_size();
  std::byte* dst = detail::first_element(rows);
  auto* off = reinterpret_cast<std::int64_t*>(detail::first_element(offsets));
  std::int64_t k = 0;
  for (std::int64_t b = 0; b < items; ++b) {
    off[b] = k;
    const std::uint8_t* item_flags = flags.data + b * width;
    for (std::int64_t t = 0; t < width; ++t) k += item_flags[t];
    dst = copy_flagged_rows(dst, detail::first_element(values) + static_cast<std::size_t>(b * width) * row_bytes,
                            item_flags, width, row_bytes);
  }
  off[items] = k;
  call.commit();
  return RowsTapeView(std::move(rows), std::move(offsets));
}
FORGE_CATCH_OOM("rows_where_per_item")

}  // namespace forge
