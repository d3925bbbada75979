// VJPs of conv2d and the pools (see record.h). The heavy lifting is in the
// conv family of the gradient's device (backend/kernels/conv.h): on the host
// the convolution's input and weight gradients are GEMMs over the forward's
// column tiles, the pools' are direct loops. 16-bit tensors run in f32;
// Vjp::set casts the gradients back.

#include "autograd/rules/conv.h"

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge::autograd::rules {
namespace {

// A shape's dims as [N, C, H, W]; an unbatched [C, H, W] is one image.
std::array<std::int64_t, 4> nchw_dims(const Shape& s) {
  std::array<std::int64_t, 4> d{1, 1, 1, 1};
  for (int i = 0; i < s.rank(); ++i) d[4 - s.rank() + i] = s[i];
  return d;
}

Strides nchw_strides(const Tensor& t) {
  Strides s = Strides::filled(4, 0);
  for (int i = 0; i < t.dim(); ++i) s[4 - t.dim() + i] = t.strides()[i];
  return s;
}

// The dtype the kernels run in: f64 stays, everything else is f32.
DType compute_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

Tensor in_dtype(const Tensor& t, DType d) { return t.dtype() == d ? t : t.to(d); }

// The window of an op from x [N, C, H, W] to an output of grad's size.
backend::Window2d window(const Shape& x, const Tensor& grad, std::int64_t kh, std::int64_t kw,
                         const std::array<std::int64_t, 2>& stride, const std::array<std::int64_t, 2>& padding,
                         const std::array<std::int64_t, 2>& dilation) {
  const auto d = nchw_dims(x);
  const auto o = nchw_dims(grad.shape());
  return {d[0], d[1],      d[2],      d[3],       o[2],       o[3],        kh,
          kw,   stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]};
}

Tensor fresh(const Tensor& like, const Shape& shape, DType dtype) {
  return detail::allocate(like.runtime(), shape, dtype, "backward");
}

// grad_x and grad_weight of conv2d, each only when `want`ed.
void conv2d_backward(Vjp& v, const Conv2dOptions& o, const Shape& x_shape, const Shape& w_shape) {
  const DType ct = compute_dtype(v.grad().dtype());
  Tensor g = in_dtype(v.grad(), ct);
  const auto od = nchw_dims(g.shape());
  if (!backend::spatial_is_flat(od[2], od[3], nchw_strides(g))) g = g.contiguous();
  backend::Conv2dBackwardProblem p;
  p.dtype = ct;
  p.win = window(x_shape, g, w_shape[2], w_shape[3], o.stride, o.padding, o.dilation);
  p.out_channels = w_shape[0];
  p.groups = o.groups;
  p.grad_out = detail::first_element(g);
  p.grad_out_strides = nchw_strides(g);
  Tensor x, w, gx, gw;
  if (v.needs(0)) {
    w = in_dtype(v.saved(1), ct);
    p.weight = detail::first_element(w);
    p.weight_strides = w.strides();
    gx = fresh(g, x_shape, ct);
    p.grad_x = detail::first_element(gx);
  }
  if (v.needs(1)) {
    x = in_dtype(v.saved(0), ct);
    p.x = detail::first_element(x);
    p.x_strides = nchw_strides(x);
    gw = fresh(g, w_shape, ct);
    p.grad_weight = detail::first_element(gw);
  }
  detail::DeviceRuntime& dev = detail::device_runtime(g);
  dev.kernels().conv.conv2d_backward.get("conv2d", ct, dev)(dev, p);
  if (gx.defined()) detail::adopt_output(gx);
  if (gw.defined()) detail::adopt_output(gw);
  v.set(0, gx);
  v.set(1, gw);
}

// grad_x of a pool: `x` is read by max only (undefined for avg).
Tensor pool_backward(const Tensor& grad, const Tensor& saved_x, const Shape& x_shape, const Pool2dOptions& o,
                     bool is_max) {
  const DType ct = compute_dtype(grad.dtype());
  const Tensor g = in_dtype(grad, ct);
  const std::array<std::int64_t, 2> stride{o.stride[0] == 0 ? o.kernel[0] : o.stride[0],
                                           o.stride[1] == 0 ? o.kernel[1] : o.stride[1]};
  backend::Pool2dBackwardProblem p;
  p.dtype = ct;
  p.win = window(x_shape, g, o.kernel[0], o.kernel[1], stride, o.padding, o.dilation);
  p.count_include_pad = o.count_include_pad;
  p.grad_out = detail::first_element(g);
  p.grad_out_strides = nchw_strides(g);
  Tensor x;
  if (is_max) {
    x = in_dtype(saved_x, ct);
    p.x = detail::first_element(x);
    p.x_strides = nchw_strides(x);
  }
  Tensor gx = fresh(g, x_shape, ct);
  p.grad_x = detail::first_element(gx);
  detail::DeviceRuntime& dev = detail::device_runtime(gx);
  const backend::ConvKernels& k = dev.kernels().conv;
  (is_max ? k.max_pool2d_backward : k.avg_pool2d_backward).get(is_max ? "max_pool2d" : "avg_pool2d", ct, dev)(dev, p);
  detail::adopt_output(gx);
  return gx;
}

}  // namespace

void conv2d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
            const Conv2dOptions& options) {
  // x feeds only the weight's gradient, the weight only x's.
  const Tensor none;
  record(out, "conv2d", inputs(x, weight, bias), saves(wants_grad(weight) ? x : none, wants_grad(x) ? weight : none),
         [options, x_shape = x.shape(), w_shape = weight.shape()](Vjp& v) {
           if (v.needs(0) || v.needs(1)) refuse_recording(v, "conv2d");
           if (v.needs(2)) v.set(2, forge::sum(v.grad(), v.grad().dim() == 4 ? DimList{0, 2, 3} : DimList{1, 2}));
           if (v.needs(0) || v.needs(1)) conv2d_backward(v, options, x_shape, w_shape);
         });
}

void max_pool2d(const Tensor& out, const Tensor& x, const Pool2dOptions& options) {
  record(out, "max_pool2d", inputs(x), saves(x), [options](Vjp& v) {
    refuse_recording(v, "max_pool2d");
    v.set(0, pool_backward(v.grad(), v.saved(0), v.input_shape(0), options, true));
  });
}

void avg_pool2d(const Tensor& out, const Tensor& x, const Pool2dOptions& options) {
  record(out, "avg_pool2d", inputs(x), saves(), [options](Vjp& v) {
    refuse_recording(v, "avg_pool2d");
    v.set(0, pool_backward(v.grad(), Tensor(), v.input_shape(0), options, false));
  });
}

}  // namespace forge::autograd::rules
