#pragma once
// What the elementwise op files share: the cast rule for `out`, scalars
// converted to a dtype, and the validation of an `_into` destination.

#include <cstdint>

#include "backend/cpu/elementwise_kernels.h"
#include "core/tensor_internal.h"
#include "forge/scalar.h"

namespace forge::detail {

// Whether a value of dtype `from` may be written into `to` (libtorch's
// can_cast: no float into an integer, nothing non-bool into bool).
constexpr bool can_cast(DType from, DType to) noexcept {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::boolean && to == DType::boolean) return false;
  return true;
}

// A scalar stored as one element of a dtype, for the kernels to read with
// stride 0. Integers wrap into narrower integer dtypes (libtorch's cast of a
// wrapped number); a float scalar is truncated into an integer dtype.
struct ScalarSlot {
  alignas(8) std::byte bytes[8] = {};
  DType dtype = DType::f32;

  ScalarSlot() = default;
  ScalarSlot(DType t, Scalar s) noexcept : dtype(t) {
    dispatch_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      T v;
      if constexpr (std::is_same_v<T, bool>) {
        v = s.is_floating() ? s.to_double() != 0 : s.to_int() != 0;
      } else if constexpr (std::is_integral_v<T>) {
        v = s.is_floating() ? cpu::from_double<T>(s.to_double()) : static_cast<T>(s.to_int());
      } else if constexpr (cpu::is_half_v<T>) {
        v = T(static_cast<float>(s.to_double()));
      } else {
        v = static_cast<T>(s.to_double());
      }
      std::memcpy(bytes, &v, sizeof v);
    });
  }

  std::byte* data() noexcept { return bytes; }
  double as_double() const noexcept {
    return dispatch_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      T v;
      std::memcpy(&v, bytes, sizeof v);
      return static_cast<double>(cpu::widen(v));
    });
  }
  std::int64_t as_int() const noexcept {
    return dispatch_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      T v;
      std::memcpy(&v, bytes, sizeof v);
      return cpu::convert<std::int64_t>(v);
    });
  }
  cpu::FlatArg flat() noexcept { return {bytes, dtype, 0}; }
  cpu::Operand operand(const Shape& shape) noexcept { return {bytes, dtype, Strides::filled(shape.rank(), 0)}; }
};

// `s` in dtype t, refusing a value t cannot hold (libtorch's checked scalar
// conversion for fill values and bounds): out_of_range naming `what`.
ScalarSlot checked_slot(const char* op, DType t, Scalar s, const char* what);

// `out` (already checked writable) is of the inputs' context and of `shape`,
// and its dtype a `result` value may be cast into.
void check_out(const char* op, const Tensor& out, const Tensor& in, const Shape& shape, DType result);

inline cpu::FlatArg flat_arg(const Tensor& t) noexcept { return {first_element(t), t.dtype(), 1}; }

}  // namespace forge::detail
