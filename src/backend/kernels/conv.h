#pragma once
// The conv family of the kernel table (backend/kernels.h): its entries
// and the device-neutral arguments they take. NCHW convolution and pooling;
// the ops validate shapes, options and aliasing before any entry runs.

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/kernels/copy.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::backend {

// The geometry of a 2-D window sweep: input [N, C, H, W], output [N, ?, oH, oW].
// Kernels form indices and borders from these without overflow checks:
// callers keep, per axis, size + 2 * pad + dilation * (kernel - 1) + 1 +
// stride + dilation within int64 (Note [window arithmetic] in ops/conv.cpp).
struct Window2d {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  std::int64_t out_h = 0, out_w = 0;
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
};

// Whether an [h, w] plane with strides s[2], s[3] is one run of unit stride.
inline bool spatial_is_flat(std::int64_t h, std::int64_t w, const Strides& s) {
  if (w == 1) return h == 1 || s[2] == 1;
  return s[3] == 1 && (h == 1 || s[2] == w);
}

// Whether the window is 1x1 at stride 1 and unpadded: each output position
// is its input pixel (a pointwise convolution, when the plane is also flat).
inline bool unit_window(const Window2d& w) {
  return w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 && w.stride_w == 1 && w.pad_h == 0 && w.pad_w == 0;
}

// out [N, O, oH, oW] = conv(x [N, C, H, W], weight [O, C / groups, kH, kW]) + bias [O].
// All strides in elements; out's last two dims must be contiguous
// (stride 1 and oW). bias may be null.
struct Conv2dProblem {
  DType dtype = DType::f32;
  Window2d win;
  std::int64_t out_channels = 0, groups = 1;
  const std::byte* x = nullptr;
  Strides x_strides;
  const std::byte* weight = nullptr;
  Strides weight_strides;
  const std::byte* bias = nullptr;
  std::int64_t bias_stride = 0;
  std::byte* out = nullptr;
  Strides out_strides;
};

// out [N, C, oH, oW] = the max (or mean) over each window; any strides.
// max propagates NaN; mean divides as libtorch does (count_include_pad).
struct Pool2dProblem {
  DType dtype = DType::f32;
  Window2d win;
  bool count_include_pad = true;
  const std::byte* x = nullptr;
  Strides x_strides;
  std::byte* out = nullptr;
  Strides out_strides;
};

// The gradients of conv2d given grad_out [N, O, oH, oW], whose planes must be
// flat (spatial_is_flat): grad_x [N, C, H, W] = col2im(W^T dY) and
// grad_weight [O, C / groups, kH, kW] = the sum over images of
// dY im2col(x)^T, both contiguous and overwritten. Either may be null (not
// wanted); x is read only for grad_weight, weight only for grad_x.
struct Conv2dBackwardProblem {
  DType dtype = DType::f32;
  Window2d win;
  std::int64_t out_channels = 0, groups = 1;
  const std::byte* x = nullptr;
  Strides x_strides;
  const std::byte* weight = nullptr;
  Strides weight_strides;
  const std::byte* grad_out = nullptr;
  Strides grad_out_strides;
  std::byte* grad_x = nullptr;
  std::byte* grad_weight = nullptr;
};

// The gradients of the pools: grad_x [N, C, H, W], contiguous and
// overwritten, from grad_out [N, C, oH, oW] (any strides). max credits each
// window's argmax, recomputed from x; avg needs no x.
struct Pool2dBackwardProblem {
  DType dtype = DType::f32;
  Window2d win;
  bool count_include_pad = true;
  const std::byte* x = nullptr;
  Strides x_strides;
  const std::byte* grad_out = nullptr;
  Strides grad_out_strides;
  std::byte* grad_x = nullptr;
};

using Conv2dFn = void(detail::DeviceRuntime& dev, const Conv2dProblem& p);
using Conv2dBackwardFn = void(detail::DeviceRuntime& dev, const Conv2dBackwardProblem& p);
using Pool2dFn = void(detail::DeviceRuntime& dev, const Pool2dProblem& p);
using Pool2dBackwardFn = void(detail::DeviceRuntime& dev, const Pool2dBackwardProblem& p);

// get() with the problem's dtype. conv2d and every backward compute in f32
// or f64 (callers widen 16-bit tensors first); the pools may take 16-bit
// tensors as they are.
struct ConvKernels {
  Entry<Conv2dFn> conv2d;
  Entry<Conv2dBackwardFn> conv2d_backward;
  Entry<Pool2dFn> max_pool2d;
  Entry<Pool2dFn> avg_pool2d;
  Entry<Pool2dBackwardFn> max_pool2d_backward;
  Entry<Pool2dBackwardFn> avg_pool2d_backward;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("conv2d", k.conv2d);
    f("conv2d_backward", k.conv2d_backward);
    f("max_pool2d", k.max_pool2d);
    f("avg_pool2d", k.avg_pool2d);
    f("max_pool2d_backward", k.max_pool2d_backward);
    f("avg_pool2d_backward", k.avg_pool2d_backward);
  }
};

}  // namespace forge::backend
