// triu, tril and pad. The triangles copy the kept part of each row and zero
// the rest (in place when out is x). pad is one index-mapped copy: each padded
// dim gets a table from output index to source index (-1: the fill value).

#include <vector>

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "core/checked_int.h"
#include "forge/ops.h"
#include "ops/elementwise_internal.h"
#include "ops/nn_internal.h"

namespace forge {
namespace {

void check_triangle(const char* op, const Tensor& x) {
  detail::check_input(op, x, "x");
  FORGE_CHECK(x.dim() >= 2, shape, op, "x must have at least 2 dims, got shape ", x.shape());
}

void triangle_kernel(const char* op, Tensor& out, const Tensor& x, std::int64_t diagonal, bool upper) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto triangle = dev.kernels().indexing.triangle.get(op, out.dtype(), dev);
  if (out.numel() > 0) triangle(dev, x.shape(), detail::operand(out), detail::operand(x), diagonal, upper);
}

Tensor triangle(const char* op, const Tensor& x, std::int64_t diagonal, bool upper) {
  check_triangle(op, x);
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  triangle_kernel(op, out, x, diagonal, upper);
  detail::adopt_output(out);
  return out;
}

Tensor& triangle_into(const char* op, Tensor& out, const Tensor& x, std::int64_t diagonal, bool upper) {
  check_triangle(op, x);
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, x);
  detail::check_out_geometry(op, out, x.shape(), x.dtype());
  detail::check_no_partial_overlap(op, out, x, "x");
  triangle_kernel(op, out, x, diagonal, upper);
  out.buffer()->bump_version();
  return out;
}

const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::constant:
      return "constant";
    case PadMode::reflect:
      return "reflect";
    case PadMode::replicate:
      return "replicate";
  }
  return "?";
}

Shape pad_shape(const char* op, const Tensor& x, const Dims& pad, PadMode mode) {
  FORGE_CHECK(pad.size() % 2 == 0, invalid_argument, op, "pad ", pad, " must hold (before, after) pairs");
  FORGE_CHECK(pad.size() / 2 <= x.dim(), invalid_argument, op, "pad ", pad, " pads ", pad.size() / 2,
              " dims but x has shape ", x.shape());
  Shape s = x.shape();
  for (int k = 0; k < pad.size() / 2; ++k) {
    const int d = x.dim() - 1 - k;
    const std::int64_t before = pad[2 * k], after = pad[2 * k + 1], size = x.shape()[d];
    if (mode != PadMode::constant) {
      FORGE_CHECK(before >= 0 && after >= 0, invalid_argument, op, mode_name(mode),
                  " padding takes no negative amounts, got ", pad);
      if (mode == PadMode::reflect) {
        FORGE_CHECK(before < size && after < size, invalid_argument, op, "reflect padding (", before, ", ", after,
                    ") must be less than dimension ", d, " of size ", size);
      } else {
        FORGE_CHECK(size > 0 || (before == 0 && after == 0), invalid_argument, op, "cannot replicate-pad dimension ", d,
                    " of size 0");
      }
    }
    // The kernel reads source index i - before for every output index i in [0, n).
    const detail::CheckedInt n = detail::CheckedInt(size) + before + after;
    const detail::CheckedInt first = detail::CheckedInt(0) - before, last = n - 1 - before;
    FORGE_CHECK(!n.overflowed() && !first.overflowed() && !last.overflowed(), invalid_argument, op, "padding (", before,
                ", ", after, ") of dimension ", d, " of size ", size, " overflows int64");
    FORGE_CHECK(n.value() >= 0, invalid_argument, op, "padding (", before, ", ", after, ") of dimension ", d,
                " of size ", size, " gives a negative size ", n.value());
    s[d] = n.value();
  }
  return s;
}

// The constant mode's fill value, checked against x's dtype (Note [Scalar
// conversion]); the other modes never read it.
detail::ScalarSlot fill_value(const char* op, const Tensor& x, PadMode mode, Scalar value) {
  return mode == PadMode::constant ? detail::checked_slot(op, x.dtype(), value, "value") : detail::ScalarSlot();
}

void pad_kernel(const char* op, Tensor& out, const Tensor& x, const Dims& pad, PadMode mode,
                const detail::ScalarSlot& fill) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto mapped_copy = dev.kernels().indexing.mapped_copy.get(op, out.dtype(), dev);
  if (out.numel() == 0) return;
  const int r = x.dim();
  std::size_t need = 0;
  for (int k = 0; k < pad.size() / 2; ++k) need += static_cast<std::size_t>(out.shape()[r - 1 - k]);
  std::vector<std::int64_t> table(need);
  const std::int64_t* maps[kMaxRank] = {};
  std::size_t at = 0;
  for (int k = 0; k < pad.size() / 2; ++k) {
    const int d = r - 1 - k;
    const std::int64_t before = pad[2 * k], size = x.shape()[d], n = out.shape()[d];
    std::int64_t* m = table.data() + at;
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t j = i - before;
      switch (mode) {
        case PadMode::constant:
          j = (j >= 0 && j < size) ? j : -1;
          break;
        case PadMode::reflect:
          j = j < 0 ? -j : (j >= size ? 2 * (size - 1) - j : j);
          break;
        case PadMode::replicate:
          j = std::clamp<std::int64_t>(j, 0, size - 1);
          break;
      }
      m[i] = j;
    }
    maps[d] = m;
    at += static_cast<std::size_t>(n);
  }
  mapped_copy(dev, out.shape(), detail::operand(out), detail::operand(x), maps, 0, fill.bytes);
}

}  // namespace

Tensor triu(const Tensor& x, std::int64_t diagonal) try {
  Tensor out = triangle("triu", x, diagonal, true);
  FORGE_RECORD(triu, out, x, diagonal);
  return out;
}
FORGE_CATCH_OOM("triu")
Tensor tril(const Tensor& x, std::int64_t diagonal) try {
  Tensor out = triangle("tril", x, diagonal, false);
  FORGE_RECORD(tril, out, x, diagonal);
  return out;
}
FORGE_CATCH_OOM("tril")
Tensor& triu_into(Tensor& out, const Tensor& x, std::int64_t diagonal) try {
  return triangle_into("triu_into", out, x, diagonal, true);
}
FORGE_CATCH_OOM("triu_into")
Tensor& tril_into(Tensor& out, const Tensor& x, std::int64_t diagonal) try {
  return triangle_into("tril_into", out, x, diagonal, false);
}
FORGE_CATCH_OOM("tril_into")

Tensor pad(const Tensor& x, const Dims& pad, PadMode mode, Scalar value) try {
  const char* op = "pad";
  detail::check_input(op, x, "x");
  const Shape shape = pad_shape(op, x, pad, mode);
  const detail::ScalarSlot fill = fill_value(op, x, mode, value);
  Tensor out = detail::allocate(x.runtime(), shape, x.dtype(), op);
  pad_kernel(op, out, x, pad, mode, fill);
  detail::adopt_output(out);
  FORGE_RECORD(pad, out, x, pad, mode);
  return out;
}
FORGE_CATCH_OOM("pad")

Tensor& pad_into(Tensor& out, const Tensor& x, const Dims& pad, PadMode mode, Scalar value) try {
  const char* op = "pad_into";
  detail::check_input(op, x, "x");
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, x);
  detail::check_out_geometry(op, out, pad_shape(op, x, pad, mode), x.dtype());
  detail::check_no_overlap(op, out, x, "x");
  const detail::ScalarSlot fill = fill_value(op, x, mode, value);
  pad_kernel(op, out, x, pad, mode, fill);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("pad_into")

Tensor Tensor::triu(std::int64_t diagonal) const { return forge::triu(*this, diagonal); }
Tensor Tensor::tril(std::int64_t diagonal) const { return forge::tril(*this, diagonal); }

}  // namespace forge
