#pragma once
// Element types, their sizes and names, libtorch's promotion rules, and the two
// 16-bit float storage types (conversions round to nearest even).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace forge {

// i8 comes last so the values of the others stay as they were.
enum class DType : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean, i8 };

inline constexpr int kNumDTypes = 9;

constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
    case DType::i8:
    case DType::boolean:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) noexcept;

constexpr bool is_floating(DType t) noexcept {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) noexcept {  // bool excluded, as in libtorch
  return t == DType::i32 || t == DType::i64 || t == DType::u8 || t == DType::i8;
}

// The dtype of a binary op's result (libtorch's promote_types over forge's
// dtypes): bool < integers < floats; f16 with bf16 gives f32; i8 with u8
// gives i32 (libtorch's i16, which forge lacks).
DType promote_types(DType a, DType b) noexcept;

// IEEE binary16 storage. Arithmetic happens in f32.
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) noexcept : bits(from_float(f)) {}
  explicit operator float() const noexcept { return to_float(bits); }
  static std::uint16_t from_float(float f) noexcept;
  static float to_float(std::uint16_t h) noexcept;
};

// bfloat16 storage: the top 16 bits of an f32, rounded to nearest even.
struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) noexcept : bits(from_float(f)) {}
  explicit operator float() const noexcept { return to_float(bits); }
  static std::uint16_t from_float(float f) noexcept {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
  }
  static float to_float(std::uint16_t b) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }
};

// C++ type <-> DType.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<std::int8_t> {
  static constexpr DType value = DType::i8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::boolean;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// Calls fn with a value of the C++ type for `t` (a tag: fn(T{})).
template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(Half{});
    case DType::bf16:
      return fn(BFloat16{});
    case DType::i32:
      return fn(std::int32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::u8:
      return fn(std::uint8_t{});
    case DType::boolean:
      return fn(bool{});
    case DType::i8:
      return fn(std::int8_t{});
  }
  return fn(float{});
}

}  // namespace forge
