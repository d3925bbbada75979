// VJPs of the losses: one short function per op (see record.h). The class
// losses run one fused pass over the rows of [C], [N, C] or [N, C, d1, ...]
// inputs (the nn family's class-loss gradients, backend/kernels/nn.h):
// cross_entropy's gradient (softmax - smoothed one-hot) * scale is written
// without materializing the softmax or the target distribution.

#include <algorithm>
#include <vector>

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"
#include "ops/nn_internal.h"

namespace forge::autograd::rules {
namespace {

// A dense tensor of x's shape laid out in x's memory order (its dims from
// the largest stride to the smallest), so that cross_entropy's gradient of
// [B, V, T] logits viewed from [B, T, V] is written, and flows back, as
// packed [B, T, V] rows. Packed when x overlaps itself or has gaps.
Tensor like_layout(const Tensor& x, DType dtype) {
  Runtime& rt = x.runtime();
  if (x.is_contiguous() || x.numel() == 0) return detail::allocate(rt, x.shape(), dtype, "backward");
  std::vector<int> order(static_cast<std::size_t>(x.dim()));  // x's dims, outermost in memory first
  for (int d = 0; d < x.dim(); ++d) order[static_cast<std::size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x.strides()[a] > x.strides()[b]; });
  Shape permuted;
  for (int d : order) permuted.push_back(x.shape()[d]);
  const Strides packed = contiguous_strides(permuted);
  Dims back = Dims::filled(x.dim(), 0);  // permuted dim k is x's dim order[k]
  for (int k = 0; k < x.dim(); ++k) {
    const int d = order[static_cast<std::size_t>(k)];
    if (x.shape()[d] != 1 && x.strides()[d] != packed[k]) return detail::allocate(rt, x.shape(), dtype, "backward");
    back[d] = k;
  }
  return detail::allocate(rt, permuted, dtype, "backward").permute(back);
}

// The gradient of a class loss over an input of `shape` ([C], [N, C] or [N,
// C, d1, ...]) and `dtype`: the nn family's `entry` (cross_entropy_backward
// or nll_loss_backward; `op` the loss) fills it in f32 (f64 for f64) and
// Vjp::set casts back. input: the logits (cross_entropy; the gradient takes
// their layout) or undefined (nll_loss; packed).
Tensor class_loss_grad(const char* op, backend::Entry<backend::ClassLossBackwardFn> backend::NnKernels::*entry,
                       const Shape& shape, DType dtype, const Tensor& input, const Tensor& target, const Tensor& grad,
                       Reduction reduction, std::int64_t ignore_index, double smoothing) {
  const DType cd = dtype == DType::f64 ? DType::f64 : DType::f32;
  detail::DeviceRuntime& dev = detail::device_runtime(grad);
  backend::ClassLossBackwardFn* const kernel = (dev.kernels().nn.*entry).get(op, cd, dev);
  const Tensor x = input.defined() ? input.to(cd) : Tensor();
  // Per-row gradients (reduction none) in the targets' row-major order.
  const Tensor g = reduction == Reduction::none ? grad.to(cd).contiguous() : grad.to(cd);
  Tensor dx = x.defined() ? like_layout(x, cd) : detail::allocate(grad.runtime(), shape, cd, "backward");
  detail::adopt_output(dx);
  ScratchLease<std::int64_t> scratch;
  backend::ClassLossBackward p;
  p.dtype = cd;
  p.dx_rows = backend::ClassRows(dx.shape(), dx.strides());
  if (x.defined()) {
    p.x_rows = backend::ClassRows(x.shape(), x.strides());
    p.x = detail::first_element(x);
  }
  p.targets = detail::index_values("backward", target, scratch);
  p.ignore_index = ignore_index;
  p.label_smoothing = smoothing;
  p.g = detail::first_element(g);
  p.g_stride = reduction == Reduction::none && g.dim() > 0 ? 1 : 0;
  p.mean = reduction == Reduction::mean;
  p.dx = detail::first_element(dx);
  if (dx.numel() > 0) kernel(dev, p);
  return dx;
}

// The class losses' gradients composed of ops, for a backward that records
// (Note [Fused backward kernels] in rules/common.h). Over input x of
// `shape` (classes in dim 1, or dim 0 for [C]) and class-index targets:
//   cross_entropy: dx = (softmax(x) - q) * scale,  nll_loss: dx = -onehot * scale,
// q the one-hot target smoothed toward uniform, scale = g * keep / count
// per target (count: the kept targets under mean, else 1).
Tensor class_loss_grad_ops(const Shape& shape, DType dtype, const Tensor& logits, const Tensor& target,
                           const Tensor& grad, Reduction reduction, std::int64_t ignore_index, double smoothing) {
  const int class_dim = shape.rank() == 1 ? 0 : 1;
  const std::int64_t classes = shape[class_dim];
  const DType cd = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor keep = ne(target, ignore_index);
  Tensor q = one_hot(masked_fill(target, logical_not(keep), 0), classes).to(cd);  // [..targets, C]
  if (q.dim() > 2) {                                                              // the classes back to dim 1
    Dims order{0, q.dim() - 1};
    for (int d = 1; d < q.dim() - 1; ++d) order.push_back(d);
    q = q.permute(order);
  }
  Tensor scale = keep.to(cd) * grad.to(cd);
  if (reduction == Reduction::mean) scale = scale / sum(keep.to(cd));
  scale = scale.unsqueeze(class_dim);
  if (!logits.defined()) return neg(q * scale);
  if (smoothing != 0.0) q = q * (1.0 - smoothing) + smoothing / static_cast<double>(classes);
  return (softmax(logits.to(cd), class_dim) - q) * scale;
}

}  // namespace

void cross_entropy(const Tensor& out, const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  record(out, "cross_entropy", inputs(logits), saves(logits, target), [options](Vjp& v) {
    if (v.create_graph())
      return v.set(0, class_loss_grad_ops(v.input_shape(0), v.input_dtype(0), v.saved(0), v.saved(1), v.grad(),
                                          options.reduction, options.ignore_index, options.label_smoothing));
    v.set(0, class_loss_grad("cross_entropy", &backend::NnKernels::cross_entropy_backward, v.input_shape(0),
                             v.input_dtype(0), v.saved(0), v.saved(1), v.grad(), options.reduction,
                             options.ignore_index, options.label_smoothing));
  });
}

void nll_loss(const Tensor& out, const Tensor& log_probs, const Tensor& target, Reduction reduction,
              std::int64_t ignore_index) {
  // Only the input's shape and the targets matter: save the targets alone.
  record(out, "nll_loss", inputs(log_probs), saves(target), [reduction, ignore_index](Vjp& v) {
    if (v.create_graph())
      return v.set(0, class_loss_grad_ops(v.input_shape(0), v.input_dtype(0), Tensor(), v.saved(0), v.grad(), reduction,
                                          ignore_index, 0.0));
    v.set(0, class_loss_grad("nll_loss", &backend::NnKernels::nll_loss_backward, v.input_shape(0), v.input_dtype(0),
                             Tensor(), v.saved(0), v.grad(), reduction, ignore_index, 0.0));
  });
}

// (a - b)^2 summed or averaged: 2 (a - b) g (/ n), and its negation for b.
void mse_loss(const Tensor& out, const Tensor& a, const Tensor& b, Reduction reduction) {
  record(out, "mse_loss", inputs(a, b), saves(a, b), [reduction](Vjp& v) {
    const Tensor d = sub(v.saved(0), v.saved(1));
    const double factor = reduction == Reduction::mean ? 2.0 / static_cast<double>(d.numel()) : 2.0;
    const Tensor ga = mul(mul(d, v.grad()), factor);
    v.set(0, ga);
    if (v.needs(1)) v.set(1, neg(ga));
  });
}

}  // namespace forge::autograd::rules
