// Block quantizers, dequantizers and the portable linear kernel; the choice
// between it and the native one (quant_native.cpp).
//
// Note [Activation rounding]
// A q8_0 or q4_0 product rounds x per block of 32 to int8 with an f32 scale
// d = amax / 127 (nearest even, as ggml rounds its q8_0 activations, but the
// scale kept in f32), so that each block's product is an exact int32 sum
// times d_w * d_x. A block with a non-finite value gets d = NaN, so the
// rows it reaches come out NaN as an f32 product's would; a block whose
// scale would be below FLT_MIN (every |x| < 1.5e-36) rounds to zero, which
// keeps 1 / d finite. A bf16 product rounds x to bf16 (nearest even) and
// sums the exact products in f32. The portable and native kernels share
// these roundings bit for bit; they differ only in the order of f32 sums.

#include "infer/quant_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace forge::infer::detail {

namespace native {
// quant_native.cpp: AVX-512 where the build targets it, else stubs.
bool available(WeightFormat format) noexcept;
std::size_t scratch_bytes(const LinearProblem& p) noexcept;
void prepare_activations(const LinearProblem& p, std::byte* scratch) noexcept;
void compute_rows(const LinearProblem& p, const std::byte* scratch, std::int64_t n0, std::int64_t n1) noexcept;
}  // namespace native

namespace {

constexpr std::size_t align64(std::size_t bytes) noexcept { return (bytes + 63) / 64 * 64; }

float f16_to_f32(std::uint16_t bits) noexcept { return Half::to_float(bits); }

// The block's largest |value|, and whether every value is finite.
float block_amax(const float* x, bool& finite) noexcept {
  float amax = 0.0f;
  finite = true;
  for (int j = 0; j < kBlockValues; ++j) {
    finite = finite && std::isfinite(x[j]);
    amax = std::max(amax, std::fabs(x[j]));
  }
  return amax;
}

}  // namespace

bool quantize_row_q8_0(const float* x, BlockQ8* out, std::int64_t cols) noexcept {
  for (std::int64_t b = 0; b < cols / kBlockValues; ++b, x += kBlockValues) {
    bool finite = true;
    const float amax = block_amax(x, finite);
    if (!finite) return false;
    float d = amax / 127.0f;
    if (!(d >= FLT_MIN)) d = 0.0f;  // 1/d stays finite; such a block is zero in f16 anyway
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].set_d(Half::from_float(d));
    if (!std::isfinite(f16_to_f32(out[b].d()))) return false;
    for (int j = 0; j < kBlockValues; ++j)
      out[b].qs[j] = static_cast<std::int8_t>(std::clamp(std::round(x[j] * id), -127.0f, 127.0f));
  }
  return true;
}

bool quantize_row_q4_0(const float* x, BlockQ4* out, std::int64_t cols) noexcept {
  for (std::int64_t b = 0; b < cols / kBlockValues; ++b, x += kBlockValues) {
    bool finite = true;
    block_amax(x, finite);
    if (!finite) return false;
    // The signed value of largest magnitude (the first, on a tie) maps to -8.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kBlockValues; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    float d = max / -8.0f;
    if (!(std::fabs(d) >= FLT_MIN)) d = 0.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].set_d(Half::from_float(d));
    if (!std::isfinite(f16_to_f32(out[b].d()))) return false;
    auto nibble = [&](float v) {  // floor(v / d + 8.5) in [0, 15]: ggml's rounding
      return static_cast<std::uint8_t>(std::clamp(std::floor(v * id + 8.5f), 0.0f, 15.0f));
    };
    for (int j = 0; j < kBlockValues / 2; ++j)
      out[b].qs[j] = static_cast<std::uint8_t>(nibble(x[j]) | (nibble(x[j + kBlockValues / 2]) << 4));
  }
  return true;
}

void dequantize_row(WeightFormat format, const std::byte* row, float* out, std::int64_t cols) noexcept {
  switch (format) {
    case WeightFormat::f32:
      std::memcpy(out, row, static_cast<std::size_t>(cols) * sizeof(float));
      return;
    case WeightFormat::bf16:
      for (std::int64_t j = 0; j < cols; ++j) {
        std::uint16_t bits;
        std::memcpy(&bits, row + 2 * j, 2);
        out[j] = BFloat16::to_float(bits);
      }
      return;
    case WeightFormat::q8_0: {
      const auto* blocks = reinterpret_cast<const BlockQ8*>(row);
      for (std::int64_t b = 0; b < cols / kBlockValues; ++b) {
        const float d = f16_to_f32(blocks[b].d());
        for (int j = 0; j < kBlockValues; ++j) out[b * kBlockValues + j] = blocks[b].qs[j] * d;
      }
      return;
    }
    case WeightFormat::q4_0: {
      const auto* blocks = reinterpret_cast<const BlockQ4*>(row);
      for (std::int64_t b = 0; b < cols / kBlockValues; ++b) {
        const float d = f16_to_f32(blocks[b].d());
        for (int j = 0; j < kBlockValues / 2; ++j) {
          out[b * kBlockValues + j] = ((blocks[b].qs[j] & 0x0f) - 8) * d;
          out[b * kBlockValues + j + kBlockValues / 2] = ((blocks[b].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
  }
}

float quantize_activation_block(const float* x, std::int8_t* q) noexcept {
  bool finite = true;
  const float amax = block_amax(x, finite);
  float d = amax / 127.0f;
  if (!finite || !(d >= FLT_MIN)) {
    std::memset(q, 0, kBlockValues);
    return finite ? 0.0f : NAN;
  }
  const float id = 1.0f / d;
  for (int j = 0; j < kBlockValues; ++j)
    q[j] = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[j] * id), -127.0f, 127.0f));
  return d;
}

// ---- the portable kernel ----

namespace {

// Scratch layouts: bf16 x [m, k]; or int8 x [m, k] then f32 scales [m, k / 32].
std::size_t portable_scratch_bytes(const LinearProblem& p) noexcept {
  const auto mk = static_cast<std::size_t>(p.m * p.k);
  switch (p.format) {
    case WeightFormat::f32:
      return 0;
    case WeightFormat::bf16:
      return mk * sizeof(std::uint16_t);
    case WeightFormat::q8_0:
    case WeightFormat::q4_0:
      return align64(mk) + mk / kBlockValues * sizeof(float);
  }
  return 0;
}

void portable_prepare(const LinearProblem& p, std::byte* scratch) noexcept {
  const std::int64_t mk = p.m * p.k;
  if (p.format == WeightFormat::bf16) {
    auto* xb = reinterpret_cast<std::uint16_t*>(scratch);
    for (std::int64_t i = 0; i < mk; ++i) xb[i] = BFloat16::from_float(p.x[i]);
  } else if (p.format != WeightFormat::f32) {
    auto* xq = reinterpret_cast<std::int8_t*>(scratch);
    auto* xd = reinterpret_cast<float*>(scratch + align64(static_cast<std::size_t>(mk)));
    for (std::int64_t b = 0; b < mk / kBlockValues; ++b)
      xd[b] = quantize_activation_block(p.x + b * kBlockValues, xq + b * kBlockValues);
  }
}

// One output: row `m` of x against row `n` of W.
float portable_dot(const LinearProblem& p, const std::byte* scratch, std::int64_t m, std::int64_t n) noexcept {
  const std::byte* row = p.w + static_cast<std::size_t>(n) * p.w_row_bytes;
  float acc = 0.0f;
  switch (p.format) {
    case WeightFormat::f32: {
      const float* x = p.x + m * p.k;
      for (std::int64_t j = 0; j < p.k; ++j) {
        float w;
        std::memcpy(&w, row + 4 * j, 4);
        acc += x[j] * w;
      }
      break;
    }
    case WeightFormat::bf16: {
      const auto* x = reinterpret_cast<const std::uint16_t*>(scratch) + m * p.k;
      for (std::int64_t j = 0; j < p.k; ++j) {
        std::uint16_t w;
        std::memcpy(&w, row + 2 * j, 2);
        acc += BFloat16::to_float(x[j]) * BFloat16::to_float(w);
      }
      break;
    }
    case WeightFormat::q8_0:
    case WeightFormat::q4_0: {
      const std::int64_t nb = p.k / kBlockValues;
      const auto* xq = reinterpret_cast<const std::int8_t*>(scratch) + m * p.k;
      const auto* xd = reinterpret_cast<const float*>(scratch + align64(static_cast<std::size_t>(p.m * p.k))) + m * nb;
      for (std::int64_t b = 0; b < nb; ++b) {
        const std::int8_t* q = xq + b * kBlockValues;
        std::int32_t isum = 0;
        float dw;
        if (p.format == WeightFormat::q8_0) {
          const auto& blk = reinterpret_cast<const BlockQ8*>(row)[b];
          dw = f16_to_f32(blk.d());
          for (int j = 0; j < kBlockValues; ++j) isum += blk.qs[j] * q[j];
        } else {
          const auto& blk = reinterpret_cast<const BlockQ4*>(row)[b];
          dw = f16_to_f32(blk.d());
          for (int j = 0; j < kBlockValues / 2; ++j)
            isum += ((blk.qs[j] & 0x0f) - 8) * q[j] + ((blk.qs[j] >> 4) - 8) * q[j + kBlockValues / 2];
        }
        acc += static_cast<float>(isum) * (dw * xd[b]);
      }
      break;
    }
  }
  return acc;
}

}  // namespace

bool native_available(WeightFormat format) noexcept { return native::available(format); }

LinearKernel best_kernel(WeightFormat format) noexcept {
  return native::available(format) ? LinearKernel::native : LinearKernel::portable;
}

std::size_t scratch_bytes(LinearKernel kernel, const LinearProblem& p) noexcept {
  return kernel == LinearKernel::native ? native::scratch_bytes(p) : portable_scratch_bytes(p);
}

void prepare_activations(LinearKernel kernel, const LinearProblem& p, std::byte* scratch) noexcept {
  if (kernel == LinearKernel::native)
    native::prepare_activations(p, scratch);
  else
    portable_prepare(p, scratch);
}

void compute_rows(LinearKernel kernel, const LinearProblem& p, const std::byte* scratch, std::int64_t n0,
                  std::int64_t n1) noexcept {
  if (kernel == LinearKernel::native) {
    native::compute_rows(p, scratch, n0, n1);
    return;
  }
  for (std::int64_t n = n0; n < n1; ++n)
    for (std::int64_t m = 0; m < p.m; ++m)
      p.y[m * p.n + n] = portable_dot(p, scratch, m, n) + (p.bias ? p.bias[n] : 0.0f);
}

}  // namespace forge::infer::detail
