#pragma once
// Element conversions between forge's element types (host code: kernels and ops). 16-bit floats compute in
// f32; float-to-integer conversions saturate (NaN gives 0) instead of being
// undefined; anything to bool is "!= 0".

#include <cstdint>
#include <limits>
#include <type_traits>

#include "forge/dtype.h"

namespace forge {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The type arithmetic on T happens in.
template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <typename T>
inline compute_t<T> widen(T v) noexcept {
  if constexpr (is_half_v<T>)
    return static_cast<float>(v);
  else
    return v;
}

// Reads an element. A bool element is read as its byte ("!= 0"), so memory a
// caller lent (from_blob) holding bytes other than 0 and 1 is still defined.
template <typename T>
inline T load(const T* p) noexcept {
  if constexpr (std::is_same_v<T, bool>)
    return *reinterpret_cast<const std::uint8_t*>(p) != 0;
  else
    return *p;
}

template <typename To, typename From>
inline To convert(From v) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return widen(v) != 0;
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(widen(v)));
  } else if constexpr (std::is_integral_v<To> && (std::is_floating_point_v<From> || is_half_v<From>)) {
    const double d = static_cast<double>(widen(v));
    if (d != d) return To{0};
    if (d <= static_cast<double>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (d >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(d);
  } else {
    return static_cast<To>(widen(v));
  }
}

// A double (a fill value, a random draw) to T.
template <typename T>
inline T from_double(double v) noexcept {
  return convert<T, double>(v);
}

}  // namespace forge
