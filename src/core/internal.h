#pragma once
// The key that guards forge's trusting constructors (Buffer, TensorImpl):
// only sources that include this private header can make one.

namespace forge::detail {

struct Internal {};
inline constexpr Internal internal{};

}  // namespace forge::detail
