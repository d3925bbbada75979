// The mask compactions of the indexing family (backend/kernels/indexing.h):
// serial, since each output position depends on every flag before it.

#include <cstring>

#include "backend/cpu/indexing_kernels.h"

namespace forge::cpu {

std::int64_t count_flags(detail::DeviceRuntime&, std::int64_t n, const std::uint8_t* flags) {
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) count += flags[i];
  return count;
}

void compact_rows(detail::DeviceRuntime&, std::int64_t n, std::size_t row_bytes, const std::uint8_t* flags,
                  const std::byte* src, std::byte* dst) {
  for (std::int64_t i = 0; i < n; ++i)
    if (flags[i]) {
      std::memcpy(dst, src + static_cast<std::size_t>(i) * row_bytes, row_bytes);
      dst += row_bytes;
    }
}

void nonzero(detail::DeviceRuntime&, const Shape& shape, const std::uint8_t* flags, std::int64_t* out) {
  const int rank = shape.rank();
  const std::int64_t n = shape.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    if (!flags[i]) continue;
    std::int64_t rest = i;
    for (int d = rank - 1; d >= 0; --d) {
      out[d] = rest % shape[d];
      rest /= shape[d];
    }
    out += rank;
  }
}

void flag_rows(detail::DeviceRuntime&, std::int64_t items, std::int64_t width, const std::uint8_t* flags,
               std::int64_t* offsets, std::int64_t* columns) {
  std::int64_t k = 0;
  for (std::int64_t b = 0; b < items; ++b) {
    offsets[b] = k;
    const std::uint8_t* row = flags + b * width;
    if (columns) {
      for (std::int64_t t = 0; t < width; ++t)
        if (row[t]) columns[k++] = t;
    } else {
      for (std::int64_t t = 0; t < width; ++t) k += row[t];
    }
  }
  offsets[items] = k;
}

}  // namespace forge::cpu
