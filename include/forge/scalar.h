#pragma once
// Scalar: a number given to an op in place of a tensor (`x + 1`, `clamp(x, 0, 6)`).
// It remembers whether it was written as a bool, an integer or a float, because
// that decides the result dtype as in libtorch: a scalar never widens a tensor
// within its category (i32 + 2 stays i32, f16 * 0.5 stays f16), but a float
// scalar makes an integer or bool tensor's result f32, and an integer scalar
// makes a bool tensor's result i64.

#include <cstdint>
#include <type_traits>

#include "forge/dtype.h"

namespace forge {

class Scalar {
 public:
  enum class Kind : std::uint8_t { boolean, integral, floating };

  template <typename T>
  requires std::is_arithmetic_v<T>
  constexpr Scalar(T v) noexcept {  // NOLINT(google-explicit-constructor): scalars convert implicitly, as in libtorch
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::boolean;
      i_ = v ? 1 : 0;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = Kind::integral;
      i_ = static_cast<std::int64_t>(v);
    } else {
      kind_ = Kind::floating;
      d_ = static_cast<double>(v);
    }
  }

  constexpr Kind kind() const noexcept { return kind_; }
  constexpr bool is_floating() const noexcept { return kind_ == Kind::floating; }
  constexpr bool is_integral() const noexcept { return kind_ == Kind::integral; }
  constexpr bool is_bool() const noexcept { return kind_ == Kind::boolean; }
  double to_double() const noexcept { return kind_ == Kind::floating ? d_ : static_cast<double>(i_); }
  // Integer value; a floating scalar is truncated toward zero (callers that
  // need an exact integer check is_floating first).
  std::int64_t to_int() const noexcept { return kind_ == Kind::floating ? static_cast<std::int64_t>(d_) : i_; }

 private:
  Kind kind_;
  union {
    std::int64_t i_;
    double d_;
  };
};

// The dtype of `tensor (op) scalar` for arithmetic ops (see the header comment).
constexpr DType result_type(DType tensor, const Scalar& s) noexcept {
  if (s.is_floating() && !is_floating(tensor)) return DType::f32;
  if (s.is_integral() && tensor == DType::boolean) return DType::i64;
  return tensor;
}

}  // namespace forge
