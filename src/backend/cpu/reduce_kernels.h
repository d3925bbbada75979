#pragma once
// Unchecked CPU kernels for reductions, scans and the fused normalization
// rows (softmax, log_softmax, layer_norm, rms_norm), plus the two pieces of
// arithmetic they share: a vectorizable f32 exp and 16-bit float blocks
// widened to f32. Callers have validated dims, shapes, dtypes and aliasing.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/device_runtime.h"
#include "backend/kernels/reduce.h"
#include "core/convert.h"
#include "forge/dtype.h"
#include "forge/shape.h"

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace forge::cpu {

using backend::ArgReduceArgs;
using backend::ReduceArgs;
using backend::ReduceOp;

// The reduce family's kernels (backend/kernels/reduce.h).
void reduce(detail::DeviceRuntime& rt, ReduceOp op, const ReduceArgs& args);
void arg_reduce(detail::DeviceRuntime& rt, bool is_max, const ArgReduceArgs& args);

// out = running sum of in along dim (out's dtype: i64 for integers and bool,
// else in's; floats accumulate in f64).
void cumsum(detail::DeviceRuntime& rt, const Shape& shape, const Strides& in_strides, const Strides& out_strides,
            int dim, const std::byte* in, DType in_dtype, std::byte* out, DType out_dtype);

// The nn family's fused forward rows (backend/kernels/nn.h).
void softmax(detail::DeviceRuntime& rt, DType dtype, std::int64_t outer, std::int64_t n, std::int64_t inner,
             const std::byte* in, std::byte* out, bool log);
void layer_norm(detail::DeviceRuntime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
                const std::byte* weight, const std::byte* bias, double eps, std::byte* out);
void rms_norm(detail::DeviceRuntime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
              const std::byte* weight, double eps, std::byte* out);

// ---- shared arithmetic ----

// SIMD blocks through GCC/Clang vector extensions: 32 bytes (AVX2 width; an
// AVX-512 core runs them as well, and they keep one ABI for every -march).
using VecF = float __attribute__((vector_size(32)));
using VecU = std::uint32_t __attribute__((vector_size(32)));
using VecD = double __attribute__((vector_size(32)));
inline constexpr int kVecF = 8;

// The widest float block the build runs natively: 64 bytes on AVX-512
// builds, else VecF. For loops that stay inside one file's inline code (no
// vector crosses a call boundary), where AVX-512 doubles the work per op.
#if defined(__AVX512F__)
using VecN = float __attribute__((vector_size(64)));
using VecNU = std::uint32_t __attribute__((vector_size(64)));
inline constexpr int kVecN = 16;
#else
using VecN = VecF;
using VecNU = VecU;
inline constexpr int kVecN = kVecF;
#endif

template <typename X>
inline X load_vec(const void* p) noexcept {
  X v;
  std::memcpy(&v, p, sizeof(X));
  return v;
}
template <typename X>
inline void store_vec(void* p, X v) noexcept {
  std::memcpy(p, &v, sizeof(X));
}
// A scalar, or every lane of a vector, set to v.
template <typename X, typename S>
inline X splat(S v) noexcept {
  return X{} + v;
}

template <typename X>
struct float_bits {
  using type = std::uint32_t;
};
template <>
struct float_bits<VecF> {
  using type = VecU;
};
#if defined(__AVX512F__)
template <>
struct float_bits<VecN> {
  using type = VecNU;
};
#endif

// exp for f32 (a float, a VecF or a VecN): Cody-Waite range reduction and a degree-6
// polynomial (Cephes' expf), about 2 ulp. Inputs below -87.33 give 0 (the
// true value is subnormal) and above 88.37 give inf (2^n must stay a normal
// number; softmax only feeds it x - max <= 0); NaN stays NaN. Bit casts
// rather than float-to-int conversions keep it defined for any input.
template <typename X>
inline X fast_exp(X x) noexcept {
  using U = typename float_bits<X>::type;
  const X lo = splat<X>(-87.33654f), hi = splat<X>(88.37626f);
  X xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const X shifter = splat<X>(12582912.0f);  // 1.5 * 2^23: adding it leaves round(v) in the low mantissa bits
  const X t = xc * 1.44269504088896341f + shifter;
  const X n = t - shifter;
  const U k = std::bit_cast<U>(t) - std::bit_cast<U>(shifter);
  X r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  X p = splat<X>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const X y = p * r * r + r + 1.0f;
  const X scale = std::bit_cast<X>(((k + 127u) & 0xffu) << 23);  // 2^n, n in [-126, 127]
  X result = y * scale;
  result = x < lo ? splat<X>(0.0f) : result;
  result = x > hi ? splat<X>(__builtin_inff()) : result;
  return result;
}

// 16-bit floats to f32 (and back, rounding to nearest even) a block at a
// time: hardware conversions where the target has them.
template <typename T>
inline void widen_block(const T* src, float* dst, std::int64_t n) noexcept {
  std::int64_t i = 0;
  if constexpr (std::is_same_v<T, Half>) {
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(dst + i,
                       _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

template <typename T>
inline void narrow_block(const float* src, T* dst, std::int64_t n) noexcept {
  std::int64_t i = 0;
  if constexpr (std::is_same_v<T, Half>) {
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(dst + i),
          _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  }
  for (; i < n; ++i) dst[i] = T(src[i]);
}

}  // namespace forge::cpu
