#pragma once
// Unchecked NCHW convolution and pooling kernels. conv2d takes f32 and f64
// (the op widens 16-bit inputs first); the pools take every floating dtype,
// computing 16-bit ones in f32. Callers validate shapes, options and aliasing.

#include <cstddef>
#include <cstdint>

#include "backend/device_runtime.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::cpu {

// The geometry of a 2-D window sweep: input [N, C, H, W], output [N, ?, oH, oW].
// The kernels form indices and borders from these without overflow checks:
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
void conv2d(detail::DeviceRuntime& rt, const Conv2dProblem& p);
// Whether an [h, w] plane with strides s[2], s[3] is one run of unit stride.
bool spatial_is_flat(std::int64_t h, std::int64_t w, const Strides& s);

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
void max_pool2d(detail::DeviceRuntime& rt, const Pool2dProblem& p);
void avg_pool2d(detail::DeviceRuntime& rt, const Pool2dProblem& p);

// The gradients of conv2d (f32 or f64) given grad_out [N, O, oH, oW], whose
// planes must be flat (spatial_is_flat): grad_x [N, C, H, W] =
// col2im(W^T dY) and grad_weight [O, C / groups, kH, kW] = the sum over images
// of dY im2col(x)^T, both contiguous and overwritten. Either may be null (not
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
void conv2d_backward(detail::DeviceRuntime& rt, const Conv2dBackwardProblem& p);

// The gradients of the pools (f32 or f64): grad_x [N, C, H, W], contiguous
// and overwritten, from grad_out [N, C, oH, oW] (any strides). max credits
// each window's argmax, recomputed from x; avg needs no x.
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
void max_pool2d_backward(detail::DeviceRuntime& rt, const Pool2dBackwardProblem& p);
void avg_pool2d_backward(detail::DeviceRuntime& rt, const Pool2dBackwardProblem& p);

}  // namespace forge::cpu
