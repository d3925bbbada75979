#pragma once
// The per-element math of the cuda backend's kernels, as plain header-only
// C++ that nvcc compiles for the device and g++ for the host: the host build
// is what tests/cuda_math_test.cpp checks against the cpu kernels, so every
// formula here is tested on machines without a GPU.
//
// Policy: each function is the cpu backend's scalar formula (unary_kernels.cpp,
// elementwise_kernels.cpp, unary_backward_kernels.cpp, optim_kernels.cpp,
// core/convert.h), with the same edge semantics: integer arithmetic wraps,
// float-to-integer conversions saturate (NaN gives 0), 16-bit floats compute
// in f32 and are rounded once to the compute dtype before being stored, i8
// computes in i32 and wraps to 8 bits before being stored (Note [Compute
// dtype] in backend/kernels/elementwise.h). The cpu's f32 vector
// paths (vec_math.h) differ from libm by a few ulp; the kernels here use the
// CUDA math library, and tests compare within backend_ops.h's tolerances.
//
// Nothing here may call a host-only function: math goes through the C names
// (expf, ::exp, ...), which both compilers provide for host and device.

#include <math.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/kernels/elementwise.h"
#include "backend/kernels/optim.h"
#include "forge/dtype.h"

#if defined(__CUDACC__)
#define FORGE_HD __host__ __device__
#else
#define FORGE_HD
#endif

namespace forge::cuda {

using backend::Binary;
using backend::Unary;
using backend::UnaryBackward;
using backend::UnaryParams;

// ---- bits ----

FORGE_HD inline std::uint32_t f32_bits(float f) noexcept {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
FORGE_HD inline float f32_from_bits(std::uint32_t u) noexcept {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- 16-bit floats (core/dtype.cpp's Half and BFloat16, bit for bit) ----

// Storage types of the device code (forge::Half converts out of line).
struct f16_t {
  std::uint16_t bits;
};
struct bf16_t {
  std::uint16_t bits;
};

// f32 -> binary16, round to nearest even; NaN stays a (quiet) NaN, overflow is inf.
FORGE_HD inline std::uint16_t f16_from_float(float f) noexcept {
  constexpr std::uint32_t kF32Inf = 0xffu << 23;
  constexpr std::uint32_t kOverflow = (127u + 16u) << 23;  // 65536: every value >= rounds to inf
  constexpr std::uint32_t kMinNormal = 113u << 23;         // 2^-14
  constexpr std::uint32_t kSubnormalMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;  // 0.5
  std::uint32_t u = f32_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  std::uint32_t h;
  if (u >= kOverflow) {
    h = u > kF32Inf ? 0x7e00u : 0x7c00u;
  } else if (u < kMinNormal) {
    // Adding 0.5 lets the FPU round the subnormal's mantissa (to nearest even).
    const float shifted = f32_from_bits(u) + f32_from_bits(kSubnormalMagic);
    h = f32_bits(shifted) - kSubnormalMagic;
  } else {
    const std::uint32_t odd = (u >> 13) & 1u;
    u += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + odd;
    h = u >> 13;
  }
  return static_cast<std::uint16_t>(h | sign);
}

FORGE_HD inline float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
  return f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

FORGE_HD inline std::uint16_t bf16_from_float(float f) noexcept {
  std::uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
FORGE_HD inline float bf16_to_float(std::uint16_t b) noexcept {
  return f32_from_bits(static_cast<std::uint32_t>(b) << 16);
}

// v rounded to the 16-bit compute dtype (Note [Compute dtype]); other dtypes: v.
FORGE_HD inline float round_to(DType compute, float v) noexcept {
  if (compute == DType::f16) return f16_to_float(f16_from_float(v));
  if (compute == DType::bf16) return bf16_to_float(bf16_from_float(v));
  return v;
}

// ---- conversions (core/convert.h) ----

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, f16_t> || std::is_same_v<T, bf16_t>;

// The type arithmetic on T happens in.
template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <typename T>
FORGE_HD inline compute_t<T> widen(T v) noexcept {
  if constexpr (std::is_same_v<T, f16_t>)
    return f16_to_float(v.bits);
  else if constexpr (std::is_same_v<T, bf16_t>)
    return bf16_to_float(v.bits);
  else
    return v;
}

template <typename To, typename From>
FORGE_HD inline To convert(From v) noexcept {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return widen(v) != 0;
  } else if constexpr (std::is_same_v<To, f16_t>) {
    return f16_t{f16_from_float(static_cast<float>(widen(v)))};
  } else if constexpr (std::is_same_v<To, bf16_t>) {
    return bf16_t{bf16_from_float(static_cast<float>(widen(v)))};
  } else if constexpr (std::is_integral_v<To> && (std::is_floating_point_v<From> || is_half_v<From>)) {
    // Saturating, NaN to 0: a plain cast is undefined out of range.
    const double d = static_cast<double>(widen(v));
    if (d != d) return To{0};
    if (d <= static_cast<double>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (d >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(d);
  } else {
    return static_cast<To>(widen(v));
  }
}

// The storage type of each dtype.
template <typename Fn>
FORGE_HD inline decltype(auto) dispatch_storage(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(f16_t{});
    case DType::bf16:
      return fn(bf16_t{});
    case DType::i32:
      return fn(std::int32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::u8:
      return fn(std::uint8_t{});
    case DType::i8:
      return fn(std::int8_t{});
    case DType::boolean:
      return fn(bool{});
    default:
      return fn(float{});
  }
}

// Reads element i of `dtype` at p, converted to C. A bool element is read as
// its byte ("!= 0"), as core/convert.h's load().
template <typename C>
FORGE_HD inline C load_as(const void* p, DType dtype, std::int64_t i) noexcept {
  switch (dtype) {
    case DType::f32:
      return convert<C>(static_cast<const float*>(p)[i]);
    case DType::f64:
      return convert<C>(static_cast<const double*>(p)[i]);
    case DType::f16:
      return convert<C>(static_cast<const f16_t*>(p)[i]);
    case DType::bf16:
      return convert<C>(static_cast<const bf16_t*>(p)[i]);
    case DType::i32:
      return convert<C>(static_cast<const std::int32_t*>(p)[i]);
    case DType::i64:
      return convert<C>(static_cast<const std::int64_t*>(p)[i]);
    case DType::u8:
      return convert<C>(static_cast<const std::uint8_t*>(p)[i]);
    case DType::i8:
      return convert<C>(static_cast<const std::int8_t*>(p)[i]);
    case DType::boolean:
      return convert<C>(static_cast<const std::uint8_t*>(p)[i] != 0);
  }
  return C{};
}

// Stores v as element i of `dtype` at p.
template <typename C>
FORGE_HD inline void store_as(void* p, DType dtype, std::int64_t i, C v) noexcept {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(p)[i] = convert<float>(v);
      return;
    case DType::f64:
      static_cast<double*>(p)[i] = convert<double>(v);
      return;
    case DType::f16:
      static_cast<f16_t*>(p)[i] = convert<f16_t>(v);
      return;
    case DType::bf16:
      static_cast<bf16_t*>(p)[i] = convert<bf16_t>(v);
      return;
    case DType::i32:
      static_cast<std::int32_t*>(p)[i] = convert<std::int32_t>(v);
      return;
    case DType::i64:
      static_cast<std::int64_t*>(p)[i] = convert<std::int64_t>(v);
      return;
    case DType::u8:
      static_cast<std::uint8_t*>(p)[i] = convert<std::uint8_t>(v);
      return;
    case DType::i8:
      static_cast<std::int8_t*>(p)[i] = convert<std::int8_t>(v);
      return;
    case DType::boolean:
      static_cast<bool*>(p)[i] = convert<bool>(v);
      return;
  }
}

// A result computed in C for `compute`, stored as element i of `dtype`: a
// 16-bit compute dtype rounds first, i8 wraps first (Note [Compute dtype]).
template <typename C>
FORGE_HD inline void store_result(void* p, DType dtype, std::int64_t i, C v, DType compute) noexcept {
  if constexpr (std::is_same_v<C, float>) v = round_to(compute, v);  // idempotent when dtype is compute
  if constexpr (std::is_same_v<C, std::int32_t>) {
    if (compute == DType::i8) v = static_cast<std::int8_t>(v);
  }
  store_as<C>(p, dtype, i, v);
}

// ---- math through the C names (host and device) ----

namespace m {
// clang-format off
FORGE_HD inline float exp(float x) noexcept { return ::expf(x); }
FORGE_HD inline double exp(double x) noexcept { return ::exp(x); }
FORGE_HD inline float expm1(float x) noexcept { return ::expm1f(x); }
FORGE_HD inline double expm1(double x) noexcept { return ::expm1(x); }
FORGE_HD inline float log(float x) noexcept { return ::logf(x); }
FORGE_HD inline double log(double x) noexcept { return ::log(x); }
FORGE_HD inline float log1p(float x) noexcept { return ::log1pf(x); }
FORGE_HD inline double log1p(double x) noexcept { return ::log1p(x); }
FORGE_HD inline float sqrt(float x) noexcept { return ::sqrtf(x); }
FORGE_HD inline double sqrt(double x) noexcept { return ::sqrt(x); }
FORGE_HD inline float sin(float x) noexcept { return ::sinf(x); }
FORGE_HD inline double sin(double x) noexcept { return ::sin(x); }
FORGE_HD inline float cos(float x) noexcept { return ::cosf(x); }
FORGE_HD inline double cos(double x) noexcept { return ::cos(x); }
FORGE_HD inline float tanh(float x) noexcept { return ::tanhf(x); }
FORGE_HD inline double tanh(double x) noexcept { return ::tanh(x); }
FORGE_HD inline float erf(float x) noexcept { return ::erff(x); }
FORGE_HD inline double erf(double x) noexcept { return ::erf(x); }
FORGE_HD inline float erfc(float x) noexcept { return ::erfcf(x); }
FORGE_HD inline double erfc(double x) noexcept { return ::erfc(x); }
FORGE_HD inline float pow(float x, float y) noexcept { return ::powf(x, y); }
FORGE_HD inline double pow(double x, double y) noexcept { return ::pow(x, y); }
FORGE_HD inline float abs(float x) noexcept { return ::fabsf(x); }
FORGE_HD inline double abs(double x) noexcept { return ::fabs(x); }
// clang-format on
}  // namespace m

// ---- integer arithmetic wraps (two's complement), as in libtorch ----

template <typename T>
using wide_unsigned_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
template <typename T>
FORGE_HD inline T wrap_add(T a, T b) noexcept {
  using U = wide_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
FORGE_HD inline T wrap_sub(T a, T b) noexcept {
  using U = wide_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T>
FORGE_HD inline T wrap_mul(T a, T b) noexcept {
  using U = wide_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

// libtorch's integer pow: repeated squaring (wrapping); a negative exponent
// gives 0 except for the bases 1 and -1.
template <typename T>
FORGE_HD inline T int_pow(T base, T exponent) noexcept {
  if constexpr (std::is_signed_v<T>) {
    if (exponent < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exponent % 2) ? T(-1) : T(1);
      return 0;
    }
  }
  T result = 1;
  while (exponent) {
    if (exponent & 1) result = wrap_mul(result, base);
    exponent = static_cast<T>(exponent / 2);
    base = wrap_mul(base, base);
  }
  return result;
}

// ---- binary ops ----

// The compute types: f16 and bf16 compute as float.
template <typename C>
inline constexpr bool is_float_v = std::is_floating_point_v<C>;

// Whether the cpu backend computes `op` in C (div: floats only; sub and pow:
// not bool). The ops never ask for the others.
template <typename C>
FORGE_HD constexpr bool binary_supported(Binary op) noexcept {
  if (std::is_same_v<C, bool> && (op == Binary::sub || op == Binary::pow)) return false;
  return !(op == Binary::div && !is_float_v<C>);
}

// a (op) b for the ops whose result is in the compute type (add .. minimum).
template <typename C>
FORGE_HD inline C binary_arith(Binary op, C a, C b) noexcept {
  constexpr bool kFloat = is_float_v<C>;
  constexpr bool kBool = std::is_same_v<C, bool>;
  switch (op) {
    case Binary::add:
      if constexpr (kBool)
        return a || b;
      else if constexpr (kFloat)
        return a + b;
      else
        return wrap_add(a, b);
    case Binary::sub:
      if constexpr (kBool)
        return C{};
      else if constexpr (kFloat)
        return a - b;
      else
        return wrap_sub(a, b);
    case Binary::mul:
      if constexpr (kBool)
        return a && b;
      else if constexpr (kFloat)
        return a * b;
      else
        return wrap_mul(a, b);
    case Binary::div:
      if constexpr (kFloat)
        return a / b;
      else
        return C{};
    case Binary::pow:
      if constexpr (kFloat)
        return m::pow(a, b);
      else if constexpr (kBool)
        return C{};
      else
        return int_pow(a, b);
    case Binary::maximum:  // NaN from either side, as libtorch
      if constexpr (kFloat)
        return (a < b || b != b) ? b : a;
      else
        return a < b ? b : a;
    case Binary::minimum:
      if constexpr (kFloat)
        return (b < a || b != b) ? b : a;
      else
        return b < a ? b : a;
    default:
      return C{};
  }
}

// a (op) b for the comparisons and logical ops (eq .. logical_or).
template <typename C>
FORGE_HD inline bool binary_compare(Binary op, C a, C b) noexcept {
  switch (op) {
    case Binary::eq:
      return a == b;
    case Binary::ne:
      return a != b;
    case Binary::lt:
      return a < b;
    case Binary::le:
      return a <= b;
    case Binary::gt:
      return a > b;
    case Binary::ge:
      return a >= b;
    case Binary::logical_and:
      return a != C(0) && b != C(0);
    case Binary::logical_or:
      return a != C(0) || b != C(0);
    default:
      return false;
  }
}

// One element of a binary op: operands converted to C, the result stored as
// the out dtype (Note [Compute dtype]).
template <typename C>
FORGE_HD inline void binary_element(Binary op, DType compute, void* out, DType out_dtype, std::int64_t io, C a,
                                    C b) noexcept {
  if (backend::gives_bool(op))
    store_as<bool>(out, out_dtype, io, binary_compare<C>(op, a, b));
  else
    store_result<C>(out, out_dtype, io, binary_arith<C>(op, a, b), compute);
}

// ---- unary ops ----

// Whether the cpu backend computes `op` in C: exp .. erf only in floats; bool
// only abs and sign.
template <typename C>
FORGE_HD constexpr bool unary_supported(Unary op) noexcept {
  if (op >= Unary::exp) return is_float_v<C>;
  return !(std::is_same_v<C, bool> && op != Unary::abs && op != Unary::sign);
}

// The parameters in the compute type, converted once per launch.
template <typename C>
struct UnaryConsts {
  C p0, p1, lo, hi;
  bool has_lo, has_hi;
};
template <typename C>
inline UnaryConsts<C> unary_consts(const UnaryParams& p) noexcept {
  return {static_cast<C>(p.p0),
          static_cast<C>(p.p1),
          is_float_v<C> ? static_cast<C>(p.lo) : static_cast<C>(p.lo_int),
          is_float_v<C> ? static_cast<C>(p.hi) : static_cast<C>(p.hi_int),
          p.has_lo,
          p.has_hi};
}

inline constexpr double kSqrt1_2 = 0.707106781186547524400844362104849039;
inline constexpr double kInvSqrt2Pi = 0.398942280401432677939946059934381868;  // 1 / sqrt(2 pi)
inline constexpr double kSqrt2OverPi = 0.797884560802865355879892119868763737;
inline constexpr double kGeluKappa = 0.044715;

// sigmoid(z) and sigmoid(z) sigmoid(-z) from e = e^-|z|, neither cancelling
// (Note [Activation tails] in backend/cpu/vec_math.h).
template <typename C>
struct Logistic {
  C sig, sig_both;
};
template <typename C>
FORGE_HD inline Logistic<C> logistic(C z) noexcept {
  const C e = m::exp(-m::abs(z)), r = C(1) / (C(1) + e);
  return {z < C(0) ? e * r : r, e * r * r};
}

template <typename C>
FORGE_HD inline C unary_value(Unary op, C x, const UnaryConsts<C>& p) noexcept {
  constexpr bool kFloat = is_float_v<C>;
  switch (op) {
    case Unary::neg:
      if constexpr (kFloat)
        return -x;
      else if constexpr (std::is_same_v<C, bool>)
        return x;
      else
        return wrap_sub(C(0), x);
    case Unary::abs:
      if constexpr (kFloat)
        return m::abs(x);
      else if constexpr (std::is_signed_v<C>)
        return x < 0 ? wrap_sub(C(0), x) : x;
      else
        return x;
    case Unary::sign:
      if constexpr (std::is_same_v<C, bool>)
        return x;
      else if constexpr (std::is_unsigned_v<C>)
        return static_cast<C>(x != 0);
      else
        return static_cast<C>((C(0) < x) - (x < C(0)));  // NaN gives 0, as libtorch
    case Unary::square:
      if constexpr (kFloat)
        return x * x;
      else if constexpr (std::is_same_v<C, bool>)
        return x;
      else
        return wrap_mul(x, x);
    case Unary::relu:
      return !(x <= C(0)) ? x : C(0);  // keeps NaN
    case Unary::clamp:
      // NaN in x or in a bound propagates, as libtorch's min(max(x, lo), hi).
      if (p.has_lo) x = (x < p.lo || p.lo != p.lo) ? p.lo : x;
      if (p.has_hi) x = (p.hi < x || p.hi != p.hi) ? p.hi : x;
      return x;
    default:
      break;
  }
  if constexpr (!kFloat) {
    return x;  // the float-only ops are never asked of integers (unary_supported)
  } else {
    switch (op) {
      case Unary::exp:
        return m::exp(x);
      case Unary::expm1:
        return m::expm1(x);
      case Unary::log:
        return m::log(x);
      case Unary::log1p:
        return m::log1p(x);
      case Unary::sqrt:
        return m::sqrt(x);
      case Unary::rsqrt:
        return C(1) / m::sqrt(x);
      case Unary::reciprocal:
        return C(1) / x;
      case Unary::sin:
        return m::sin(x);
      case Unary::cos:
        return m::cos(x);
      case Unary::tanh:
        return m::tanh(x);
      case Unary::sigmoid:
        return logistic(x).sig;
      case Unary::leaky_relu:
        return x > C(0) ? x : x * p.p0;
      case Unary::gelu:
        return C(0.5) * x * m::erfc(-x * C(kSqrt1_2));  // x Phi(x)
      case Unary::gelu_tanh: {                          // 0.5 x (1 + tanh u) = x sigmoid(2u)
        const C z = C(2 * kSqrt2OverPi) * (x + C(kGeluKappa) * x * x * x);
        return x * logistic(z).sig;
      }
      case Unary::silu: {
        const C e = m::exp(-m::abs(x));
        return (x < C(0) ? x * e : x) / (C(1) + e);
      }
      case Unary::softplus: {
        const C bx = x * p.p0;
        return bx > p.p1 ? x : m::log1p(m::exp(bx)) / p.p0;
      }
      case Unary::elu:
        return x <= C(0) ? m::expm1(x) * p.p0 : x;
      case Unary::erf:
        return m::erf(x);
      default:
        return x;
    }
  }
}

// ---- fused activation VJPs (unary_backward_kernels.cpp): g * f'(saved) ----

template <typename C>
FORGE_HD inline C unary_backward_value(UnaryBackward op, C g, C s) noexcept {
  switch (op) {
    case UnaryBackward::relu:  // threshold_backward: a NaN output passes the gradient
      return s <= C(0) ? C(0) : g;
    case UnaryBackward::sigmoid:
      return g * s * (C(1) - s);
    case UnaryBackward::tanh:
      return g * (C(1) - s * s);
    case UnaryBackward::gelu: {
      const C cdf = C(0.5) * m::erfc(-s * C(kSqrt1_2));
      const C pdf = m::exp(C(-0.5) * s * s) * C(kInvSqrt2Pi);
      return g * (cdf + s * pdf);
    }
    case UnaryBackward::gelu_tanh: {
      const C s2 = s * s;
      const Logistic<C> l = logistic(C(2 * kSqrt2OverPi) * (s + C(kGeluKappa) * s2 * s));
      const C s2c = s2 < C(1e36) ? s2 : C(1e36);  // keeps z' finite where sig_both is 0 (NaN stays)
      return g * (l.sig + s * l.sig_both * C(2 * kSqrt2OverPi) * (C(1) + C(3 * kGeluKappa) * s2c));
    }
    case UnaryBackward::silu: {
      const Logistic<C> l = logistic(s);
      return g * (l.sig + s * l.sig_both);
    }
  }
  return g;
}

// ---- optimizer updates (optim_kernels.cpp), per element ----

// The step's numbers in T, converted once per launch.
template <typename T>
struct AdamConsts {
  T b1, b2, one_b1, one_b2, step, inv_sqrt_bc2, eps, wd, decay;
  bool decoupled;
};
template <typename T>
inline AdamConsts<T> adam_consts(const backend::AdamStep& s) noexcept {
  return {static_cast<T>(s.beta1),
          static_cast<T>(s.beta2),
          static_cast<T>(1 - s.beta1),
          static_cast<T>(1 - s.beta2),
          static_cast<T>(s.lr / s.bias_correction1),
          static_cast<T>(1 / ::sqrt(s.bias_correction2)),
          static_cast<T>(s.eps),
          static_cast<T>(s.weight_decay),
          static_cast<T>(1 - s.lr * s.weight_decay),
          s.decoupled};
}
// One Adam/AdamW update of param, exp_avg and exp_avg_sq from grad.
template <typename T>
FORGE_HD inline void adam_update(const AdamConsts<T>& c, T& param, T grad, T& exp_avg, T& exp_avg_sq) noexcept {
  T g = grad;
  T p = param;
  if (c.decoupled)
    p *= c.decay;
  else
    g += c.wd * p;
  const T mm = c.b1 * exp_avg + c.one_b1 * g;
  const T v = c.b2 * exp_avg_sq + c.one_b2 * g * g;
  exp_avg = mm;
  exp_avg_sq = v;
  param = p - c.step * mm / (m::sqrt(v) * c.inv_sqrt_bc2 + c.eps);
}

template <typename T>
struct SgdConsts {
  T lr, wd, mom, one_damp;
  bool nesterov, first;
};
template <typename T>
inline SgdConsts<T> sgd_consts(const backend::SgdStep& s) noexcept {
  return {static_cast<T>(s.lr),
          static_cast<T>(s.weight_decay),
          static_cast<T>(s.momentum),
          static_cast<T>(1 - s.dampening),
          s.nesterov,
          s.first};
}
// One SGD update; buf is null without momentum.
template <typename T>
FORGE_HD inline void sgd_update(const SgdConsts<T>& c, T& param, T grad, T* buf) noexcept {
  const T p = param;
  T d = grad + c.wd * p;
  if (buf != nullptr) {
    const T b = c.first ? d : c.mom * *buf + c.one_damp * d;
    *buf = b;
    d = c.nesterov ? d + c.mom * b : b;
  }
  param = p - c.lr * d;
}

// max that keeps a NaN (norm_power_sum's infinity norm).
FORGE_HD inline double nan_max(double acc, double v) noexcept { return v > acc || v != v ? v : acc; }

// |x|^p's contribution to norm_power_sum: p = 1, 2 and the rest (p infinite: |x|, max-combined).
FORGE_HD inline double norm_term(double x, double p, bool inf) noexcept {
  const double a = m::abs(x);
  if (inf || p == 1) return a;
  if (p == 2) return x * x;
  return m::pow(a, p);
}

// ---- row math of the nn family (norm_kernels.cpp, loss_kernels.cpp, nn_backward_kernels.cpp) ----

// layer_norm's (centred) or rms_norm's output of one element from its row's
// mean (0 for rms) and 1/std; w and b may be absent.
template <typename C>
FORGE_HD inline C norm_value(C x, C mean, C rstd, const C* w, const C* b, std::int64_t i) noexcept {
  C v = (x - mean) * rstd;
  if (w != nullptr) v = v * w[i];
  if (b != nullptr) v = v + b[i];
  return v;
}
// 1/std from the row's mean squared deviation (f64) and eps.
FORGE_HD inline double norm_rstd(double var, double eps) noexcept { return 1.0 / m::sqrt(var + eps); }

// softmax's (log: log_softmax's) output of one element from its row's max
// and sum of exp(x - max) (f64).
template <typename C>
FORGE_HD inline C softmax_value(C x, C max, double sum, bool log) noexcept {
  if (log) return x - (max + static_cast<C>(m::log(sum)));
  return m::exp(x - max) * static_cast<C>(1.0 / sum);
}
// softmax_backward per element: y (g - dot) with dot = sum(g y); log_softmax:
// g - exp(y) sum(g).
template <typename C>
FORGE_HD inline C softmax_backward_value(C y, C g, double row_sum, bool log) noexcept {
  if (log) return g - m::exp(y) * static_cast<C>(row_sum);
  return y * (g - static_cast<C>(row_sum));
}

// cross_entropy's loss of a row from logsumexp, the target's logit and the
// row's mean logit (label smoothing ls).
FORGE_HD inline double cross_entropy_loss(double lse, double x_target, double x_mean, double ls) noexcept {
  const double nll = lse - x_target;
  return ls == 0 ? nll : (1 - ls) * nll + ls * (lse - x_mean);
}
// cross_entropy's gradient at one class (nn_backward_kernels.cpp): e =
// exp(x - max), a = scale / sum(e), b = scale * ls / classes; the target
// class takes scale * (1 - ls) off.
template <typename T>
FORGE_HD inline T cross_entropy_grad(T e, T a, T b, bool is_target, double scale, double ls) noexcept {
  T d = e * a - b;
  if (is_target) d -= static_cast<T>(scale * (1.0 - ls));
  return d;
}

// Whether x is finite (not inf, not NaN).
FORGE_HD inline bool finite(double x) noexcept { return x - x == 0; }

// The power of two that brings big (> 0, finite) into [1, 2) (Note
// [Statistics of huge rows] in backend/cpu/row_moments.h); 1 for 0.
FORGE_HD inline double magnitude_scale(double big) noexcept { return big > 0 ? ::ldexp(1.0, -::ilogb(big)) : 1.0; }

}  // namespace forge::cuda
