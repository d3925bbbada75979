#pragma once
// The cpu backend's elementwise kernels (backend/kernels/elementwise.h, which
// they implement): binary ops and comparisons, unary ops and where. Operands
// not in the compute type (Note [Compute dtype] there) are converted through
// small blocks on the stack.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/kernels/elementwise.h"
#include "core/convert.h"

namespace forge::cpu {

using backend::Binary;
using backend::FlatArg;
using backend::gives_bool;
using backend::kNumBinary;
using backend::kNumUnary;
using backend::Unary;
using backend::UnaryParams;

// out = a (op) b over `shape`, operands broadcast (strides 0) as given.
void binary_op(detail::DeviceRuntime& rt, Binary op, DType compute, const Shape& shape, const Operand& out,
               const Operand& a, const Operand& b);
// The same over n elements addressed by (data, stride): no strided setup; for
// contiguous tensors and tensor-scalar forms.
void binary_flat(detail::DeviceRuntime& rt, Binary op, DType compute, std::int64_t n, const FlatArg& out,
                 const FlatArg& a, const FlatArg& b);

// out[r, c] = full[r, c] (op) row[c] (or row[c] (op) full[r, c] when
// row_first) over rows x cols, every operand packed: a bias added to every row.
void binary_rows(detail::DeviceRuntime& rt, Binary op, DType compute, std::int64_t rows, std::int64_t cols,
                 const FlatArg& out, const FlatArg& full, const FlatArg& row, bool row_first);

void unary_op(detail::DeviceRuntime& rt, Unary op, DType compute, const UnaryParams& params, const Shape& shape,
              const Operand& out, const Operand& in);
void unary_flat(detail::DeviceRuntime& rt, Unary op, DType compute, const UnaryParams& params, std::int64_t n,
                const FlatArg& out, const FlatArg& in);

// out = cond ? a : b; cond is bool.
void where_op(detail::DeviceRuntime& rt, DType compute, const Shape& shape, const Operand& out, const Operand& cond,
              const Operand& a, const Operand& b);

// Note [Streaming stores]: above kStreamBytes of output, the ops bound by
// memory bandwidth (add, compare, relu, ...) write through non-temporal stores:
// the output goes to memory without first being read into the cache (a third
// less traffic for a + b) and without evicting the inputs. Ops bound by their
// arithmetic (gelu, exp, pow, ...) store normally: measured on one core,
// streaming stalled gelu's arithmetic (+45% time) while it sped a + b up (-10%).
// Below the threshold outputs stay in cache for the next op to read.
inline constexpr std::int64_t kStreamBytes = std::int64_t{32} << 20;

// ---- the block machinery the kernel files share ----
namespace ew {

// Elements converted per step when an operand is not in the compute type:
// small enough that the blocks of a ternary op stay in L1.
inline constexpr std::int64_t kBlock = 512;

// Integer arithmetic wraps around (two's complement), as in libtorch, without
// the undefined behaviour of signed overflow; u8 promotes to unsigned first.
template <typename T>
using wide_unsigned_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
template <typename T>
inline T wrap_add(T a, T b) noexcept {
  using U = wide_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
inline T wrap_sub(T a, T b) noexcept {
  using U = wide_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T>
inline T wrap_mul(T a, T b) noexcept {
  using U = wide_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

// The C++ types kernels compute in: f16 and bf16 compute as float, i8 as
// int32_t (wrapped back to 8 bits when stored, so results match int8
// arithmetic mod 256).
inline constexpr int kNumCompute = 6;
constexpr int compute_index(DType compute) noexcept {
  switch (compute) {
    case DType::f64:
      return 1;
    case DType::i32:
    case DType::i8:
      return 2;
    case DType::i64:
      return 3;
    case DType::u8:
      return 4;
    case DType::boolean:
      return 5;
    default:
      return 0;
  }
}
// Calls fn(T{}, compute_index) for each compute type T.
template <typename Fn>
constexpr void for_each_compute(Fn&& fn) {
  fn(float{}, 0);
  fn(double{}, 1);
  fn(std::int32_t{}, 2);
  fn(std::int64_t{}, 3);
  fn(std::uint8_t{}, 4);
  fn(bool{}, 5);
}

// The C++ type each compute dtype computes in (f16, bf16: float; i8: int32_t).
template <typename Fn>
decltype(auto) dispatch_compute(DType compute, Fn&& fn) {
  switch (compute) {
    case DType::f64:
      return fn(double{});
    case DType::i32:
    case DType::i8:
      return fn(std::int32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::u8:
      return fn(std::uint8_t{});
    case DType::boolean:
      return fn(bool{});
    default:
      return fn(float{});
  }
}

inline std::byte* advance(std::byte* p, DType dtype, std::int64_t elements) noexcept {
  return p + elements * static_cast<std::int64_t>(dtype_size(dtype));
}
inline FlatArg advance(const FlatArg& a, std::int64_t elements) noexcept {
  return {advance(a.data, a.dtype, elements * a.stride), a.dtype, a.stride};
}

// dst[i] = the element at p + i * stride (any dtype), converted to C.
template <typename C>
void gather(C* dst, const std::byte* p, DType dtype, std::int64_t stride, std::int64_t n) noexcept {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* s = reinterpret_cast<const T*>(p);
    if (stride == 1) {
      for (std::int64_t i = 0; i < n; ++i) dst[i] = convert<C>(load(s + i));
    } else {
      for (std::int64_t i = 0; i < n; ++i) dst[i] = convert<C>(load(s + i * stride));
    }
  });
}

// Stores src[i] at p + i * stride (any dtype), first rounding to the compute
// dtype when that is a 16-bit float or wrapping it when that is i8 (Note
// [Compute dtype]).
template <typename C>
void scatter(std::byte* p, DType dtype, std::int64_t stride, C* src, std::int64_t n, DType compute) noexcept {
  if constexpr (std::is_same_v<C, float>) {
    if (compute == DType::f16 && dtype != DType::f16) {
      for (std::int64_t i = 0; i < n; ++i) src[i] = static_cast<float>(Half(src[i]));
    } else if (compute == DType::bf16 && dtype != DType::bf16) {
      for (std::int64_t i = 0; i < n; ++i) src[i] = static_cast<float>(BFloat16(src[i]));
    }
  } else if constexpr (std::is_same_v<C, std::int32_t>) {
    if (compute == DType::i8 && dtype != DType::i8) {
      for (std::int64_t i = 0; i < n; ++i) src[i] = static_cast<std::int8_t>(src[i]);
    }
  }
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* d = reinterpret_cast<T*>(p);
    if (stride == 1) {
      for (std::int64_t i = 0; i < n; ++i) d[i] = convert<T>(src[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) d[i * stride] = convert<T>(src[i]);
    }
  });
}

// An input read in place: already the compute type, and not bool (bool
// memory is read through load(), byte by byte).
template <typename C>
inline bool direct_input(const FlatArg& a) noexcept {
  return !std::is_same_v<C, bool> && a.dtype == dtype_v<C> && (a.stride == 0 || a.stride == 1);
}

// An input for one block: in place, or converted into buf (a repeated
// element once, at the first block).
template <typename C>
struct BlockInput {
  const FlatArg& arg;
  bool direct;
  C* buf;
  std::int64_t stride;

  BlockInput(const FlatArg& a, C* b) noexcept : arg(a), direct(direct_input<C>(a)), buf(b), stride(a.stride) {
    if (!direct && stride == 0) gather(buf, arg.data, arg.dtype, 0, 1);
  }
  const C* at(std::int64_t i, std::int64_t k) noexcept {
    if (direct) return reinterpret_cast<const C*>(arg.data) + i * stride;
    if (stride == 0) return buf;
    gather(buf, advance(arg.data, arg.dtype, i * stride), arg.dtype, stride, k);
    return buf;
  }
  std::int64_t step() const noexcept { return direct || stride == 0 ? stride : 1; }
};

// memcpy with non-temporal stores for the 64-byte-aligned middle: the data
// goes to memory without first being read into the cache.
void stream_copy(void* dst, const void* src, std::size_t bytes) noexcept;
// Orders streamed stores before whatever the thread does next (the end of a task).
void stream_fence() noexcept;

}  // namespace ew
}  // namespace forge::cpu
