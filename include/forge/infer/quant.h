#pragma once
// Weight formats for inference: a weight matrix kept as f32, bf16, or
// quantized in ggml's q8_0 / q4_0 block layouts, and the matrix product that
// reads it without expanding it (docs/INFERENCE.md, "Weight formats").
//
// - q8_0: per 32 values of a row, an f16 scale d = amax / 127 and 32 int8
//   q = round(x / d); x ~ q * d.
// - q4_0: per 32 values, an f16 scale d = m / -8 (m: the value of largest
//   magnitude, with its sign) and 16 bytes of 4-bit q = clamp(round(x / d) + 8,
//   0, 15); byte j holds value j in its low nibble and value j + 16 in its
//   high one; x ~ (q - 8) * d.
// - linear with a q8_0 or q4_0 matrix rounds each 32-value block of x to int8
//   with an f32 scale (as ggml does) and sums integer products per block; with
//   bf16 it rounds x to bf16 and accumulates in f32; with f32 it is an f32 GEMV.
//   AVX-512 kernels (VNNI, BF16, F) are used where the build's CPU has them,
//   a portable path elsewhere; both compute the same sums, up to the order of
//   the f32 additions.
// - Host only: a tensor on a device is refused (ErrorCode::device).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "forge/exec_context.h"
#include "forge/io/safetensors.h"
#include "forge/state_dict.h"
#include "forge/tensor.h"

namespace forge::infer {

enum class WeightFormat : std::uint8_t { f32, bf16, q8_0, q4_0 };

const char* format_name(WeightFormat format);  // "f32", "bf16", "q8_0", "q4_0"
// The format named `name`; invalid_argument naming the choices otherwise.
WeightFormat parse_weight_format(std::string_view name);

// The bytes of one row of `cols` values in `format` (cols % 32 == 0 for q8_0
// and q4_0: 34 and 18 bytes per block of 32).
std::size_t packed_row_bytes(WeightFormat format, std::int64_t cols);

// A [rows = out_features, cols = in_features] weight matrix, row-major, in
// `format`. q8_0 / q4_0 are ggml's block layouts along a row; cols must be a
// multiple of 32 for them. The storage is a host tensor (f32 [rows, cols],
// bf16 [rows, cols] or u8 [rows, packed_row_bytes]) that may be a zero-copy
// view of a mapped checkpoint. Immutable; copying shares the storage.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  // `weight`: floating [rows, cols] on the host, any layout. The result owns
  // new memory (outside the pool), except that a contiguous f32 weight packed
  // as f32 is shared (detached, no copy): writing to it shows through.
  static PackedMatrix pack(const Tensor& weight, WeightFormat format);
  // Adopts `storage` (host, contiguous, the format's dtype, exactly the bytes
  // [rows, cols] needs) without copying it.
  static PackedMatrix wrap(Tensor storage, WeightFormat format, std::int64_t rows, std::int64_t cols);

  WeightFormat format() const noexcept { return format_; }
  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t cols() const noexcept { return cols_; }
  const Tensor& storage() const noexcept { return storage_; }
  std::size_t bytes() const { return storage_.defined() ? storage_.nbytes() : 0; }
  bool defined() const noexcept { return storage_.defined(); }

  // f32 [rows, cols], a new tensor from the storage's context's pool.
  Tensor dequantize() const;

 private:
  PackedMatrix(Tensor storage, WeightFormat format, std::int64_t rows, std::int64_t cols)
      : storage_(std::move(storage)), format_(format), rows_(rows), cols_(cols) {}
  Tensor storage_;
  WeightFormat format_ = WeightFormat::f32;
  std::int64_t rows_ = 0, cols_ = 0;
};

// y = x @ W^T (+ bias): x f32 [..., cols] on the host (any layout), bias f32
// [rows] or undefined -> f32 [..., rows], from x's context's host pool. No
// autograd: an input that requires grad is refused (invalid_argument).
Tensor linear(const Tensor& x, const PackedMatrix& w, const Tensor& bias = Tensor());
// The same into `out` (f32 [..., rows], host, not overlapping x or bias).
Tensor& linear_into(Tensor& out, const Tensor& x, const PackedMatrix& w, const Tensor& bias = Tensor());

}  // namespace forge::infer

namespace forge {

// Converts a safetensors checkpoint: each tensor `select` accepts (default:
// floating, rank 2, cols % 32 == 0, name ending in "weight") is written in
// `format`, the rest copied unchanged. The format and logical shape of each
// converted tensor are recorded in the file's metadata ("forge.format.<name>",
// "forge.shape.<name>" = "rows,cols") so read_packed can rebuild it; the
// input's own metadata is kept. Written atomically (to a temporary, renamed).
void quantize(const std::filesystem::path& in, const std::filesystem::path& out, infer::WeightFormat format,
              std::function<bool(std::string_view name, const Tensor& t)> select = {});

}  // namespace forge

namespace forge::infer {

struct PackedCheckpoint {
  StateDict tensors;                           // the unconverted tensors, zero-copy over the mapping
  std::map<std::string, PackedMatrix> packed;  // the converted ones, zero-copy over the mapping
  io::Metadata metadata;                       // the user's metadata (the format's own keys removed)
  std::size_t mapped_bytes = 0;                // size of the mapped file
};

// Maps `path` (a file quantize wrote, or any safetensors checkpoint: then
// every tensor lands in `tensors`). Metadata that does not describe a valid
// packed tensor is ErrorCode::io naming the file and the tensor.
PackedCheckpoint read_packed(ExecContext& ctx, const std::filesystem::path& path);

}  // namespace forge::infer
