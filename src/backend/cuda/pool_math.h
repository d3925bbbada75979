#pragma once
// Window geometry of the cuda backend's pools (pool_kernels.cu), as plain
// C++ that tests/cuda_kernel_math_test.cpp checks on the host against the
// cpu pools and against brute force. The forms are the cpu's
// (cpu/conv_kernels.cpp): the same valid taps, avg windows and divisors,
// the same argmax rule (first max on ties, the last NaN if any).
//
// The gradients are gathers: each input element sums, in (oh, ow) order,
// what the windows covering it credit it, so no two threads write one
// element and the sums come out in the cpu's order.

#include <cstdint>

#include "backend/cuda/device_math.h"
#include "backend/kernels/conv.h"

namespace forge::cuda {

// [first, last) of the kernel taps whose input index start + tap * dilation
// lies in [0, size).
struct TapRange {
  std::int64_t first = 0, last = 0;
};
FORGE_HD inline TapRange valid_taps(std::int64_t start, std::int64_t dilation, std::int64_t kernel,
                                    std::int64_t size) noexcept {
  TapRange t;
  t.first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
  const std::int64_t reach = (size - start + dilation - 1) / dilation;
  t.last = start >= size ? 0 : (kernel < reach ? kernel : reach);
  if (t.last < t.first) t.last = t.first;
  return t;
}

// One avg_pool2d window along one axis: the inputs [lo, hi) it reads and
// its extent counting padding (count_include_pad's divisor).
struct AvgWindow {
  std::int64_t lo = 0, hi = 0, span = 0;
};
FORGE_HD inline AvgWindow avg_window(std::int64_t o, std::int64_t stride, std::int64_t pad, std::int64_t kernel,
                                     std::int64_t size) noexcept {
  const std::int64_t start = o * stride - pad;
  const std::int64_t end = start + kernel < size + pad ? start + kernel : size + pad;
  return {start > 0 ? start : 0, end < size ? end : size, end - start};
}
// The divisor of an avg window (h, w both non-empty).
FORGE_HD inline std::int64_t avg_count(const AvgWindow& h, const AvgWindow& w, bool count_include_pad) noexcept {
  return count_include_pad ? h.span * w.span : (h.hi - h.lo) * (w.hi - w.lo);
}

// The outputs [lo, hi) along one axis whose window may hold input i: those
// with o * stride - pad <= i <= o * stride - pad + (kernel - 1) * dilation.
// With dilation > 1 a candidate holds i only when tap_hits.
struct OutRange {
  std::int64_t lo = 0, hi = 0;
};
FORGE_HD inline std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {  // b > 0
  const std::int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
FORGE_HD inline OutRange covering_outputs(std::int64_t i, std::int64_t stride, std::int64_t pad, std::int64_t kernel,
                                          std::int64_t dilation, std::int64_t out_size) noexcept {
  const std::int64_t first = floor_div(i + pad - (kernel - 1) * dilation + stride - 1, stride);  // ceil
  const std::int64_t last = floor_div(i + pad, stride);
  OutRange r;
  r.lo = first > 0 ? first : 0;
  r.hi = last + 1 < out_size ? last + 1 : out_size;
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}
FORGE_HD inline bool tap_hits(std::int64_t i, std::int64_t o, std::int64_t stride, std::int64_t pad,
                              std::int64_t dilation) noexcept {
  return (i + pad - o * stride) % dilation == 0;
}

// The max of window (oh, ow) of a plane read by load(ih, iw) (any value
// type C), and its argmax as ih * w + iw: the first max on ties, the last
// NaN if any (which is then the value). at is -1 for a window with no input.
template <typename C>
struct WindowMax {
  C value;
  std::int64_t at;
};
template <typename C, typename Load>
FORGE_HD inline WindowMax<C> window_max(const backend::Window2d& w, std::int64_t oh, std::int64_t ow,
                                        Load&& load) noexcept {
  const std::int64_t h0 = oh * w.stride_h - w.pad_h, w0 = ow * w.stride_w - w.pad_w;
  const TapRange th = valid_taps(h0, w.dilation_h, w.kernel_h, w.h);
  const TapRange tw = valid_taps(w0, w.dilation_w, w.kernel_w, w.w);
  WindowMax<C> r{-std::numeric_limits<C>::infinity(), -1};
  if (th.first >= th.last || tw.first >= tw.last) return r;
  r.at = (h0 + th.first * w.dilation_h) * w.w + w0 + tw.first * w.dilation_w;
  for (std::int64_t kh = th.first; kh < th.last; ++kh) {
    const std::int64_t ih = h0 + kh * w.dilation_h;
    for (std::int64_t kw = tw.first; kw < tw.last; ++kw) {
      const std::int64_t iw = w0 + kw * w.dilation_w;
      const C v = load(ih, iw);
      if (v > r.value || v != v) {
        r.value = v;
        r.at = ih * w.w + iw;
      }
    }
  }
  return r;
}

// avg_pool2d's output (oh, ow) in C from a plane read by load(ih, iw): the
// mean over the window's inputs, 0 for a window with none.
template <typename C, typename Load>
FORGE_HD inline C avg_pool_at(const backend::Window2d& w, bool count_include_pad, std::int64_t oh, std::int64_t ow,
                              Load&& load) noexcept {
  const AvgWindow wh = avg_window(oh, w.stride_h, w.pad_h, w.kernel_h, w.h);
  const AvgWindow ww = avg_window(ow, w.stride_w, w.pad_w, w.kernel_w, w.w);
  if (wh.lo >= wh.hi || ww.lo >= ww.hi) return C(0);
  C sum = 0;
  for (std::int64_t ih = wh.lo; ih < wh.hi; ++ih)
    for (std::int64_t iw = ww.lo; iw < ww.hi; ++iw) sum += load(ih, iw);
  return sum / static_cast<C>(avg_count(wh, ww, count_include_pad));
}

// max_pool2d's gradient at input (ih, iw): the sum, in (oh, ow) order, of
// grad(oh, ow) over the windows whose argmax (recomputed from x(ih, iw)) it is.
template <typename T, typename LoadX, typename LoadG>
FORGE_HD inline T max_pool_grad_at(const backend::Window2d& w, std::int64_t ih, std::int64_t iw, LoadX&& x,
                                   LoadG&& grad) noexcept {
  const std::int64_t self = ih * w.w + iw;
  const OutRange rh = covering_outputs(ih, w.stride_h, w.pad_h, w.kernel_h, w.dilation_h, w.out_h);
  const OutRange rw = covering_outputs(iw, w.stride_w, w.pad_w, w.kernel_w, w.dilation_w, w.out_w);
  T sum = 0;
  for (std::int64_t oh = rh.lo; oh < rh.hi; ++oh) {
    if (!tap_hits(ih, oh, w.stride_h, w.pad_h, w.dilation_h)) continue;
    for (std::int64_t ow = rw.lo; ow < rw.hi; ++ow) {
      if (!tap_hits(iw, ow, w.stride_w, w.pad_w, w.dilation_w)) continue;
      if (window_max<T>(w, oh, ow, x).at == self) sum += grad(oh, ow);
    }
  }
  return sum;
}

// avg_pool2d's gradient at input (ih, iw): the sum, in (oh, ow) order, of
// grad(oh, ow) / count over the windows that read it.
template <typename T, typename LoadG>
FORGE_HD inline T avg_pool_grad_at(const backend::Window2d& w, bool count_include_pad, std::int64_t ih, std::int64_t iw,
                                   LoadG&& grad) noexcept {
  const OutRange rh = covering_outputs(ih, w.stride_h, w.pad_h, w.kernel_h, 1, w.out_h);
  const OutRange rw = covering_outputs(iw, w.stride_w, w.pad_w, w.kernel_w, 1, w.out_w);
  T sum = 0;
  for (std::int64_t oh = rh.lo; oh < rh.hi; ++oh) {
    const AvgWindow wh = avg_window(oh, w.stride_h, w.pad_h, w.kernel_h, w.h);
    if (ih < wh.lo || ih >= wh.hi) continue;
    for (std::int64_t ow = rw.lo; ow < rw.hi; ++ow) {
      const AvgWindow ww = avg_window(ow, w.stride_w, w.pad_w, w.kernel_w, w.w);
      if (iw < ww.lo || iw >= ww.hi) continue;
      sum += grad(oh, ow) / static_cast<T>(avg_count(wh, ww, count_include_pad));
    }
  }
  return sum;
}

}  // namespace forge::cuda
