#include "forge/dtype.h"

#include <cmath>

namespace forge {

std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
    case DType::i8:
      return "i8";
  }
  return "?";
}

namespace {
// libtorch's lattice restricted to forge's dtypes: a rank inside each kind.
// i8 and u8 share a rank: neither holds the other (promote_types pairs them).
int int_rank(DType t) noexcept {
  switch (t) {
    case DType::u8:
    case DType::i8:
      return 1;
    case DType::i32:
      return 2;
    case DType::i64:
      return 3;
    default:
      return 0;
  }
}
}  // namespace

DType promote_types(DType a, DType b) noexcept {
  if (a == b) return a;
  if (a == DType::boolean) return b;
  if (b == DType::boolean) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    return DType::f32;  // f32 with a 16-bit float, or f16 with bf16
  }
  // libtorch gives i16 for i8 with u8; forge has no i16, and i32 is the
  // smallest forge dtype that holds both ranges.
  if (int_rank(a) == int_rank(b)) return DType::i32;
  return int_rank(a) > int_rank(b) ? a : b;
}

// Round to nearest even. Normal results rebias the exponent and round the
// 13 dropped mantissa bits; results below the smallest normal half are formed
// by an f32 addition that leaves the rounded subnormal in the low bits.
std::uint16_t Half::from_float(float f) noexcept {
  constexpr std::uint32_t kF32Inf = 0xffu << 23;
  constexpr std::uint32_t kOverflow = (127u + 16u) << 23;  // 65536: every value >= rounds to inf
  constexpr std::uint32_t kMinNormal = 113u << 23;         // 2^-14
  constexpr std::uint32_t kSubnormalMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;  // 0.5
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  std::uint32_t h;
  if (u >= kOverflow) {
    h = u > kF32Inf ? 0x7e00u : 0x7c00u;
  } else if (u < kMinNormal) {
    const float shifted = std::bit_cast<float>(u) + std::bit_cast<float>(kSubnormalMagic);
    h = std::bit_cast<std::uint32_t>(shifted) - kSubnormalMagic;
  } else {
    const std::uint32_t odd = (u >> 13) & 1u;
    u += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + odd;
    h = u >> 13;
  }
  return static_cast<std::uint16_t>(h | sign);
}

float Half::to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace forge
