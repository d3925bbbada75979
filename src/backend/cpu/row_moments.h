#pragma once
// The statistics layer_norm and rms_norm take of a row, in f64, for the rows
// whose fast statistics overflow.
//
// Note [Statistics of huge rows]
// The forward kernels square and sum f32 rows in f32 lanes (f64 rows in f64),
// which overflows for finite rows: squares beyond |x| ~ 1.8e19, sums near
// 3.4e38, and f64 squares beyond ~1e154. A row whose fast mean or variance
// comes out non-finite is measured again here: every value multiplied by the
// power of two that brings the row's largest magnitude into [1, 2) (exact
// for every value above 2^-1000 times the largest, and the ones below add
// nothing), summed in
// f64, and normalized as (x * scale - mean) / sqrt(var + eps * scale^2), the
// same value with nothing overflowing. So every finite row gives finite
// results; a row holding inf or NaN still gives NaN, as in libtorch. The
// backward (nn_backward_kernels.cpp) sums in f64 and takes the same way out.

#include <cmath>
#include <cstdint>

namespace forge::cpu {

// mean (0 when not centred) and mean squared deviation of x * scale.
struct RowMoments {
  double scale = 1, mean = 0, var = 0;
};

// The power of two that brings the largest finite |x[j]| into [1, 2); 1 when
// the row is all zeros or holds inf or NaN (its statistics are NaN anyway).
template <typename T>
double magnitude_scale(const T* x, std::int64_t n) {
  double big = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const double a = std::abs(static_cast<double>(x[j]));
    if (!std::isfinite(a)) return 1.0;
    big = a > big ? a : big;
  }
  return big > 0 ? std::ldexp(1.0, -std::ilogb(big)) : 1.0;
}

// Two passes in f64 over x * scale: the mean (when centred), then the mean
// squared deviation from it.
template <typename T>
RowMoments row_moments(const T* x, std::int64_t n, bool centred, double scale = 1.0) {
  RowMoments m;
  m.scale = scale;
  if (centred) {
    double s = 0;
    for (std::int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j]) * scale;
    m.mean = s / static_cast<double>(n);
  }
  double v = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(x[j]) * scale - m.mean;
    v += d * d;
  }
  m.var = v / static_cast<double>(n);
  return m;
}

// row_moments, rescaled (Note [Statistics of huge rows]) when its plain sums overflow.
template <typename T>
RowMoments safe_row_moments(const T* x, std::int64_t n, bool centred) {
  const RowMoments m = row_moments(x, n, centred);
  if (std::isfinite(m.mean) && std::isfinite(m.var)) return m;
  return row_moments(x, n, centred, magnitude_scale(x, n));
}

}  // namespace forge::cpu
