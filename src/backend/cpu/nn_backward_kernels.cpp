// Gradient kernels of softmax, the normalizations and the class losses
// (nn_backward_kernels.h). Each works row by row on packed f32/f64 data;
// rows run in parallel over the context's arena, inline below kGrainElements.

#include "backend/cpu/nn_backward_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/cpu/kernels.h"
#include "backend/cpu/reduce_kernels.h"
#include "backend/cpu/row_moments.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

template <typename T>
inline T exp_t(T v) noexcept {
  if constexpr (std::is_same_v<T, double>)
    return std::exp(v);
  else
    return fast_exp(v);
}

// Calls fn(T tag) for f32 and f64, the only dtypes these kernels take.
template <typename Fn>
void dispatch_real(DType dtype, Fn&& fn) {
  if (dtype == DType::f64)
    fn(double{});
  else
    fn(float{});
}

// Rows per task: about kGrainElements elements.
std::int64_t row_grain(std::int64_t n) {
  return std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(n, 1));
}

// Sum over [0, n) of f(i) for f32 rows, where f(i) takes the VecN (or the
// float) at i: four VecN lanes, folded into f64 every kFoldBlock elements.
constexpr std::int64_t kFoldBlock = 4096;

template <typename F>
double sum_f32(std::int64_t n, F f) {
  double total = 0;
  for (std::int64_t b = 0; b < n; b += kFoldBlock) {
    const std::int64_t e = std::min(n, b + kFoldBlock);
    VecN a[4] = {};
    std::int64_t i = b;
    for (; i + 4 * kVecN <= e; i += 4 * kVecN)
      for (int u = 0; u < 4; ++u) a[u] += f.template operator()<VecN>(i + u * kVecN);
    const VecN t = (a[0] + a[1]) + (a[2] + a[3]);
    float s = 0;
    for (int k = 0; k < kVecN; ++k) s += t[k];
    for (; i < e; ++i) s += f.template operator()<float>(i);
    total += static_cast<double>(s);
  }
  return total;
}

// Both sums of f(i) = (first, second) over [0, n), as sum_f32 takes one.
template <typename F>
std::pair<double, double> sum2_f32(std::int64_t n, F f) {
  double total[2] = {0, 0};
  for (std::int64_t b = 0; b < n; b += kFoldBlock) {
    const std::int64_t e = std::min(n, b + kFoldBlock);
    VecN a[2][2] = {};
    std::int64_t i = b;
    for (; i + 2 * kVecN <= e; i += 2 * kVecN)
      for (int u = 0; u < 2; ++u) {
        const auto [first, second] = f.template operator()<VecN>(i + u * kVecN);
        a[0][u] += first;
        a[1][u] += second;
      }
    float tail[2] = {0, 0};
    for (; i < e; ++i) {
      const auto [first, second] = f.template operator()<float>(i);
      tail[0] += first;
      tail[1] += second;
    }
    for (int k = 0; k < 2; ++k) {
      const VecN t = a[k][0] + a[k][1];
      float s = tail[k];
      for (int l = 0; l < kVecN; ++l) s += t[l];
      total[k] += static_cast<double>(s);
    }
  }
  return {total[0], total[1]};
}

// dx[i] = f(i) over an f32 row, a VecN (or a float) at a time.
template <typename F>
void map_f32(float* dx, std::int64_t n, F f) {
  std::int64_t i = 0;
  for (; i + kVecN <= n; i += kVecN) store_vec(dx + i, f.template operator()<VecN>(i));
  for (; i < n; ++i) dx[i] = f.template operator()<float>(i);
}

template <typename X>
inline X at(const float* p, std::int64_t i) {
  return load_vec<X>(p + i);
}

// f32 rows in VecN blocks (the scalar f64 loops below ran softmax's
// gradient at about 12 GB/s).
void softmax_rows_f32(const float* y, const float* g, float* dx, std::int64_t n, bool log) {
  if (log) {
    const float s = static_cast<float>(sum_f32(n, [&]<typename X>(std::int64_t i) { return at<X>(g, i); }));
    map_f32(dx, n, [&]<typename X>(std::int64_t i) { return at<X>(g, i) - fast_exp(at<X>(y, i)) * s; });
  } else {
    const float s =
        static_cast<float>(sum_f32(n, [&]<typename X>(std::int64_t i) { return at<X>(g, i) * at<X>(y, i); }));
    map_f32(dx, n, [&]<typename X>(std::int64_t i) { return at<X>(y, i) * (at<X>(g, i) - s); });
  }
}

template <typename T>
void softmax_rows(const T* y, const T* g, T* dx, std::int64_t n, bool log) {
  if constexpr (std::is_same_v<T, float>) {
    softmax_rows_f32(y, g, dx, n, log);
    return;
  }
  double s = 0;
  if (log) {
    for (std::int64_t j = 0; j < n; ++j) s += g[j];
    const T st = static_cast<T>(s);
    for (std::int64_t j = 0; j < n; ++j) dx[j] = g[j] - exp_t(y[j]) * st;
  } else {
    for (std::int64_t j = 0; j < n; ++j) s += static_cast<double>(g[j]) * y[j];
    const T st = static_cast<T>(s);
    for (std::int64_t j = 0; j < n; ++j) dx[j] = y[j] * (g[j] - st);
  }
}

// One row of the layer_norm / rms_norm backward; accumulates dw and db
// (in A: f64 for f64 rows, f32 partials for f32 rows).
template <typename T, typename A>
void norm_row(const NormBackward& p, std::int64_t r, A* dw, A* db) {
  const std::int64_t n = p.n;
  const T* x = reinterpret_cast<const T*>(p.x) + r * n;
  const T* g = reinterpret_cast<const T*>(p.g) + r * n;
  const T* w = reinterpret_cast<const T*>(p.w);
  // Statistics of x * scale (scale 1 unless an f64 row overflows them):
  // xhat = (x * scale - mean) * rstd, and 1/std of x itself is scale * rstd.
  const RowMoments m = safe_row_moments(x, n, !p.rms);
  const double scale = m.scale, mean = m.mean;
  const double rstd = 1.0 / std::sqrt(m.var + p.eps * scale * scale);
  double sum_gy = 0, sum_gyx = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const double xhat = (x[j] * scale - mean) * rstd;
    const double gy = w ? static_cast<double>(g[j]) * w[j] : static_cast<double>(g[j]);
    sum_gy += gy;
    sum_gyx += gy * xhat;
    if (dw) dw[j] += g[j] * xhat;
    if (db) db[j] += g[j];
  }
  if (!p.dx) return;
  const double a = p.rms ? 0.0 : sum_gy / static_cast<double>(n), b = sum_gyx / static_cast<double>(n);
  T* dx = reinterpret_cast<T*>(p.dx) + r * n;
  for (std::int64_t j = 0; j < n; ++j) {
    const double xhat = (x[j] * scale - mean) * rstd;
    const double gy = w ? static_cast<double>(g[j]) * w[j] : static_cast<double>(g[j]);
    dx[j] = static_cast<T>(scale * rstd * (gy - a - xhat * b));
  }
}

// The same row for f32 in VecN blocks: the statistics in f32 lanes folded
// into f64 (as the forward takes them), then the two sums, dw and db, and
// dx, each a pass over the L1-hot row. A row whose statistics overflow
// there takes the f64 loop above (Note [Statistics of huge rows]).
void norm_row_f32(const NormBackward& p, std::int64_t r, float* dw, float* db) {
  const std::int64_t n = p.n;
  const float* x = reinterpret_cast<const float*>(p.x) + r * n;
  const float* g = reinterpret_cast<const float*>(p.g) + r * n;
  const float* w = reinterpret_cast<const float*>(p.w);
  const double dn = static_cast<double>(n);
  const double mean = p.rms ? 0.0 : sum_f32(n, [&]<typename X>(std::int64_t i) { return at<X>(x, i); }) / dn;
  const float mf = static_cast<float>(mean);
  const double var = sum_f32(n,
                             [&]<typename X>(std::int64_t i) {
                               const X d = at<X>(x, i) - mf;
                               return d * d;
                             }) /
                     dn;
  if (!std::isfinite(mean) || !std::isfinite(var)) return norm_row<float, float>(p, r, dw, db);
  const float rstd = static_cast<float>(1.0 / std::sqrt(var + p.eps));
  const auto xhat = [&]<typename X>(std::int64_t i) { return (at<X>(x, i) - mf) * rstd; };
  const auto gy = [&]<typename X>(std::int64_t i) { return w ? at<X>(g, i) * at<X>(w, i) : at<X>(g, i); };
  if (dw)
    map_f32(dw, n,
            [&]<typename X>(std::int64_t i) { return at<X>(dw, i) + at<X>(g, i) * xhat.template operator()<X>(i); });
  if (db) map_f32(db, n, [&]<typename X>(std::int64_t i) { return at<X>(db, i) + at<X>(g, i); });
  if (!p.dx) return;
  const auto [sum_gy, sum_gyx] = sum2_f32(n, [&]<typename X>(std::int64_t i) {
    const X v = gy.template operator()<X>(i);
    return std::pair<X, X>{v, v * xhat.template operator()<X>(i)};
  });
  const float a = p.rms ? 0.0f : static_cast<float>(sum_gy / dn), b = static_cast<float>(sum_gyx / dn);
  map_f32(reinterpret_cast<float*>(p.dx) + r * n, n, [&]<typename X>(std::int64_t i) {
    return rstd * (gy.template operator()<X>(i) - a - xhat.template operator()<X>(i) * b);
  });
}

template <typename T, typename A>
void norm_row_any(const NormBackward& p, std::int64_t r, A* dw, A* db) {
  if constexpr (std::is_same_v<T, float>)
    norm_row_f32(p, r, dw, db);
  else
    norm_row<T, A>(p, r, dw, db);
}

template <typename T>
void norm_backward_typed(detail::DeviceRuntime& rt, const NormBackward& p) {
  // dw and db partials per block of rows: f32 for f32 rows (added in f64
  // across blocks), f64 for f64 rows.
  using A = std::conditional_t<std::is_same_v<T, float>, float, double>;
  const bool params = p.dw || p.db;
  if (!params) {
    rt.parallel_for(p.rows, row_grain(p.n), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) norm_row_any<T, A>(p, r, nullptr, nullptr);
    });
    return;
  }
  // Fixed blocks of rows, each with its own f64 partial sums of dw and db;
  // the partials are added in block order.
  const std::int64_t threads = rt.threads();
  const std::int64_t blocks =
      std::max<std::int64_t>(1, std::min<std::int64_t>({p.rows, p.rows * p.n / kGrainElements + 1, 4 * threads}));
  const std::int64_t width = 2 * p.n;
  ScratchLease<A> partial = rt.pool().scratch<A>(static_cast<std::size_t>(blocks * width));
  std::fill(partial.data(), partial.data() + blocks * width, A(0));
  rt.parallel_for(blocks, 1, [&](std::int64_t bbegin, std::int64_t bend) {
    for (std::int64_t blk = bbegin; blk < bend; ++blk) {
      A* dw = partial.data() + blk * width;
      A* db = dw + p.n;
      for (std::int64_t r = p.rows * blk / blocks; r < p.rows * (blk + 1) / blocks; ++r)
        norm_row_any<T, A>(p, r, p.dw ? dw : nullptr, p.db ? db : nullptr);
    }
  });
  auto finish = [&](std::byte* out, std::int64_t at) {
    if (!out) return;
    T* o = reinterpret_cast<T*>(out);
    for (std::int64_t j = 0; j < p.n; ++j) {
      double s = 0;
      for (std::int64_t blk = 0; blk < blocks; ++blk)
        s += static_cast<double>(partial[static_cast<std::size_t>(blk * width + at + j)]);
      o[j] = static_cast<T>(s);
    }
  };
  finish(p.dw, 0);
  finish(p.db, p.n);
}

// Row i's share of the output gradient: g (per row or shared), over the
// counted rows when the loss is a mean.
template <typename T>
double loss_scale(const ClassLossBackward& p, std::int64_t i, double inv_count) {
  return static_cast<double>(reinterpret_cast<const T*>(p.g)[i * p.g_stride]) * inv_count;
}

double inverse_count(const ClassLossBackward& p) {
  if (!p.mean) return 1.0;
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < p.dx_rows.rows; ++i) counted += p.targets[i] != p.ignore_index;
  return 1.0 / static_cast<double>(counted);  // no counted rows: inf, as the forward's 0 / 0
}

// One row of cross_entropy's gradient into d (class stride ds: an
// std::integral_constant 1 for the packed case, so it compiles as such).
template <typename T, typename Stride>
void cross_entropy_row(const ClassLossBackward& p, std::int64_t i, double inv, T* d, Stride ds) {
  const std::int64_t C = p.dx_rows.classes, t = p.targets[i];
  if (t == p.ignore_index) {
    for (std::int64_t j = 0; j < C; ++j) d[j * ds] = T{0};
    return;
  }
  const T* x = reinterpret_cast<const T*>(p.x) + p.x_rows.offset(i);
  const std::int64_t cs = p.x_rows.class_stride;
  T m = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j < C; ++j) m = std::max(m, x[j * cs]);
  double s = 0;
  for (std::int64_t j = 0; j < C; ++j) {
    d[j * ds] = exp_t(static_cast<T>(x[j * cs] - m));
    s += d[j * ds];
  }
  const double scale = loss_scale<T>(p, i, inv), ls = p.label_smoothing;
  const T a = static_cast<T>(scale / s), b = static_cast<T>(scale * ls / static_cast<double>(C));
  for (std::int64_t j = 0; j < C; ++j) d[j * ds] = d[j * ds] * a - b;
  d[t * ds] -= static_cast<T>(scale * (1.0 - ls));
}

template <typename T>
void cross_entropy_typed(detail::DeviceRuntime& rt, const ClassLossBackward& p) {
  const double inv = inverse_count(p);
  const ClassRows& r = p.dx_rows;
  rt.parallel_for(r.rows, row_grain(r.classes), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      T* d = reinterpret_cast<T*>(p.dx) + r.offset(i);
      if (r.class_stride == 1)
        cross_entropy_row(p, i, inv, d, std::integral_constant<std::int64_t, 1>{});
      else
        cross_entropy_row(p, i, inv, d, r.class_stride);
    }
  });
}

template <typename T>
void nll_loss_typed(const ClassLossBackward& p) {
  const double inv = inverse_count(p);
  const ClassRows& r = p.dx_rows;
  T* d = reinterpret_cast<T*>(p.dx);
  std::fill(d, d + r.rows * r.classes, T{0});
  for (std::int64_t i = 0; i < r.rows; ++i) {
    const std::int64_t t = p.targets[i];
    if (t != p.ignore_index) d[r.offset(i) + t * r.class_stride] = static_cast<T>(-loss_scale<T>(p, i, inv));
  }
}

}  // namespace

void softmax_backward(detail::DeviceRuntime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* y,
                      const std::byte* g, std::byte* dx, bool log) {
  dispatch_real(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* yt = reinterpret_cast<const T*>(y);
    const T* gt = reinterpret_cast<const T*>(g);
    T* dt = reinterpret_cast<T*>(dx);
    rt.parallel_for(rows, row_grain(n), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) softmax_rows(yt + r * n, gt + r * n, dt + r * n, n, log);
    });
  });
}

void norm_backward(detail::DeviceRuntime& rt, const NormBackward& p) {
  if (p.n == 0) return;
  if (p.rows == 0) {  // no rows: the parameters' gradients are zeros
    dispatch_real(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      for (std::byte* o : {p.dw, p.db})
        if (o) std::fill(reinterpret_cast<T*>(o), reinterpret_cast<T*>(o) + p.n, T{0});
    });
    return;
  }
  dispatch_real(p.dtype, [&](auto tag) { norm_backward_typed<decltype(tag)>(rt, p); });
}

void cross_entropy_backward(detail::DeviceRuntime& rt, const ClassLossBackward& p) {
  dispatch_real(p.dtype, [&](auto tag) { cross_entropy_typed<decltype(tag)>(rt, p); });
}

void nll_loss_backward(detail::DeviceRuntime&, const ClassLossBackward& p) {
  dispatch_real(p.dtype, [&](auto tag) { nll_loss_typed<decltype(tag)>(p); });
}

}  // namespace forge::cpu
