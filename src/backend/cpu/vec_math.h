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
// normal tail from erfc(|x| / sqrt 2) = t Q(t) e^(-x^2/2), and tanh switches
// to (1 - e^-2|x|) / (1 + e^-2|x|) where its rational form stops. Accuracy
// against long double over every f32 exponent (tests/unary_test.cpp): exp
// 1 ulp; tanh 5 ulp; sigmoid, silu, both gelus and their gradients 4 ulp,
// plus the error inherent in rounding their argument where they are steep
// (the tests bound it by the condition number); results below |x|^3 2^-126
// may flush to 0 (exp_decay).

#include <cstdint>
#include <cstring>

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

// Whether any lane of a comparison's mask is set.
inline bool any(vi mask) noexcept {
  std::uint64_t w[sizeof(vi) / 8];
  std::memcpy(w, &mask, sizeof w);
  std::uint64_t m = 0;
  for (const std::uint64_t v : w) m |= v;
  return m != 0;
}

inline constexpr float kExpRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float kNormalEnd = -87.3365447505f;  // ln(2^-126): below, e^x is subnormal

// e^r 2^n, from t = x log2(e) + kExpRound (n in its low bits) and the reduced
// r = x - n ln 2 (Cephes' polynomial). kSubnormal applies 2^n as two factors
// so that subnormal results come out right; otherwise n >= -126.
template <bool kSubnormal>
inline vf exp_reduced(vf t, vf r) noexcept {
  const vi ni = reinterpret_cast<vi>(t) - reinterpret_cast<vi>(splat(kExpRound));
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  if constexpr (!kSubnormal) {
    return p * reinterpret_cast<vf>((ni + 127) << 23);
  } else {
    const vi half = ni >> 1;
    const vf s1 = reinterpret_cast<vf>((half + 127) << 23);
    const vf s2 = reinterpret_cast<vf>((ni - half + 127) << 23);
    return p * s1 * s2;
  }
}

// e^(x + b) for the n nearest (x + b) / ln 2, without rounding x + b first.
template <bool kSubnormal>
inline vf exp_split(vf x, vf b) noexcept {
  const vf t = (x + b) * 1.44269504088896341f + kExpRound;
  const vf n = t - kExpRound;
  vf r = x - n * 0.693359375f;  // exact (Cody and Waite)
  r = r - n * -2.12194440e-4f;
  return exp_reduced<kSubnormal>(t, r + b);
}

// e^x within 1 ulp. Below -104 the result is 0, above 88.8 it is inf.
inline vf exp(vf x) noexcept {
  x = clamp(x, -104.0f, 88.8f);
  const vf t = x * 1.44269504088896341f + kExpRound;
  const vf n = t - kExpRound;
  vf r = x - n * 0.693359375f;  // exact (Cody and Waite)
  r = r - n * -2.12194440e-4f;
  return exp_reduced<true>(t, r);
}

// e^(a + b) for a + b <= 0, a exact and b a small correction (e^(-x^2/2)
// with x^2 split exactly, in normal()), flushed to 0 where it would be
// subnormal. The activations take their e^-|z| this way (exp_decay): those
// subnormals would only reach results below |x|^3 2^-126, and subnormal
// arithmetic costs several times a normal lane's.
inline vf exp_decay(vf a, vf b) noexcept {
  const vi flush = a + b < kNormalEnd;
  const vf e = exp_split<false>(flush ? splat(0.0f) : a, flush ? splat(0.0f) : b);
  return flush ? splat(0.0f) : e;
}
inline vf exp_decay(vf x) noexcept { return exp_decay(x, splat(0.0f)); }

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

// tanh: Eigen's rational approximation below |x| = 7.9988, where it is
// accurate; beyond, (1 - e) / (1 + e) with e = e^-2|x|, which reaches +-1
// only where f32 tanh does (|x| > 9.01: tanh(-8) is -0.99999976, not -1).
// Tiny inputs return themselves.
inline vf tanh(vf a) noexcept {
  constexpr float kRationalEnd = 7.99881172180175781f;
  const vf x = clamp(a, -kRationalEnd, kRationalEnd);
  const vf x2 = x * x;
  vf p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  vf q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  const vf ax = abs(a);
  const vf result = ax < 0.0004f ? a : p / q;
  const vi far = ax > kRationalEnd;
  if (!any(far)) return result;
  const vf e = exp_decay(-2.0f * ax);
  const vf m = (1.0f - e) / (1.0f + e);
  return far ? (a < 0 ? -m : m) : result;
}

// 1 / (1 + e^-x) from e = e^-|x|: 1 / (1 + e) for x >= 0 and e / (1 + e)
// below, which keeps its precision down to the subnormals.
inline vf sigmoid(vf x) noexcept {
  const vf e = exp_decay(-abs(x));
  const vf r = 1.0f / (1.0f + e);
  return x < 0 ? e * r : r;
}

// x * sigmoid(x), the same way.
inline vf silu(vf x) noexcept {
  const vf e = exp_decay(-abs(x));
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
  g.z = 1.595769121605730712f * (x + 0.044715f * x * x * x);
  g.e = exp_decay(-abs(g.z));
  g.r = 1.0f / (1.0f + g.e);
  return g;
}

inline vf gelu_tanh(vf x) noexcept { return x * tanh_gate(x).sig(); }

// d/dx gelu_tanh = sig(z) + x sig(z) sig(-z) z', z' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (x clamped in z', so that past |x| = 1e18 it does not overflow where sig(-z) is 0).
inline vf gelu_tanh_grad(vf x) noexcept {
  const TanhGate g = tanh_gate(x);
  const vf xc = clamp(x, -1e18f, 1e18f);
  return g.sig() + x * (g.e * g.r * g.r) * (1.595769121605730712f * (1.0f + 0.134145f * xc * xc));
}

// d/dx silu = sig(x) + x sig(x) sig(-x).
inline vf silu_grad(vf x) noexcept {
  const vf e = exp_decay(-abs(x));
  const vf r = 1.0f / (1.0f + e);
  return (x < 0 ? e * r : r) + x * (e * r * r);
}

// The standard normal's cdf Phi(x) and density exp(-x^2/2) / sqrt(2 pi).
// The tail beyond |x| is h = erfc(z) / 2 = t Q(t) e^(-z^2) / 2 with
// z = |x| / sqrt 2 and t = 1 / (1 + z / 2), Q a degree-10 fit (relative
// error 2e-8 for |x| < 14.5; beyond, e^(-x^2/2) is 0 in f32); Phi is h below
// 0 and 1 - h above. x^2 / 2 is taken as hi + lo, hi from x's top 12 bits
// (exact), so that e^(-x^2/2) keeps its precision where x^2 is large.
struct Normal {
  vf cdf, pdf;
};
inline Normal normal(vf x) noexcept {
  const vf ax = abs(x);
  const vf xh = reinterpret_cast<vf>(reinterpret_cast<vi>(x) & static_cast<std::int32_t>(0xfffff000));
  const vf lo = -0.5f * (x - xh) * (x + xh);  // NaN only for x = +-inf (or NaN, where xh is NaN too)
  const vf gauss = exp_decay(-0.5f * xh * xh, lo == lo ? lo : splat(0.0f));  // e^(-x^2/2)
  const vf t = 1.0f / (1.0f + ax * 0.353553390593273762f);
  vf q = t * 3.654626384e-02f + -1.963371038e-01f;
  q = q * t + 3.970404565e-01f;
  q = q * t + -3.157879710e-01f;
  q = q * t + 5.697894841e-03f;
  q = q * t + 1.623725332e-02f;
  q = q * t + 6.368568540e-02f;
  q = q * t + 1.829535067e-01f;
  q = q * t + 2.456724495e-01f;
  q = q * t + 2.822007537e-01f;
  q = q * t + 2.820908129e-01f;
  const vf h = 0.5f * t * q * gauss;
  return {x < 0 ? h : 1.0f - h, gauss * 0.398942280401432678f};
}

inline vf gelu_erf(vf x) noexcept { return x * normal(x).cdf; }

// d/dx gelu_erf = Phi(x) + x phi(x).
inline vf gelu_erf_grad(vf x) noexcept {
  const Normal n = normal(x);
  return n.cdf + x * n.pdf;
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
