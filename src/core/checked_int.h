#pragma once
// Overflow-checked int64 arithmetic for sizes computed from caller-given
// numbers (window sweeps, padding, splits). A CheckedInt carries its value and
// whether any step that produced it overflowed, so a size formula reads as
// written and is checked once, before anything uses it:
//
//   const CheckedInt padded = CheckedInt(size) + CheckedInt(pad) * 2;
//   FORGE_CHECK(!padded.overflowed(), invalid_argument, op, ...);
//
// value() of an overflowed result is meaningless (the wrapped bits).

#include <cstdint>

namespace forge::detail {

class CheckedInt {
 public:
  constexpr CheckedInt(std::int64_t v) noexcept : v_(v) {}  // NOLINT(google-explicit-constructor): reads as a number

  constexpr bool overflowed() const noexcept { return overflow_; }
  constexpr std::int64_t value() const noexcept { return v_; }

  friend constexpr CheckedInt operator+(CheckedInt a, CheckedInt b) noexcept {
    CheckedInt r(0);
    r.overflow_ = __builtin_add_overflow(a.v_, b.v_, &r.v_) || a.overflow_ || b.overflow_;
    return r;
  }
  friend constexpr CheckedInt operator-(CheckedInt a, CheckedInt b) noexcept {
    CheckedInt r(0);
    r.overflow_ = __builtin_sub_overflow(a.v_, b.v_, &r.v_) || a.overflow_ || b.overflow_;
    return r;
  }
  friend constexpr CheckedInt operator*(CheckedInt a, CheckedInt b) noexcept {
    CheckedInt r(0);
    r.overflow_ = __builtin_mul_overflow(a.v_, b.v_, &r.v_) || a.overflow_ || b.overflow_;
    return r;
  }

 private:
  std::int64_t v_;
  bool overflow_ = false;
};

}  // namespace forge::detail
