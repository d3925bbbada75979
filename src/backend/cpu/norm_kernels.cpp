// Fused normalization kernels: softmax, log_softmax, layer_norm, rms_norm.
// - A row (the normalized axis contiguous) is read from memory once: the
//   later passes find it in L1. softmax: max, then exp(x - max) written and
//   summed, then scaled; layer_norm: mean, then the mean squared deviation
//   (two passes, f32 lanes folded into f64 every kStatBlock elements), then
//   the write. A row whose statistics overflow there takes an f64 path
//   instead (Note [Statistics of huge rows], row_moments.h).
// - softmax over a non-last axis works on [outer, n, inner]: a tile of inner
//   positions keeps its running max and sum while walking the n rows.
// - f16/bf16 rows are widened into f32 scratch, computed, and narrowed back;
//   f32 uses the vectorized fast_exp, f64 std::exp.
// - Rows (or tiles) run in parallel over the context's arena, inline below
//   kGrainElements.

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/reduce_kernels.h"
#include "backend/cpu/row_moments.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

constexpr int kLanes = 16;
constexpr std::int64_t kStatBlock = 4096;
constexpr std::int64_t kColumnTile = 64;

template <typename X>
inline X exp_c(X x) noexcept {
  if constexpr (std::is_same_v<X, double>)
    return std::exp(x);
  else
    return fast_exp(x);  // float or VecN
}

// f32 rows run four VecN accumulators (64 floats on AVX-512) per step; f64 rows run
// kLanes scalar accumulators, which the compiler may vectorize.
constexpr std::int64_t kStep = 4 * kVecN;

template <typename C>
C row_max(const C* x, std::int64_t n) {
  C m = -std::numeric_limits<C>::infinity();
  std::int64_t i = 0;
  if constexpr (std::is_same_v<C, float>) {
    VecN a[4];
    for (auto& v : a) v = splat<VecN>(m);
    for (; i + kStep <= n; i += kStep)
      for (int u = 0; u < 4; ++u) {
        const VecN v = load_vec<VecN>(x + i + u * kVecN);
        a[u] = v > a[u] ? v : a[u];
      }
    for (int u = 0; u < 4; ++u)
      for (int k = 0; k < kVecN; ++k) m = a[u][k] > m ? a[u][k] : m;
  } else {
    C acc[kLanes];
    for (auto& a : acc) a = m;
    for (; i + kLanes <= n; i += kLanes)
      for (int k = 0; k < kLanes; ++k) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    for (int k = 0; k < kLanes; ++k) m = acc[k] > m ? acc[k] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// The sum of f(x[i]) over [b, e), accumulated in lanes of C.
template <typename C, typename F>
C block_sum(const C* x, std::int64_t b, std::int64_t e, F f) {
  std::int64_t i = b;
  C s = 0;
  if constexpr (std::is_same_v<C, float>) {
    VecN a[4] = {};
    for (; i + kStep <= e; i += kStep)
      for (int u = 0; u < 4; ++u) a[u] += f(load_vec<VecN>(x + i + u * kVecN));
    const VecN t = (a[0] + a[1]) + (a[2] + a[3]);
    for (int k = 0; k < kVecN; ++k) s += t[k];
  } else {
    C acc[kLanes] = {};
    for (; i + kLanes <= e; i += kLanes)
      for (int k = 0; k < kLanes; ++k) acc[k] += f(x[i + k]);
    for (int k = 0; k < kLanes; ++k) s += acc[k];
  }
  for (; i < e; ++i) s += f(x[i]);
  return s;
}

// Sum of f(x[i]) in C lanes, folded into f64 every kStatBlock elements.
template <typename C, typename F>
double row_sum(const C* x, std::int64_t n, F f) {
  double total = 0;
  for (std::int64_t b = 0; b < n; b += kStatBlock)
    total += static_cast<double>(block_sum(x, b, std::min(n, b + kStatBlock), f));
  return total;
}

// Applies y[i] = f(x[i], i) over a row; f takes a float or a VecN for f32.
template <typename C, typename F>
void row_map(const C* x, C* y, std::int64_t n, F f) {
  std::int64_t i = 0;
  if constexpr (std::is_same_v<C, float>) {
    for (; i + kVecN <= n; i += kVecN) store_vec(y + i, f(load_vec<VecN>(x + i), i));
  }
  for (; i < n; ++i) y[i] = f(x[i], i);
}

// A float's or a VecN's slice of an array starting at i.
template <typename X, typename C>
inline X at(const C* p, std::int64_t i) {
  if constexpr (std::is_same_v<X, VecN>)
    return load_vec<VecN>(p + i);
  else
    return p[i];
}

// y[i] = exp(x[i] - m) over [b, e), returning their sum (in C lanes).
template <typename C>
C exp_store_sum(const C* x, C* y, std::int64_t b, std::int64_t e, C m) {
  std::int64_t i = b;
  C s = 0;
  if constexpr (std::is_same_v<C, float>) {
    VecN a[4] = {};
    for (; i + kStep <= e; i += kStep)
      for (int u = 0; u < 4; ++u) {
        const VecN v = exp_c(load_vec<VecN>(x + i + u * kVecN) - m);
        store_vec(y + i + u * kVecN, v);
        a[u] += v;
      }
    const VecN t = (a[0] + a[1]) + (a[2] + a[3]);
    for (int k = 0; k < kVecN; ++k) s += t[k];
  }
  for (; i < e; ++i) {
    y[i] = exp_c(x[i] - m);
    s += y[i];
  }
  return s;
}

template <typename C>
void softmax_row(const C* x, C* y, std::int64_t n, bool log) {
  const C m = row_max(x, n);
  if (log) {
    double s = 0;
    for (std::int64_t b = 0; b < n; b += kStatBlock)
      s += block_sum(x, b, std::min(n, b + kStatBlock), [m](auto v) { return exp_c(v - m); });
    const C shift = m + static_cast<C>(std::log(s));
    row_map(x, y, n, [shift](auto v, std::int64_t) { return v - shift; });
    return;
  }
  // exp(x - m) is written out and summed in one pass; the scaling pass finds y in L1.
  double s = 0;
  for (std::int64_t b = 0; b < n; b += kStatBlock) {
    const std::int64_t e = std::min(n, b + kStatBlock);
    s += static_cast<double>(exp_store_sum(x, y, b, e, m));
  }
  const C inv = static_cast<C>(1.0 / s);
  row_map(y, y, n, [inv](auto v, std::int64_t) { return v * inv; });
}

// A layer_norm (centred) or rms_norm row in f64, scaled so that nothing
// overflows (Note [Statistics of huge rows]); rare, so plain loops.
template <typename C>
void norm_row_f64(const C* x, C* y, std::int64_t n, const C* w, const C* b, double eps, bool centred) {
  const RowMoments m = safe_row_moments(x, n, centred);
  const double rstd = 1.0 / std::sqrt(m.var + eps * m.scale * m.scale);
  for (std::int64_t i = 0; i < n; ++i) {
    double v = (static_cast<double>(x[i]) * m.scale - m.mean) * rstd;
    if (w) v *= static_cast<double>(w[i]);
    if (b) v += static_cast<double>(b[i]);
    y[i] = static_cast<C>(v);
  }
}

template <typename C>
void layer_norm_row(const C* x, C* y, std::int64_t n, const C* w, const C* b, double eps) {
  const double mean_sum = row_sum(x, n, [](auto v) { return v; });
  if (!std::isfinite(mean_sum)) return norm_row_f64(x, y, n, w, b, eps, true);
  const C mean = static_cast<C>(mean_sum / static_cast<double>(n));
  const double var = row_sum(x, n, [mean](auto v) { return (v - mean) * (v - mean); }) / static_cast<double>(n);
  if (!std::isfinite(var)) return norm_row_f64(x, y, n, w, b, eps, true);
  const C rstd = static_cast<C>(1.0 / std::sqrt(var + eps));
  if (w && b) {
    row_map(x, y, n, [=](auto v, std::int64_t i) {
      using X = decltype(v);
      return (v - mean) * rstd * at<X>(w, i) + at<X>(b, i);
    });
  } else if (w) {
    row_map(x, y, n, [=](auto v, std::int64_t i) { return (v - mean) * rstd * at<decltype(v)>(w, i); });
  } else if (b) {
    row_map(x, y, n, [=](auto v, std::int64_t i) { return (v - mean) * rstd + at<decltype(v)>(b, i); });
  } else {
    row_map(x, y, n, [=](auto v, std::int64_t) { return (v - mean) * rstd; });
  }
}

template <typename C>
void rms_norm_row(const C* x, C* y, std::int64_t n, const C* w, double eps) {
  const double ms = row_sum(x, n, [](auto v) { return v * v; }) / static_cast<double>(n);
  if (!std::isfinite(ms)) return norm_row_f64(x, y, n, w, static_cast<const C*>(nullptr), eps, false);
  const C rstd = static_cast<C>(1.0 / std::sqrt(ms + eps));
  if (w)
    row_map(x, y, n, [=](auto v, std::int64_t i) { return v * rstd * at<decltype(v)>(w, i); });
  else
    row_map(x, y, n, [=](auto v, std::int64_t) { return v * rstd; });
}

// Runs row(x, y) over `rows` rows of n elements, in parallel; 16-bit rows go
// through f32 scratch (one lease per parallel chunk).
template <typename T, typename RowFn>
void for_rows(detail::DeviceRuntime& rt, std::int64_t rows, std::int64_t n, const std::byte* in, std::byte* out,
              RowFn row) {
  const T* x = reinterpret_cast<const T*>(in);
  T* y = reinterpret_cast<T*>(out);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(n, 1));
  rt.parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    if constexpr (is_half_v<T>) {
      ScratchLease<float> buf = rt.pool().scratch<float>(static_cast<std::size_t>(2 * n));
      float* xf = buf.data();
      float* yf = xf + n;
      for (std::int64_t r = r0; r < r1; ++r) {
        widen_block(x + r * n, xf, n);
        row(xf, yf);
        narrow_block(yf, y + r * n, n);
      }
    } else {
      for (std::int64_t r = r0; r < r1; ++r) row(x + r * n, y + r * n);
    }
  });
}

// A full f32 tile of kColumnTile positions down n rows `inner` apart, in VecF blocks.
void softmax_column_tile(const float* xb, float* yb, std::int64_t n, std::int64_t inner, bool log) {
  constexpr int kU = kColumnTile / kVecF;
  VecF m[kU], s[kU];
  for (int u = 0; u < kU; ++u) {
    m[u] = splat<VecF>(-std::numeric_limits<float>::infinity());
    s[u] = VecF{};
  }
  for (std::int64_t d = 0; d < n; ++d)
    for (int u = 0; u < kU; ++u) {
      const VecF v = load_vec<VecF>(xb + d * inner + u * kVecF);
      m[u] = v > m[u] ? v : m[u];
    }
  for (std::int64_t d = 0; d < n; ++d)
    for (int u = 0; u < kU; ++u) {
      const VecF e = fast_exp(load_vec<VecF>(xb + d * inner + u * kVecF) - m[u]);
      if (!log) store_vec(yb + d * inner + u * kVecF, e);
      s[u] += e;
    }
  for (int u = 0; u < kU; ++u) {
    if (log) {
      for (int k = 0; k < kVecF; ++k) s[u][k] = m[u][k] + std::log(s[u][k]);
    } else {
      s[u] = 1.0f / s[u];
    }
  }
  for (std::int64_t d = 0; d < n; ++d)
    for (int u = 0; u < kU; ++u) {
      float* at_y = yb + d * inner + u * kVecF;
      if (log)
        store_vec(at_y, load_vec<VecF>(xb + d * inner + u * kVecF) - s[u]);
      else
        store_vec(at_y, load_vec<VecF>(at_y) * s[u]);
    }
}

// softmax over the middle axis of [outer, n, inner], a tile of inner positions at a time.
template <typename T>
void softmax_columns(detail::DeviceRuntime& rt, std::int64_t outer, std::int64_t n, std::int64_t inner, const T* x,
                     T* y, bool log) {
  using C = compute_t<T>;
  const std::int64_t per = (inner + kColumnTile - 1) / kColumnTile;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / (n * std::min(inner, kColumnTile)));
  rt.parallel_for(outer * per, grain, [&](std::int64_t t0, std::int64_t t1) {
    C m[kColumnTile], s[kColumnTile];
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t o = t / per, j0 = (t % per) * kColumnTile, w = std::min(kColumnTile, inner - j0);
      const T* xb = x + o * n * inner + j0;
      T* yb = y + o * n * inner + j0;
      if constexpr (std::is_same_v<T, float>) {
        if (w == kColumnTile) {
          softmax_column_tile(xb, yb, n, inner, log);
          continue;
        }
      }
      std::fill(m, m + w, -std::numeric_limits<C>::infinity());
      std::fill(s, s + w, C(0));
      for (std::int64_t d = 0; d < n; ++d)
        for (std::int64_t k = 0; k < w; ++k) {
          const C v = widen(xb[d * inner + k]);
          m[k] = v > m[k] ? v : m[k];
        }
      for (std::int64_t d = 0; d < n; ++d)
        for (std::int64_t k = 0; k < w; ++k) s[k] += exp_c(C(widen(xb[d * inner + k])) - m[k]);
      for (std::int64_t k = 0; k < w; ++k) s[k] = log ? m[k] + std::log(s[k]) : C(1) / s[k];
      for (std::int64_t d = 0; d < n; ++d)
        for (std::int64_t k = 0; k < w; ++k) {
          const C v = widen(xb[d * inner + k]);
          yb[d * inner + k] = convert<T>(log ? v - s[k] : exp_c(v - m[k]) * s[k]);
        }
    }
  });
}

// weight (and bias) in the compute type: the tensor itself for f32/f64, an
// f32 copy for 16-bit floats.
template <typename T>
struct Params {
  ScratchLease<float> copy;
  const compute_t<T>* data = nullptr;
  Params(detail::DeviceRuntime& rt, const std::byte* p, std::int64_t n) {
    if (!p) return;
    if constexpr (is_half_v<T>) {
      copy = rt.pool().scratch<float>(static_cast<std::size_t>(n));
      widen_block(reinterpret_cast<const T*>(p), copy.data(), n);
      data = copy.data();
    } else {
      data = reinterpret_cast<const T*>(p);
    }
  }
};

template <typename Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(Half{});
    case DType::bf16:
      return fn(BFloat16{});
    default:
      return fn(float{});
  }
}

}  // namespace

void softmax(detail::DeviceRuntime& rt, DType dtype, std::int64_t outer, std::int64_t n, std::int64_t inner,
             const std::byte* in, std::byte* out, bool log) {
  if (outer == 0 || n == 0 || inner == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if (inner == 1) {
      for_rows<T>(rt, outer, n, in, out, [&](const C* x, C* y) { softmax_row<C>(x, y, n, log); });
    } else {
      softmax_columns<T>(rt, outer, n, inner, reinterpret_cast<const T*>(in), reinterpret_cast<T*>(out), log);
    }
  });
}

void layer_norm(detail::DeviceRuntime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
                const std::byte* weight, const std::byte* bias, double eps, std::byte* out) {
  if (rows == 0 || n == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const Params<T> w(rt, weight, n), b(rt, bias, n);
    for_rows<T>(rt, rows, n, in, out, [&](const C* x, C* y) { layer_norm_row<C>(x, y, n, w.data, b.data, eps); });
  });
}

void rms_norm(detail::DeviceRuntime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
              const std::byte* weight, double eps, std::byte* out) {
  if (rows == 0 || n == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const Params<T> w(rt, weight, n);
    for_rows<T>(rt, rows, n, in, out, [&](const C* x, C* y) { rms_norm_row<C>(x, y, n, w.data, eps); });
  });
}

}  // namespace forge::cpu
