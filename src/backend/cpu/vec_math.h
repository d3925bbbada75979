#pragma once
// Vectorized f32 math for the elementwise kernels: exp, erf, tanh and what is
// built from them, on 16-lane GCC/Clang vector types (one AVX-512 register,
// two AVX2 registers; the compiler lowers them to whatever the target has).
// NaN propagates through every function, and the clamps are written so that
// comparisons with NaN keep the NaN.
//
// Note [Activation tails]: the activations are written so that no result
// comes from a difference of nearly equal numbers, which in f32 rounds a
// tail to exactly 0 (gelu_tanh(-5) was 0; true -2.3e-7): sigmoid takes
// e^-|x| and divides on the side that does not cancel, gelu_tanh is
// x * sigmoid(2u) (0.5 (1 + tanh u) with no 1 + tanh), gelu_erf takes the
// normal tail Phi(-|x|) as the Mills ratio times e^(-x^2/2), and tanh is
// m / (-2 - m) with m = expm1(-2|x|). Accuracy against long double over
// every f32 exponent (tests/unary_test.cpp): exp 1 ulp; tanh 5 ulp;
// sigmoid, silu, both gelus and their gradients 4 ulp, plus the error
// inherent in rounding their argument where they are steep (the tests bound
// it by the condition number); results below |x|^3 2^-126 may flush to 0
// (exp_decay).
//
// Speed: each activation is one formula for every lane, with no branch on
// the data, one exp reduction and one division, so that tail-heavy inputs
// cost what typical ones do; with AVX-512, 2^n is applied by vscalefps with
// the flush as its zero mask.

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace forge::cpu::vec {

inline constexpr int kLanes = 16;
using vf = float __attribute__((vector_size(64)));
using vi = std::int32_t __attribute__((vector_size(64)));

inline vf splat(float v) noexcept { return vf{} + v; }

inline vf loadu(const float* p) noexcept {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storeu(float* p, vf v) noexcept { std::memcpy(p, &v, sizeof v); }

// Clamp into [lo, hi]; a NaN lane stays NaN (both comparisons are false).
inline vf clamp(vf x, float lo, float hi) noexcept {
  x = x < lo ? splat(lo) : x;
  return x > hi ? splat(hi) : x;
}

// |x|, by clearing the sign bit (NaN stays NaN).
inline vf abs(vf x) noexcept { return reinterpret_cast<vf>(reinterpret_cast<vi>(x) & 0x7fffffff); }

// min(x, hi); a NaN lane stays NaN.
inline vf min(vf x, float hi) noexcept {
#if defined(__AVX512F__)
  // vminps gives its second operand where either is NaN. (The masked form: GCC 12's
  // _mm512_min_ps warns of its undefined pass-through operand.)
  return vf(_mm512_maskz_min_ps(__mmask16(0xffff), _mm512_set1_ps(hi), __m512(x)));
#else
  return x > hi ? splat(hi) : x;
#endif
}

inline constexpr float kExpRound = 12582912.0f;       // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float kNormalEnd = -87.3365447505f;  // ln(2^-126): below, e^x is subnormal
inline constexpr float kLog2e = 1.44269504088896341f;

// -|x|, by setting the sign bit.
inline vf neg_abs(vf x) noexcept {
  return reinterpret_cast<vf>(reinterpret_cast<vi>(x) | static_cast<std::int32_t>(0x80000000));
}

// |m| with the sign of s.
inline vf copysign(vf m, vf s) noexcept {
  return reinterpret_cast<vf>((reinterpret_cast<vi>(m) & 0x7fffffff) |
                              (reinterpret_cast<vi>(s) & static_cast<std::int32_t>(0x80000000)));
}

// 2^n for t = n + kExpRound (n in t's low bits), -126 <= n <= 127.
inline vf pow2(vf t) noexcept {
  return reinterpret_cast<vf>((reinterpret_cast<vi>(t) - reinterpret_cast<vi>(splat(kExpRound)) + 127) << 23);
}

// e^x within 1 ulp (Cephes' polynomial). Below -104 the result is 0, above
// 88.8 it is inf; between, 2^n is applied as two factors so that subnormal
// results come out right.
inline vf exp(vf x) noexcept {
  x = clamp(x, -104.0f, 88.8f);
  const vf t = x * kLog2e + kExpRound;
  const vf n = t - kExpRound;
  vf r = x - n * 0.693359375f;  // exact (Cody and Waite)
  r = r - n * -2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const vi ni = reinterpret_cast<vi>(t) - reinterpret_cast<vi>(splat(kExpRound));
  const vi half = ni >> 1;
  const vf s1 = reinterpret_cast<vf>((half + 127) << 23);
  const vf s2 = reinterpret_cast<vf>((ni - half + 127) << 23);
  return p * s1 * s2;
}

// m e^a for a <= 0 (NaN propagates), flushed to 0 below `flush` (whatever
// m is there); flush >= kNormalEnd, so that e^a is never subnormal. The
// activations take their e^-|z| this way: the subnormals would only reach
// results below |x|^3 2^-126, and subnormal arithmetic costs several times a
// normal lane's. e^r on [-ln2/2, ln2/2] is a degree-6 minimax fit (relative
// error 3e-9), and the reduction takes ln 2 in one constant, which adds
// |a| 3e-9 relative: within 1 ulp + |a| 3e-9, inside the activations' steep
// allowance. 2^n goes on last, so that a flushed lane is 0 even where m is
// not finite.
inline vf exp_decay_times(vf a, vf m, float flush = kNormalEnd) noexcept {
  const vf t = a * kLog2e + kExpRound;
  const vf n = t - kExpRound;
  const vf r = a - n * 0.693147182464599609375f;
  vf p = r * 1.382136135e-3f + 8.368669078e-3f;
  p = p * r + 4.166825861e-2f;
  p = p * r + 1.666652113e-1f;
  p = p * r + 4.999999404e-1f;
  p = p * r + 1.0f;
  p = (p * r + 1.0f) * m;
#if defined(__AVX512F__)
  const __mmask16 keep = _mm512_cmp_ps_mask(__m512(a), _mm512_set1_ps(flush), _CMP_NLT_UQ);
  return vf(_mm512_maskz_scalef_ps(keep, __m512(p), __m512(n)));
#else
  const vf e = p * pow2(t);
  return a < flush ? splat(0.0f) : e;
#endif
}
inline vf exp_decay(vf a) noexcept { return exp_decay_times(a, splat(1.0f)); }

// erf, rational approximation on [-3.92, 3.92]; beyond, erf rounds to +-1 in
// f32, and returning exactly +-1 there keeps 1 + erf(x) at 0 for gelu.
inline vf erf(vf a) noexcept {
  const vf x = clamp(a, -3.92f, 3.92f);
  const vf x2 = x * x;
  vf p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * x;
  vf q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  const vf r = p / q;
  return x == 3.92f ? splat(1.0f) : x == -3.92f ? splat(-1.0f) : r;
}

// tanh |x| = m / (-2 - m) with m = e^(-2|x|) - 1 = 2^n (1 + q) - 1 and
// q = e^(-2r) - 1 for -2|x| = n ln2 - 2r (q a degree-6 minimax fit in r,
// relative error 1.4e-8), so that small |x| lose nothing to cancellation and
// tanh reaches +-1 only where f32 tanh does (|x| > 9.01: tanh(-8) is
// -0.99999976, not -1). Within 3 ulp.
inline vf tanh(vf x) noexcept {
  const vf ax = min(abs(x), 9.5f);  // tanh is 1 from 9.01; keeps n >= -28
  const vf t = ax * (-2.0f * kLog2e) + kExpRound;
  const vf n = t - kExpRound;
  const vf r = n * 0.3465735912323f + ax;  // ln2 / 2 in one constant: moves m by |n| 2^n 1e-9
  vf p = r * 8.875021338e-2f + -2.677245438e-1f;
  p = p * r + 6.666795612e-1f;
  p = p * r + -1.333323598f;
  p = p * r + 1.999999881f;
  p = p * r + -2.0f;
  const vf s = pow2(t);
  const vf m = s * (p * r) + (s - 1.0f);  // s - 1 is exact while it matters (n > -25)
  return copysign(m / (-2.0f - m), x);
}

// 1 / (1 + e^-x) from e = e^-|x|: 1 / (1 + e) for x >= 0 and e / (1 + e)
// below, which keeps its precision down to the subnormals.
inline vf sigmoid(vf x) noexcept {
  const vf e = exp_decay(neg_abs(x));
  const vf r = 1.0f / (1.0f + e);
  return x < 0 ? e * r : r;
}

// x * sigmoid(x), the same way.
inline vf silu(vf x) noexcept {
  const vf e = exp_decay(neg_abs(x));
  return (x < 0 ? x * e : x) / (1.0f + e);
}

// 0.5 (1 + tanh u) = sigmoid(2u) with 2u = z = 2 sqrt(2/pi) (x + 0.044715 x^3).
// sig(z) and sig(-z) from e = e^-|z|; their product is e r^2.
struct TanhGate {
  vf z, e, r;  // r = 1 / (1 + e)
  vf sig() const noexcept { return z < 0 ? e * r : r; }
};
inline TanhGate tanh_gate(vf x) noexcept {
  TanhGate g;
  g.z = x * ((x * x) * (1.595769121605730712f * 0.044715f) + 1.595769121605730712f);
  g.e = exp_decay(neg_abs(g.z));
  g.r = 1.0f / (1.0f + g.e);
  return g;
}

inline vf gelu_tanh(vf x) noexcept { return x * tanh_gate(x).sig(); }

// d/dx gelu_tanh = sig(z) + x sig(z) sig(-z) z', z' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (x^2 clamped in z', so that past |x| = 1e18 it does not overflow where sig(-z) is 0).
inline vf gelu_tanh_grad(vf x) noexcept {
  const TanhGate g = tanh_gate(x);
  const vf dz = min(x * x, 1e36f) * (1.595769121605730712f * 0.134145f) + 1.595769121605730712f;
  return g.sig() + x * (g.e * g.r * g.r) * dz;
}

// d/dx silu = sig(x) + x sig(x) sig(-x).
inline vf silu_grad(vf x) noexcept {
  const vf e = exp_decay(neg_abs(x));
  const vf r = 1.0f / (1.0f + e);
  return (x < 0 ? e * r : r) + x * (e * r * r);
}

// The standard normal's tail Phi(-|x|) = M(|x|) e^(-x^2/2), with M the Mills
// ratio over sqrt(2 pi): a (4, 5) rational fit on [0, 13.3], relative error
// 1.6e-8 (beyond, e^(-x^2/2) is flushed). Phi is the tail below 0 and
// 1 - tail above. The tail is flushed from e^(-x^2/2) < 2^-120, where M e^..
// could be subnormal: results there are below |x|^3 2^-126.
inline constexpr float kNormalTailEnd = -83.17766166719343f;  // ln(2^-120)

inline vf mills(vf a) noexcept {
  vf p = a * 4.020819440e-3f + 3.999086842e-2f;
  p = p * a + 1.813275218e-1f;
  p = p * a + 4.357143044e-1f;
  p = p * a + 0.5f;
  vf q = a * 1.007855590e-2f + 1.002496332e-1f;
  q = q * a + 4.644338787e-1f;
  q = q * a + 1.194570780f;
  q = q * a + 1.669313431f;
  q = q * a + 1.0f;
  return p / q;
}

inline vf gelu_erf(vf x) noexcept {
  const vf tail = exp_decay_times(-0.5f * (x * x), mills(abs(x)), kNormalTailEnd);
  return x * (x < 0 ? tail : 1.0f - tail);
}

// d/dx gelu_erf = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi).
inline vf gelu_erf_grad(vf x) noexcept {
  const vf g = exp_decay_times(-0.5f * (x * x), splat(1.0f), kNormalTailEnd);
  const vf tail = g * mills(min(abs(x), 14.0f));  // M finite where g is 0
  return (x < 0 ? tail : 1.0f - tail) + x * (g * 0.398942280401432678f);
}

// out[i] = f(in[i]) for n floats; the tail goes through one padded vector.
template <typename F>
inline void map(float* out, const float* in, std::int64_t n, F f) noexcept {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) storeu(out + i, f(loadu(in + i)));
  if (i < n) {
    float buf[kLanes] = {};
    const auto rest = static_cast<std::size_t>(n - i);
    std::memcpy(buf, in + i, rest * sizeof(float));
    storeu(buf, f(loadu(buf)));
    std::memcpy(out + i, buf, rest * sizeof(float));
  }
}

}  // namespace forge::cpu::vec
