// Fused normalization kernels: softmax, log_softmax, layer_norm, rms_norm.
// - A row (the normalized axis contiguous) is read from memory once: the
//   later passes find it in L1. softmax: max, then exp(x - max) written and
//   summed, then scaled; layer_norm: mean, then the mean squared deviation
//   (two passes, f32 lanes folded into f64 every kStatBlock elements), then
//   the write.
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
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

constexpr int kLanes = 16;
constexpr std::int64_t kStatBlock = 4096;
constexpr std::int64_t kColumnTile = 64;

template <typename C>
inline C exp_c(C x) noexcept {
  if constexpr (std::is_same_v<C, float>) return fast_exp(x);
  else return std::exp(x);
}

template <typename C>
C row_max(const C* x, std::int64_t n) {
  C acc[kLanes];
  for (auto& a : acc) a = -std::numeric_limits<C>::infinity();
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
  for (; i < n; ++i) acc[0] = x[i] > acc[0] ? x[i] : acc[0];
  C m = acc[0];
  for (int k = 1; k < kLanes; ++k) m = acc[k] > m ? acc[k] : m;
  return m;
}

// sum of exp(x - m); writes each exp into y when y is not null.
template <typename C>
C row_exp_sum(const C* x, C* y, std::int64_t n, C m) {
  double total = 0;
  for (std::int64_t b = 0; b < n; b += kStatBlock) {
    const std::int64_t e = std::min(n, b + kStatBlock);
    C acc[kLanes] = {};
    std::int64_t i = b;
    if (y) {
      for (; i + kLanes <= e; i += kLanes)
        for (int k = 0; k < kLanes; ++k) {
          const C v = exp_c(x[i + k] - m);
          y[i + k] = v;
          acc[k] += v;
        }
      for (; i < e; ++i) acc[0] += (y[i] = exp_c(x[i] - m));
    } else {
      for (; i + kLanes <= e; i += kLanes)
        for (int k = 0; k < kLanes; ++k) acc[k] += exp_c(x[i + k] - m);
      for (; i < e; ++i) acc[0] += exp_c(x[i] - m);
    }
    C s = 0;
    for (int k = 0; k < kLanes; ++k) s += acc[k];
    total += s;
  }
  return static_cast<C>(total);
}

template <typename C>
void softmax_row(const C* x, C* y, std::int64_t n, bool log) {
  const C m = row_max(x, n);
  if (log) {
    const C shift = m + std::log(row_exp_sum<C>(x, nullptr, n, m));
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
  } else {
    const C inv = C(1) / row_exp_sum<C>(x, y, n, m);
    for (std::int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

// Sum of f(x[i]) in f32 lanes, folded into f64 every kStatBlock elements.
template <typename C, typename F>
double row_sum(const C* x, std::int64_t n, F f) {
  double total = 0;
  for (std::int64_t b = 0; b < n; b += kStatBlock) {
    const std::int64_t e = std::min(n, b + kStatBlock);
    C acc[kLanes] = {};
    std::int64_t i = b;
    for (; i + kLanes <= e; i += kLanes)
      for (int k = 0; k < kLanes; ++k) acc[k] += f(x[i + k]);
    for (; i < e; ++i) acc[0] += f(x[i]);
    C s = 0;
    for (int k = 0; k < kLanes; ++k) s += acc[k];
    total += static_cast<double>(s);
  }
  return total;
}

template <typename C>
void layer_norm_row(const C* x, C* y, std::int64_t n, const C* w, const C* b, double eps) {
  const C mean = static_cast<C>(row_sum(x, n, [](C v) { return v; }) / static_cast<double>(n));
  const double var = row_sum(x, n, [mean](C v) { return (v - mean) * (v - mean); }) / static_cast<double>(n);
  const C rstd = static_cast<C>(1.0 / std::sqrt(var + eps));
  if (w && b) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  } else if (w) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i];
  } else if (b) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd + b[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd;
  }
}

template <typename C>
void rms_norm_row(const C* x, C* y, std::int64_t n, const C* w, double eps) {
  const double ms = row_sum(x, n, [](C v) { return v * v; }) / static_cast<double>(n);
  const C rstd = static_cast<C>(1.0 / std::sqrt(ms + eps));
  if (w) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * rstd * w[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * rstd;
  }
}

// Runs row(x, y) over `rows` rows of n elements, in parallel; 16-bit rows go
// through f32 scratch (one lease per parallel chunk).
template <typename T, typename RowFn>
void for_rows(Runtime& rt, std::int64_t rows, std::int64_t n, const std::byte* in, std::byte* out, RowFn row) {
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

// softmax over the middle axis of [outer, n, inner], a tile of inner positions at a time.
template <typename T>
void softmax_columns(Runtime& rt, std::int64_t outer, std::int64_t n, std::int64_t inner, const T* x, T* y,
                     bool log) {
  using C = compute_t<T>;
  const std::int64_t per = (inner + kColumnTile - 1) / kColumnTile;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / (n * std::min(inner, kColumnTile)));
  rt.parallel_for(outer * per, grain, [&](std::int64_t t0, std::int64_t t1) {
    C m[kColumnTile], s[kColumnTile];
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t o = t / per, j0 = (t % per) * kColumnTile, w = std::min(kColumnTile, inner - j0);
      const T* xb = x + o * n * inner + j0;
      T* yb = y + o * n * inner + j0;
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
  Params(Runtime& rt, const std::byte* p, std::int64_t n) {
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
    case DType::f64: return fn(double{});
    case DType::f16: return fn(Half{});
    case DType::bf16: return fn(BFloat16{});
    default: return fn(float{});
  }
}

}  // namespace

void softmax(Runtime& rt, DType dtype, std::int64_t outer, std::int64_t n, std::int64_t inner, const std::byte* in,
             std::byte* out, bool log) {
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

void layer_norm(Runtime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
                const std::byte* weight, const std::byte* bias, double eps, std::byte* out) {
  if (rows == 0 || n == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const Params<T> w(rt, weight, n), b(rt, bias, n);
    for_rows<T>(rt, rows, n, in, out, [&](const C* x, C* y) { layer_norm_row<C>(x, y, n, w.data, b.data, eps); });
  });
}

void rms_norm(Runtime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
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
