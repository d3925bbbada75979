#pragma once
// The kernels behind forge::infer::linear and PackedMatrix (policy in
// include/forge/infer/quant.h). Two implementations of one computation:
// `portable` (scalar C++, every CPU) and `native` (AVX-512 VNNI / BF16 / F,
// compiled where the build's -march has them). Both round the activations
// the same way (Note [Activation rounding] in quant_kernels.cpp) and form the
// same exact integer or bf16 products; only the order of the f32 sums
// differs. Tests call each directly.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "forge/dtype.h"
#include "forge/infer/quant.h"

namespace forge::infer::detail {

inline constexpr std::int64_t kBlockValues = 32;

// ggml's block_q8_0 and block_q4_0, byte for byte: the f16 scale's bits
// (little-endian) first. Byte-aligned, since a mapped file may place a row at
// any address; the scale is read and written through memcpy.
struct BlockScale {
  unsigned char d_bytes[2];
  std::uint16_t d() const noexcept {
    std::uint16_t bits;
    std::memcpy(&bits, d_bytes, 2);
    return bits;
  }
  void set_d(std::uint16_t bits) noexcept { std::memcpy(d_bytes, &bits, 2); }
};
struct BlockQ8 : BlockScale {
  std::int8_t qs[32];
};
struct BlockQ4 : BlockScale {
  std::uint8_t qs[16];  // value j in the low nibble of byte j, value j + 16 in the high one
};
static_assert(sizeof(BlockQ8) == 34 && sizeof(BlockQ4) == 18 && alignof(BlockQ8) == 1 && alignof(BlockQ4) == 1,
              "ggml's block sizes");

// One row of `cols` values (cols % 32 == 0) into blocks, as ggml's reference
// quantizers (quantize_row_q8_0_ref / q4_0_ref) round them. False (and `out`
// unspecified) when a value is not finite or a block's scale overflows f16.
bool quantize_row_q8_0(const float* x, BlockQ8* out, std::int64_t cols) noexcept;
bool quantize_row_q4_0(const float* x, BlockQ4* out, std::int64_t cols) noexcept;
// One packed row of `format` back to f32.
void dequantize_row(WeightFormat format, const std::byte* row, float* out, std::int64_t cols) noexcept;

// Rounds one block of 32 activations to int8 with an f32 scale (what the q8_0
// and q4_0 products use for x); returns the scale.
float quantize_activation_block(const float* x, std::int8_t* q) noexcept;

// One product y [m, n] = x [m, k] @ W^T (+ bias): x and y packed row-major,
// W `n` rows of `w_row_bytes` in `format`.
struct LinearProblem {
  const float* x = nullptr;
  std::int64_t m = 0, k = 0, n = 0;
  WeightFormat format = WeightFormat::f32;
  const std::byte* w = nullptr;
  std::size_t w_row_bytes = 0;
  const float* bias = nullptr;  // [n], or null
  float* y = nullptr;
};

enum class LinearKernel : std::uint8_t { portable, native };

// Whether this build has a native kernel for `format`.
bool native_available(WeightFormat format) noexcept;
// The kernel linear uses for `format`: native where available.
LinearKernel best_kernel(WeightFormat format) noexcept;
// The scratch (64-byte aligned) `kernel` needs for p's rounded activations.
std::size_t scratch_bytes(LinearKernel kernel, const LinearProblem& p) noexcept;
// Rounds p's activations into `scratch` (once per call, before any rows).
void prepare_activations(LinearKernel kernel, const LinearProblem& p, std::byte* scratch) noexcept;
// Columns [n0, n1) of y (rows of W), from prepared scratch. Safe to run for
// disjoint ranges at once.
void compute_rows(LinearKernel kernel, const LinearProblem& p, const std::byte* scratch, std::int64_t n0,
                  std::int64_t n1) noexcept;

}  // namespace forge::infer::detail
