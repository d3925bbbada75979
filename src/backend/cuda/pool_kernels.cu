// The cuda backend's pools: one thread per output element forward (every
// floating dtype, 16-bit ones computing in f32), one thread per input
// element for the gradients (f32, f64), which gather what the windows
// covering the element credit it (pool_math.h), in the cpu's order.

#include "backend/cuda/common.cuh"
#include "backend/cuda/pool_kernels.h"
#include "backend/cuda/pool_math.h"

namespace forge::cuda {
namespace {

using backend::Pool2dBackwardProblem;
using backend::Pool2dProblem;
using backend::Window2d;

// The four strides of an NCHW operand, by value for a kernel.
struct Nchw {
  std::int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  explicit Nchw(const Strides& s) : s0(s[0]), s1(s[1]), s2(s[2]), s3(s[3]) {}
  FORGE_HD std::int64_t at(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) const noexcept {
    return n * s0 + c * s1 + h * s2 + w * s3;
  }
};

// Splits an output index (row-major over [N, C, oH, oW]) or an input index.
struct Nchw4 {
  std::int64_t n, c, h, w;
};
FORGE_HD inline Nchw4 split(std::int64_t i, std::int64_t c, std::int64_t h, std::int64_t w) noexcept {
  Nchw4 r;
  r.w = i % w;
  i /= w;
  r.h = i % h;
  i /= h;
  r.c = i % c;
  r.n = i / c;
  return r;
}

template <typename T>
__global__ void max_pool_kernel(std::int64_t total, Window2d win, const T* x, Nchw xs, T* out, Nchw os) {
  using C = compute_t<T>;
  FORGE_GRID_LOOP(i, total) {
    const Nchw4 o = split(i, win.c, win.out_h, win.out_w);
    const T* plane = x + o.n * xs.s0 + o.c * xs.s1;
    const WindowMax<C> m = window_max<C>(
        win, o.h, o.w, [&](std::int64_t ih, std::int64_t iw) { return widen(plane[ih * xs.s2 + iw * xs.s3]); });
    out[os.at(o.n, o.c, o.h, o.w)] = convert<T>(m.value);
  }
}

template <typename T>
__global__ void avg_pool_kernel(std::int64_t total, Window2d win, bool include_pad, const T* x, Nchw xs, T* out,
                                Nchw os) {
  FORGE_GRID_LOOP(i, total) {
    const Nchw4 o = split(i, win.c, win.out_h, win.out_w);
    const T* plane = x + o.n * xs.s0 + o.c * xs.s1;
    const compute_t<T> mean = avg_pool_at<compute_t<T>>(
        win, include_pad, o.h, o.w,
        [&](std::int64_t ih, std::int64_t iw) { return widen(plane[ih * xs.s2 + iw * xs.s3]); });
    out[os.at(o.n, o.c, o.h, o.w)] = convert<T>(mean);
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(std::int64_t total, Window2d win, const T* x, Nchw xs, const T* g, Nchw gs,
                                         T* gx) {
  FORGE_GRID_LOOP(i, total) {
    const Nchw4 at = split(i, win.c, win.h, win.w);
    const T* plane = x + at.n * xs.s0 + at.c * xs.s1;
    const T* grad = g + at.n * gs.s0 + at.c * gs.s1;
    gx[i] = max_pool_grad_at<T>(
        win, at.h, at.w, [&](std::int64_t ih, std::int64_t iw) { return plane[ih * xs.s2 + iw * xs.s3]; },
        [&](std::int64_t oh, std::int64_t ow) { return grad[oh * gs.s2 + ow * gs.s3]; });
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(std::int64_t total, Window2d win, bool include_pad, const T* g, Nchw gs,
                                         T* gx) {
  FORGE_GRID_LOOP(i, total) {
    const Nchw4 at = split(i, win.c, win.h, win.w);
    const T* grad = g + at.n * gs.s0 + at.c * gs.s1;
    gx[i] = avg_pool_grad_at<T>(win, include_pad, at.h, at.w,
                                [&](std::int64_t oh, std::int64_t ow) { return grad[oh * gs.s2 + ow * gs.s3]; });
  }
}

}  // namespace

void max_pool2d(detail::DeviceRuntime& dev, const Pool2dProblem& p) {
  const Window2d& w = p.win;
  const std::int64_t total = w.n * w.c * w.out_h * w.out_w;
  if (total <= 0) return;
  dispatch_floating(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    max_pool_kernel<T><<<grid_for(total), kThreads, 0, stream_of(dev)>>>(
        total, w, reinterpret_cast<const T*>(p.x), Nchw(p.x_strides), reinterpret_cast<T*>(p.out), Nchw(p.out_strides));
  });
  check_launch("max_pool2d");
}

void avg_pool2d(detail::DeviceRuntime& dev, const Pool2dProblem& p) {
  const Window2d& w = p.win;
  const std::int64_t total = w.n * w.c * w.out_h * w.out_w;
  if (total <= 0) return;
  dispatch_floating(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    avg_pool_kernel<T><<<grid_for(total), kThreads, 0, stream_of(dev)>>>(
        total, w, p.count_include_pad, reinterpret_cast<const T*>(p.x), Nchw(p.x_strides), reinterpret_cast<T*>(p.out),
        Nchw(p.out_strides));
  });
  check_launch("avg_pool2d");
}

void max_pool2d_backward(detail::DeviceRuntime& dev, const Pool2dBackwardProblem& p) {
  const Window2d& w = p.win;
  const std::int64_t total = w.n * w.c * w.h * w.w;
  if (total <= 0) return;
  dispatch_float(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    max_pool_backward_kernel<T><<<grid_for(total), kThreads, 0, stream_of(dev)>>>(
        total, w, reinterpret_cast<const T*>(p.x), Nchw(p.x_strides), reinterpret_cast<const T*>(p.grad_out),
        Nchw(p.grad_out_strides), reinterpret_cast<T*>(p.grad_x));
  });
  check_launch("max_pool2d backward");
}

void avg_pool2d_backward(detail::DeviceRuntime& dev, const Pool2dBackwardProblem& p) {
  const Window2d& w = p.win;
  const std::int64_t total = w.n * w.c * w.h * w.w;
  if (total <= 0) return;
  dispatch_float(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    avg_pool_backward_kernel<T><<<grid_for(total), kThreads, 0, stream_of(dev)>>>(
        total, w, p.count_include_pad, reinterpret_cast<const T*>(p.grad_out), Nchw(p.grad_out_strides),
        reinterpret_cast<T*>(p.grad_x));
  });
  check_launch("avg_pool2d backward");
}

}  // namespace forge::cuda
