#pragma once
// Checks the linear-algebra and convolution ops share.

#include <utility>

#include "core/tensor_internal.h"
#include "forge/error.h"

namespace forge::detail {

// These ops compute in floating point only.
inline void check_floating(const char* op, const Tensor& t, const char* name) {
  FORGE_CHECK(is_floating(t.dtype()), dtype, op, "takes floating tensors, but ", name, " is ", dtype_name(t.dtype()));
}

// Both operands floating and of one dtype.
inline void check_same_floating(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                                const char* b_name) {
  check_floating(op, a, a_name);
  FORGE_CHECK(a.dtype() == b.dtype(), dtype, op, a_name, " is ", dtype_name(a.dtype()), " but ", b_name, " is ",
              dtype_name(b.dtype()), "; both operands must share a dtype");
}

// A product reads its inputs while it writes, so `out` may not share a
// single byte with an input (not even exactly in place).
inline void check_no_overlap(const char* op, const Tensor& out, const Tensor& in, const char* name) {
  if (out.buffer() != in.buffer() || out.numel() == 0 || in.numel() == 0) return;
  auto bytes = [](const Tensor& t) {
    std::int64_t lo = t.offset(), hi = t.offset();
    for (int d = 0; d < t.dim(); ++d) {
      const std::int64_t span = (t.shape()[d] - 1) * t.strides()[d];
      (span < 0 ? lo : hi) += span;
    }
    const auto es = static_cast<std::int64_t>(t.element_size());
    return std::pair{lo * es, (hi + 1) * es};
  };
  const auto [olo, ohi] = bytes(out);
  const auto [ilo, ihi] = bytes(in);
  FORGE_CHECK(ohi <= ilo || ihi <= olo, invalid_argument, op, "out overlaps ", name,
              "; write the result into a separate tensor");
}

}  // namespace forge::detail
