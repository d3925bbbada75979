// conv2d, max_pool2d, avg_pool2d over NCHW (or unbatched CHW) inputs, with
// libtorch's output-size rules. f16 and bf16 convolutions run in f32 on
// widened copies; f32 and f64 read their inputs through their strides.
//
// Note [window arithmetic]: sizes, strides, paddings and dilations are the
// caller's int64s, so every size here is computed with CheckedInt and refused
// (invalid_argument) when it overflows, before anything uses it. One bound
// covers the kernels (conv_kernels.cpp) too: for each axis,
// size + 2 * padding + dilation * (kernel - 1) + 1 + stride + dilation fits in
// int64, and every index or border the kernels form from these is a sum of
// some of those terms. The autograd rules rebuild the same windows from
// options that passed here.

#include "autograd/rules/conv.h"

#include "autograd/record.h"
#include "core/checked_int.h"
#include "forge/amp.h"
#include "forge/ops.h"
#include "ops/linalg_internal.h"

namespace forge {
namespace {

// x's dims and strides as [N, C, H, W]; an unbatched [C, H, W] is one image.
struct Nchw {
  std::int64_t dims[4];
  Strides strides;
};

Nchw as_nchw(const Tensor& x) {
  Nchw g{};
  const int lead = 4 - x.dim();
  g.strides = Strides::filled(4, 0);
  for (int d = 0; d < 4; ++d) g.dims[d] = 1;
  for (int d = 0; d < x.dim(); ++d) {
    g.dims[lead + d] = x.shape()[d];
    g.strides[lead + d] = x.strides()[d];
  }
  return g;
}

void check_image(const char* op, const Tensor& x) {
  FORGE_CHECK(x.dim() == 3 || x.dim() == 4, shape, op, "x must be [N, C, H, W] or [C, H, W], got shape ", x.shape());
}

// The output shape: x's with C replaced by `channels` and the spatial dims.
Shape image_shape(const Tensor& x, std::int64_t channels, std::int64_t h, std::int64_t w) {
  Shape s;
  if (x.dim() == 4) s.push_back(x.shape()[0]);
  s.push_back(channels);
  s.push_back(h);
  s.push_back(w);
  return s;
}

void check_out(const char* op, const Tensor& out, const Tensor& x, const Shape& shape) {
  detail::check_same_runtime(op, out, x);
  FORGE_CHECK(out.shape() == shape, shape, op, "out has shape ", out.shape(), " but the result has shape ", shape);
  FORGE_CHECK(out.dtype() == x.dtype(), dtype, op, "out is ", dtype_name(out.dtype()), " but the result is ",
              dtype_name(x.dtype()));
}

// One spatial axis of a window sweep: the input padded on both sides, the
// extent of the dilated kernel, and the output size by libtorch's rule
// floor((padded - extent [+ stride - 1 in ceil mode]) / stride) + 1, where
// ceil mode drops a last window that would start in the right padding.
// Kernel, stride and dilation are positive and padding non-negative here.
struct WindowAxis {
  std::int64_t padded, extent, out;
};

WindowAxis window_axis(const char* op, const char* axis, std::int64_t size, std::int64_t kernel, std::int64_t pad,
                       std::int64_t stride, std::int64_t dilation, bool ceil_mode) {
  using detail::CheckedInt;
  const CheckedInt padded = CheckedInt(size) + CheckedInt(pad) * 2;
  const CheckedInt extent = CheckedInt(dilation) * (kernel - 1) + 1;
  const CheckedInt bound = padded + extent + stride + dilation;  // Note [window arithmetic]
  FORGE_CHECK(!bound.overflowed(), invalid_argument, op, axis, " of size ", size, " with padding ", pad, ", kernel ",
              kernel, ", dilation ", dilation, " and stride ", stride, " overflows int64");
  WindowAxis a{padded.value(), extent.value(), 0};
  const std::int64_t num = a.padded - a.extent + (ceil_mode ? stride - 1 : 0);
  const std::int64_t q = num >= 0 ? num / stride : -((-num + stride - 1) / stride);  // floor division
  a.out = q + 1;
  if (ceil_mode && (a.out - 1) * stride >= size + pad) --a.out;
  return a;
}

// ---- conv2d ----

struct ConvPlan {
  backend::Conv2dProblem p;
  Shape out_shape;
};

ConvPlan plan_conv(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  detail::check_input(op, x, "x");
  detail::check_input(op, weight, "weight");
  detail::check_same_runtime(op, x, weight);
  detail::check_same_floating(op, x, "x", weight, "weight");
  if (bias.defined()) {
    detail::check_input(op, bias, "bias");
    detail::check_same_runtime(op, x, bias);
    FORGE_CHECK(bias.dtype() == x.dtype(), dtype, op, "bias is ", dtype_name(bias.dtype()), " but x is ",
                dtype_name(x.dtype()));
  }
  check_image(op, x);
  FORGE_CHECK(weight.dim() == 4, shape, op, "weight must be [O, C / groups, kH, kW], got shape ", weight.shape());
  for (int i = 0; i < 2; ++i) {
    FORGE_CHECK(o.stride[i] > 0, invalid_argument, op, "stride must be positive, got [", o.stride[0], ", ", o.stride[1],
                "]");
    FORGE_CHECK(o.dilation[i] > 0, invalid_argument, op, "dilation must be positive, got [", o.dilation[0], ", ",
                o.dilation[1], "]");
    FORGE_CHECK(o.padding[i] >= 0, invalid_argument, op, "padding must be non-negative, got [", o.padding[0], ", ",
                o.padding[1], "]");
  }
  FORGE_CHECK(o.groups > 0, invalid_argument, op, "groups must be positive, got ", o.groups);
  const Nchw g = as_nchw(x);
  const std::int64_t c = g.dims[1], out_c = weight.shape()[0], kh = weight.shape()[2], kw = weight.shape()[3];
  FORGE_CHECK(c % o.groups == 0, shape, op, "x has ", c, " channels (shape ", x.shape(), "), not divisible by ",
              o.groups, " groups");
  FORGE_CHECK(out_c % o.groups == 0, shape, op, "weight has ", out_c, " output channels (shape ", weight.shape(),
              "), not divisible by ", o.groups, " groups");
  const detail::CheckedInt expected_c = detail::CheckedInt(weight.shape()[1]) * o.groups;
  FORGE_CHECK(!expected_c.overflowed() && expected_c.value() == c, shape, op, "weight of shape ", weight.shape(),
              " with ", o.groups, " groups does not take x of shape ", x.shape(), " (", c, " input channels)");
  FORGE_CHECK(kh > 0 && kw > 0, shape, op, "weight has an empty kernel: shape ", weight.shape());
  if (bias.defined())
    FORGE_CHECK(bias.dim() == 1 && bias.shape()[0] == out_c, shape, op, "bias must have shape [", out_c, "], got ",
                bias.shape());
  const WindowAxis ah = window_axis(op, "height", g.dims[2], kh, o.padding[0], o.stride[0], o.dilation[0], false);
  const WindowAxis aw = window_axis(op, "width", g.dims[3], kw, o.padding[1], o.stride[1], o.dilation[1], false);
  FORGE_CHECK(ah.extent <= ah.padded && aw.extent <= aw.padded, shape, op, "the kernel (", kh, " x ", kw,
              ", dilation [", o.dilation[0], ", ", o.dilation[1], "]) is larger than the padded input (", ah.padded,
              " x ", aw.padded, ")");
  ConvPlan pl;
  backend::Conv2dProblem& p = pl.p;
  p.dtype = x.dtype();
  p.win = {g.dims[0], c,           g.dims[2],   g.dims[3],    ah.out,       aw.out,        kh,
           kw,        o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1]};
  p.out_channels = out_c;
  p.groups = o.groups;
  pl.out_shape = image_shape(x, out_c, p.win.out_h, p.win.out_w);
  return pl;
}

// Binds the operands and runs into `out` (of x's dtype, spatially flat).
void run_conv(const char* op, ConvPlan& pl, const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Tensor& out) {
  backend::Conv2dProblem& p = pl.p;
  p.x = detail::first_element(x);
  p.x_strides = as_nchw(x).strides;
  p.weight = detail::first_element(weight);
  p.weight_strides = weight.strides();
  p.bias = bias.defined() ? detail::first_element(bias) : nullptr;
  p.bias_stride = bias.defined() ? bias.strides()[0] : 0;
  p.out = detail::first_element(out);
  p.out_strides = as_nchw(out).strides;
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  dev.kernels().conv.conv2d.get(op, p.dtype, dev)(dev, p);
}

// Computes the convolution into `out`, through f32 copies for 16-bit dtypes
// and through a packed temporary when out's planes are not contiguous.
void compute_conv(const char* op, ConvPlan& pl, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& out) {
  Runtime& rt = x.runtime();
  const bool half = x.dtype() == DType::f16 || x.dtype() == DType::bf16;
  const Nchw og = as_nchw(out);
  if (!half && backend::spatial_is_flat(og.dims[2], og.dims[3], og.strides)) {
    run_conv(op, pl, x, weight, bias, out);
    return;
  }
  const DType compute = half ? DType::f32 : x.dtype();
  const Tensor cx = half ? detail::cast_temporary(x, compute, op) : x;
  const Tensor cw = half ? detail::cast_temporary(weight, compute, op) : weight;
  const Tensor cb = half && bias.defined() ? detail::cast_temporary(bias, compute, op) : bias;
  const Tensor tmp = detail::allocate(rt, pl.out_shape, compute, op);
  pl.p.dtype = compute;
  run_conv(op, pl, cx, cw, cb, tmp);
  detail::copy_cast(op, out, pl.out_shape, detail::operand(out), detail::operand(tmp));
}

// ---- pools ----

struct PoolPlan {
  backend::Pool2dProblem p;
  Shape out_shape;
};

PoolPlan plan_pool(const char* op, const Tensor& x, const Pool2dOptions& o, bool is_max) {
  detail::check_input(op, x, "x");
  detail::check_floating(op, x, "x");
  check_image(op, x);
  std::int64_t stride[2];
  for (int i = 0; i < 2; ++i) {
    FORGE_CHECK(o.kernel[i] > 0, invalid_argument, op, "kernel must be positive, got [", o.kernel[0], ", ", o.kernel[1],
                "]");
    FORGE_CHECK(o.stride[i] >= 0, invalid_argument, op, "stride must be positive (or 0 for the kernel size), got [",
                o.stride[0], ", ", o.stride[1], "]");
    FORGE_CHECK(o.dilation[i] > 0, invalid_argument, op, "dilation must be positive, got [", o.dilation[0], ", ",
                o.dilation[1], "]");
    FORGE_CHECK(o.padding[i] >= 0 && o.padding[i] <= o.kernel[i] / 2, invalid_argument, op,
                "padding must be between 0 and half the kernel size, got padding [", o.padding[0], ", ", o.padding[1],
                "] for kernel [", o.kernel[0], ", ", o.kernel[1], "]");
    stride[i] = o.stride[i] == 0 ? o.kernel[i] : o.stride[i];
  }
  if (!is_max)
    FORGE_CHECK(o.dilation[0] == 1 && o.dilation[1] == 1, invalid_argument, op, "takes no dilation, got [",
                o.dilation[0], ", ", o.dilation[1], "]");
  // avg_pool2d divides by up to kernel[0] * kernel[1] taps.
  FORGE_CHECK(!(detail::CheckedInt(o.kernel[0]) * o.kernel[1]).overflowed(), invalid_argument, op, "kernel [",
              o.kernel[0], ", ", o.kernel[1], "] has more taps than fit in int64");
  const Nchw g = as_nchw(x);
  const std::int64_t oh =
      window_axis(op, "height", g.dims[2], o.kernel[0], o.padding[0], stride[0], o.dilation[0], o.ceil_mode).out;
  const std::int64_t ow =
      window_axis(op, "width", g.dims[3], o.kernel[1], o.padding[1], stride[1], o.dilation[1], o.ceil_mode).out;
  FORGE_CHECK(oh >= 1 && ow >= 1, shape, op, "input of shape ", x.shape(), " is too small for the window: output ", oh,
              " x ", ow);
  PoolPlan pl;
  backend::Pool2dProblem& p = pl.p;
  p.dtype = x.dtype();
  p.win = {g.dims[0], g.dims[1],    g.dims[2],    g.dims[3],     oh,           ow, o.kernel[0], o.kernel[1], stride[0],
           stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1]};
  p.count_include_pad = o.count_include_pad;
  p.x = detail::first_element(x);
  p.x_strides = g.strides;
  pl.out_shape = image_shape(x, g.dims[1], oh, ow);
  return pl;
}

void run_pool(const char* op, PoolPlan& pl, const Tensor& out, bool is_max) {
  pl.p.out = detail::first_element(out);
  pl.p.out_strides = as_nchw(out).strides;
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const backend::ConvKernels& k = dev.kernels().conv;
  (is_max ? k.max_pool2d : k.avg_pool2d).get(op, pl.p.dtype, dev)(dev, pl.p);
}

Tensor pool(const char* op, const Tensor& x, const Pool2dOptions& options, bool is_max) {
  PoolPlan pl = plan_pool(op, x, options, is_max);
  Tensor out = detail::allocate(x.runtime(), pl.out_shape, x.dtype(), op);
  run_pool(op, pl, out, is_max);
  detail::adopt_output(out);
  return out;
}

Tensor& pool_into(const char* op, Tensor& out, const Tensor& x, const Pool2dOptions& options, bool is_max) {
  detail::check_writable(op, out, "out");
  PoolPlan pl = plan_pool(op, x, options, is_max);
  check_out(op, out, x, pl.out_shape);
  detail::check_no_overlap(op, out, x, "x");
  run_pool(op, pl, out, is_max);
  out.buffer()->bump_version();
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) try {
  if (amp::detail::autocasts(x, weight, bias)) [[unlikely]]
    return conv2d(amp::detail::autocast(x), amp::detail::autocast(weight), amp::detail::autocast(bias), options);
  ConvPlan pl = plan_conv("conv2d", x, weight, bias, options);
  Tensor out = detail::allocate(x.runtime(), pl.out_shape, x.dtype(), "conv2d");
  compute_conv("conv2d", pl, x, weight, bias, out);
  detail::adopt_output(out);
  FORGE_RECORD(conv2d, out, x, weight, bias, options);
  return out;
}
FORGE_CATCH_OOM("conv2d")

Tensor& conv2d_into(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Conv2dOptions& options) try {
  detail::check_writable("conv2d_into", out, "out");
  ConvPlan pl = plan_conv("conv2d_into", x, weight, bias, options);
  check_out("conv2d_into", out, x, pl.out_shape);
  detail::check_no_overlap("conv2d_into", out, x, "x");
  detail::check_no_overlap("conv2d_into", out, weight, "weight");
  if (bias.defined()) detail::check_no_overlap("conv2d_into", out, bias, "bias");
  compute_conv("conv2d_into", pl, x, weight, bias, out);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("conv2d_into")

// The pools and conv2d record themselves when autograd needs it (rules in
// src/autograd/rules/conv.cpp); the _into forms do not.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) try {
  Tensor out = pool("max_pool2d", x, options, true);
  FORGE_RECORD(max_pool2d, out, x, options);
  return out;
}
FORGE_CATCH_OOM("max_pool2d")
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) try {
  Tensor out = pool("avg_pool2d", x, options, false);
  FORGE_RECORD(avg_pool2d, out, x, options);
  return out;
}
FORGE_CATCH_OOM("avg_pool2d")
Tensor& max_pool2d_into(Tensor& out, const Tensor& x, const Pool2dOptions& options) try {
  return pool_into("max_pool2d_into", out, x, options, true);
}
FORGE_CATCH_OOM("max_pool2d_into")
Tensor& avg_pool2d_into(Tensor& out, const Tensor& x, const Pool2dOptions& options) try {
  return pool_into("avg_pool2d_into", out, x, options, false);
}
FORGE_CATCH_OOM("avg_pool2d_into")

}  // namespace forge
