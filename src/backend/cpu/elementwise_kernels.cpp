#include <type_traits>

#include "backend/cpu/convert.h"
#include "backend/cpu/kernels.h"

namespace forge::cpu {
namespace {

// Integer add and mul wrap around (two's complement), as in libtorch, without
// the undefined behaviour of signed overflow.
template <typename T>
inline T wrap_add(T a, T b) noexcept {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
inline T wrap_mul(T a, T b) noexcept {
  using U = std::make_unsigned_t<T>;
  if constexpr (sizeof(T) < sizeof(unsigned)) {  // u8: promote to unsigned first
    return static_cast<T>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
  } else {
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  }
}

template <BinaryOp Op, typename T>
inline T apply(T a, T b) noexcept {
  if constexpr (std::is_same_v<T, bool>) {
    return Op == BinaryOp::add ? (a || b) : (a && b);
  } else if constexpr (is_half_v<T>) {
    const float x = static_cast<float>(a), y = static_cast<float>(b);
    return T(Op == BinaryOp::add ? x + y : x * y);
  } else if constexpr (std::is_integral_v<T>) {
    return Op == BinaryOp::add ? wrap_add(a, b) : wrap_mul(a, b);
  } else {
    return Op == BinaryOp::add ? a + b : a * b;
  }
}

template <BinaryOp Op, typename T>
void binary_run(T* out, const T* a, const T* b, std::int64_t n, std::int64_t so,
                std::int64_t sa, std::int64_t sb) noexcept {
  if (so == 1 && sa == 1 && sb == 1) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = apply<Op>(load(a + i), load(b + i));
  } else if (so == 1 && sa == 1 && sb == 0) {
    const T y = load(b);
    for (std::int64_t i = 0; i < n; ++i) out[i] = apply<Op>(load(a + i), y);
  } else if (so == 1 && sa == 0 && sb == 1) {
    const T x = load(a);
    for (std::int64_t i = 0; i < n; ++i) out[i] = apply<Op>(x, load(b + i));
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i * so] = apply<Op>(load(a + i * sa), load(b + i * sb));
  }
}

template <BinaryOp Op>
void binary_typed(Runtime& rt, const Shape& shape, const Operand& out, const Operand& a, const Operand& b) {
  const Strides* const strides[3] = {&out.strides, &a.strides, &b.strides};
  const StridedLoop<3> loop(shape, strides);
  const std::int64_t so = loop.strides[0].back(), sa = loop.strides[1].back(), sb = loop.strides[2].back();
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    for_each_run(rt, loop, [&](const std::int64_t (&off)[3], std::int64_t n) {
      binary_run<Op>(reinterpret_cast<T*>(out.data) + off[0], reinterpret_cast<const T*>(a.data) + off[1],
                     reinterpret_cast<const T*>(b.data) + off[2], n, so, sa, sb);
    });
  });
}

}  // namespace

void binary(Runtime& rt, BinaryOp op, const Shape& shape, const Operand& out, const Operand& a,
            const Operand& b) {
  if (op == BinaryOp::add) binary_typed<BinaryOp::add>(rt, shape, out, a, b);
  else binary_typed<BinaryOp::mul>(rt, shape, out, a, b);
}

void binary_contiguous(BinaryOp op, DType dtype, std::int64_t n, std::byte* out, const std::byte* a,
                       const std::byte* b) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* o = reinterpret_cast<T*>(out);
    auto* x = reinterpret_cast<const T*>(a);
    auto* y = reinterpret_cast<const T*>(b);
    if (op == BinaryOp::add) binary_run<BinaryOp::add>(o, x, y, n, 1, 1, 1);
    else binary_run<BinaryOp::mul>(o, x, y, n, 1, 1, 1);
  });
}

void relu(Runtime& rt, const Shape& shape, const Operand& out, const Operand& in) {
  const Strides* const strides[2] = {&out.strides, &in.strides};
  const StridedLoop<2> loop(shape, strides);
  const std::int64_t so = loop.strides[0].back(), si = loop.strides[1].back();
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    for_each_run(rt, loop, [&](const std::int64_t (&off)[2], std::int64_t n) {
      T* o = reinterpret_cast<T*>(out.data) + off[0];
      const T* x = reinterpret_cast<const T*>(in.data) + off[1];
      const T zero = T(compute_t<T>{0});
      // !(v <= 0) keeps NaN, as libtorch does.
      if (so == 1 && si == 1) {
        for (std::int64_t i = 0; i < n; ++i) o[i] = !(widen(x[i]) <= 0) ? x[i] : zero;
      } else {
        for (std::int64_t i = 0; i < n; ++i) o[i * so] = !(widen(x[i * si]) <= 0) ? x[i * si] : zero;
      }
    });
  });
}

}  // namespace forge::cpu
