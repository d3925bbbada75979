// PackedMatrix: packing a weight into a format, adopting packed bytes, and
// expanding them back (policy in include/forge/infer/quant.h). Packing owns
// its result outside the pool (DESIGN §1: the model owns its weights).

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/internal.h"
#include "core/tensor_internal.h"
#include "forge/infer/quant.h"
#include "infer/quant_internal.h"
#include "infer/quant_kernels.h"

namespace forge::infer {

const char* format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::f32:
      return "f32";
    case WeightFormat::bf16:
      return "bf16";
    case WeightFormat::q8_0:
      return "q8_0";
    case WeightFormat::q4_0:
      return "q4_0";
  }
  return "?";
}

WeightFormat parse_weight_format(std::string_view name) {
  for (WeightFormat f : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0})
    if (name == format_name(f)) return f;
  FORGE_FAIL(invalid_argument, "parse_weight_format", "unknown weight format \"", name,
             "\"; the formats are f32, bf16, q8_0 and q4_0");
}

std::size_t packed_row_bytes(WeightFormat format, std::int64_t cols) {
  const auto c = static_cast<std::size_t>(std::max<std::int64_t>(cols, 0));
  switch (format) {
    case WeightFormat::f32:
      return c * sizeof(float);
    case WeightFormat::bf16:
      return c * sizeof(std::uint16_t);
    case WeightFormat::q8_0:
      return c / detail::kBlockValues * sizeof(detail::BlockQ8);
    case WeightFormat::q4_0:
      return c / detail::kBlockValues * sizeof(detail::BlockQ4);
  }
  return 0;
}

namespace detail {

DType storage_dtype(WeightFormat format) noexcept {
  switch (format) {
    case WeightFormat::f32:
      return DType::f32;
    case WeightFormat::bf16:
      return DType::bf16;
    case WeightFormat::q8_0:
    case WeightFormat::q4_0:
      return DType::u8;
  }
  return DType::u8;
}

std::int64_t storage_cols(WeightFormat format, std::int64_t cols) {
  return format == WeightFormat::f32 || format == WeightFormat::bf16
             ? cols
             : static_cast<std::int64_t>(packed_row_bytes(format, cols));
}

void check_host(const char* op, const Tensor& t, const char* name) {
  forge::detail::check_readable(op, t, name);
  FORGE_CHECK(t.device().is_cpu(), device, op, name, " is on ", t.device().str(),
              "; packed weights compute on the host only (not supported on ", t.device().str(),
              "): pass a host tensor");
}

void check_matrix_extents(const char* op, WeightFormat format, std::int64_t rows, std::int64_t cols) {
  FORGE_CHECK(rows >= 0 && cols >= 0, invalid_argument, op, "a matrix of ", rows, " rows and ", cols,
              " cols has a negative extent");
  if (format == WeightFormat::q8_0 || format == WeightFormat::q4_0)
    FORGE_CHECK(cols % kBlockValues == 0, shape, op, format_name(format), " packs rows in blocks of ", kBlockValues,
                " values, but the matrix has ", cols, " cols (not a multiple of ", kBlockValues, ")");
  const std::size_t row_bytes = packed_row_bytes(format, cols);
  FORGE_CHECK(row_bytes == 0 || static_cast<std::size_t>(rows) <= forge::detail::kMaxTensorBytes / row_bytes,
              invalid_argument, op, "a ", format_name(format), " [", rows, ", ", cols,
              "] matrix needs more bytes than any allocation forge makes");
}

// An uninitialised packed host tensor outside the pool, in t's context.
Tensor owned_host(Runtime& rt, const Shape& shape, DType dtype, const char* op) {
  const std::int64_t n = forge::detail::checked_numel(op, shape, dtype);
  Ref<Buffer> buffer = rt.host().allocate_owned(static_cast<std::size_t>(n) * dtype_size(dtype), op);
  return Tensor(Ref<TensorImpl>::adopt(new TensorImpl(forge::detail::internal, Ref<Runtime>::share(&rt),
                                                      std::move(buffer), shape, contiguous_strides(shape), 0, dtype)));
}

}  // namespace detail

namespace {

constexpr const char* kPackOp = "PackedMatrix::pack";
constexpr const char* kWrapOp = "PackedMatrix::wrap";

// Whether pack may share `weight` as f32 storage: packed f32 bytes that live
// outside the pool and every arena (owned, mapped or the caller's), so that
// sharing pins no transient memory and never goes stale.
bool shareable_f32(const Tensor& weight) {
  return weight.dtype() == DType::f32 && weight.is_contiguous() && weight.buffer()->kind() == Buffer::Kind::borrowed;
}

}  // namespace

PackedMatrix PackedMatrix::pack(const Tensor& weight, WeightFormat format) try {
  detail::check_host(kPackOp, weight, "weight");
  FORGE_CHECK(is_floating(weight.dtype()), dtype, kPackOp, "weight must be floating, got ",
              dtype_name(weight.dtype()));
  FORGE_CHECK(weight.dim() == 2, shape, kPackOp, "weight must be [rows, cols], got shape ", weight.shape());
  const std::int64_t rows = weight.shape()[0], cols = weight.shape()[1];
  detail::check_matrix_extents(kPackOp, format, rows, cols);
  if (format == WeightFormat::f32 && shareable_f32(weight)) return {weight.detach(), format, rows, cols};

  Runtime& rt = weight.runtime();
  Tensor storage = detail::owned_host(rt, {rows, detail::storage_cols(format, cols)}, detail::storage_dtype(format),
                                      kPackOp);
  if (format == WeightFormat::f32 || format == WeightFormat::bf16) {
    forge::detail::copy_to_contiguous(weight, storage.raw_data(kPackOp), storage.dtype());
    return {std::move(storage), format, rows, cols};
  }
  // Row by row through an f32 copy of one row at a time.
  ScratchLease<float> row = rt.pool().scratch<float>(static_cast<std::size_t>(cols));
  auto* out = static_cast<std::byte*>(storage.raw_data(kPackOp));
  const std::size_t row_bytes = packed_row_bytes(format, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    forge::detail::copy_to_contiguous(weight.select(0, r), row.data(), DType::f32);
    std::byte* dst = out + static_cast<std::size_t>(r) * row_bytes;
    const bool ok = format == WeightFormat::q8_0
                        ? detail::quantize_row_q8_0(row.data(), reinterpret_cast<detail::BlockQ8*>(dst), cols)
                        : detail::quantize_row_q4_0(row.data(), reinterpret_cast<detail::BlockQ4*>(dst), cols);
    if (!ok) {
      const float* v = row.data();
      const float amax = std::abs(*std::max_element(v, v + cols, [](float a, float b) {
        return !(std::abs(a) >= std::abs(b));  // NaN ranks highest
      }));
      FORGE_FAIL(invalid_argument, kPackOp, "row ", r, " of the weight holds ", amax, ", which ", format_name(format),
                 " cannot represent (values must be finite, and each block's scale must fit f16)");
    }
  }
  return {std::move(storage), format, rows, cols};
}
FORGE_CATCH_OOM(kPackOp)

PackedMatrix PackedMatrix::wrap(Tensor storage, WeightFormat format, std::int64_t rows, std::int64_t cols) try {
  detail::check_host(kWrapOp, storage, "storage");
  detail::check_matrix_extents(kWrapOp, format, rows, cols);
  const DType want = detail::storage_dtype(format);
  FORGE_CHECK(storage.dtype() == want, dtype, kWrapOp, format_name(format), " storage must be ", dtype_name(want),
              ", got ", dtype_name(storage.dtype()));
  FORGE_CHECK(storage.is_contiguous(), invalid_argument, kWrapOp, "storage must be contiguous, got shape ",
              storage.shape(), " with strides ", storage.strides());
  const std::size_t need = static_cast<std::size_t>(rows) * packed_row_bytes(format, cols);
  FORGE_CHECK(storage.nbytes() == need, invalid_argument, kWrapOp, "storage holds ", storage.nbytes(),
              " bytes, but a ", format_name(format), " [", rows, ", ", cols, "] matrix is ", need, " bytes");
  Tensor view = storage.detach().view({rows, detail::storage_cols(format, cols)});
  return {std::move(view), format, rows, cols};
}
FORGE_CATCH_OOM(kWrapOp)

Tensor PackedMatrix::dequantize() const try {
  constexpr const char* op = "PackedMatrix::dequantize";
  FORGE_CHECK(defined(), invalid_argument, op, "the matrix is empty (default-constructed)");
  forge::detail::check_readable(op, storage_, "storage");
  Runtime& rt = storage_.runtime();
  Tensor out = forge::detail::allocate_in(rt, rt.pool(), {rows_, cols_}, DType::f32, op);
  const auto* src = static_cast<const std::byte*>(storage_.raw_data(op));
  auto* dst = static_cast<float*>(out.raw_data(op));
  const std::size_t row_bytes = packed_row_bytes(format_, cols_);
  for (std::int64_t r = 0; r < rows_; ++r)
    detail::dequantize_row(format_, src + static_cast<std::size_t>(r) * row_bytes, dst + r * cols_, cols_);
  forge::detail::adopt_output(out);
  return out;
}
FORGE_CATCH_OOM("PackedMatrix::dequantize")

}  // namespace forge::infer
