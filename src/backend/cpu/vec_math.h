#pragma once
// Vectorized f32 math for the elementwise kernels: exp, erf, tanh and what is
// built from them, on 16-lane GCC/Clang vector types (one AVX-512 register,
// two AVX2 registers; the compiler lowers them to whatever the target has).
// Accuracy: exp within 2 ulp (Cephes' polynomial), erf and tanh a few ulp
// (Eigen's rational approximations), enough for the activations to match
// libtorch within f32 tolerances. NaN propagates through every function, and
// the clamps are written so that comparisons with NaN keep the NaN.

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

// e^x. Below -104 the result is 0, above 88.8 it is inf; between, 2^n is
// applied as two factors so that subnormal results come out right.
inline vf exp(vf x) noexcept {
  x = clamp(x, -104.0f, 88.8f);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const vf t = x * 1.44269504088896341f + kRound;
  const vf n = t - kRound;
  const vi ni = reinterpret_cast<vi>(t) - reinterpret_cast<vi>(splat(kRound));
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const vi half = ni >> 1;
  const vf s1 = reinterpret_cast<vf>((half + 127) << 23);
  const vf s2 = reinterpret_cast<vf>((ni - half + 127) << 23);
  return p * s1 * s2;
}

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

// tanh, rational approximation on [-7.9988, 7.9988] (outside it tanh is +-1
// in f32); tiny inputs return themselves.
inline vf tanh(vf a) noexcept {
  const vf x = clamp(a, -7.99881172180175781f, 7.99881172180175781f);
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
  const vf ax = a < 0 ? -a : a;
  return ax < 0.0004f ? a : p / q;
}

inline vf sigmoid(vf x) noexcept { return 1.0f / (1.0f + exp(-x)); }

inline vf gelu_erf(vf x) noexcept { return 0.5f * x * (1.0f + erf(x * 0.707106781186547524f)); }

inline vf gelu_tanh(vf x) noexcept {
  const vf inner = 0.797884560802865356f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanh(inner));
}

inline vf silu(vf x) noexcept { return x / (1.0f + exp(-x)); }

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
