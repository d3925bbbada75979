#pragma once
// What the elementwise op files share: the cast rule for `out`, scalars
// converted to a dtype, and the validation of an `_into` destination.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/kernels/elementwise.h"
#include "core/convert.h"
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
// stride 0. Unchecked: integers wrap into narrower integer dtypes and a float
// is truncated into an integer dtype; ops build theirs with checked_slot or
// operand_slot (Note [Scalar conversion] in elementwise.cpp).
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
        v = s.is_floating() ? from_double<T>(s.to_double()) : static_cast<T>(s.to_int());
      } else if constexpr (is_half_v<T>) {
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
      return static_cast<double>(widen(v));
    });
  }
  std::int64_t as_int() const noexcept {
    return dispatch_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      T v;
      std::memcpy(&v, bytes, sizeof v);
      return convert<std::int64_t>(v);
    });
  }
  backend::FlatArg flat() noexcept { return {bytes, dtype, 0}; }
  backend::Operand operand(const Shape& shape) noexcept { return {bytes, dtype, Strides::filled(shape.rank(), 0)}; }
};

// Whether `s` is representable in dtype t (Note [Scalar conversion]).
bool scalar_fits(DType t, Scalar s);

// `s` in dtype t, refusing a value t cannot hold (Note [Scalar conversion]):
// out_of_range naming the op, `what`, the value and the dtype.
ScalarSlot checked_slot(const char* op, DType t, Scalar s, const char* what);

// The scalar operand of an op computing in `compute`: checked when that is an
// integer or bool dtype; a float compute dtype takes any value (it computes
// as libtorch does, in floating point).
ScalarSlot operand_slot(const char* op, DType compute, Scalar s);

// `out` (already checked writable) is of the inputs' context and of `shape`,
// and its dtype a `result` value may be cast into.
void check_out(const char* op, const Tensor& out, const Tensor& in, const Shape& shape, DType result);

inline backend::FlatArg flat_arg(const Tensor& t) noexcept { return {first_element(t), t.dtype(), 1}; }

}  // namespace forge::detail
