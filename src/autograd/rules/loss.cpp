// VJPs of the losses: one short function per op (see record.h). The class
// losses run one fused pass over the rows (backend/cpu/nn_backward_kernels.h):
// cross_entropy's gradient (softmax - smoothed one-hot) * scale is written
// without materializing the softmax or the target distribution.

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "backend/cpu/nn_backward_kernels.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"
#include "ops/nn_internal.h"

namespace forge::autograd::rules {
namespace {

// The gradient of a class loss over an input of `shape` ([N, C] or [C]) and
// `dtype`: the kernel fills a packed tensor in f32 (f64 for f64) and Vjp::set
// casts back. input: the logits (cross_entropy) or undefined (nll_loss).
template <typename Kernel>
Tensor class_loss_grad(const Shape& shape, DType dtype, const Tensor& input, const Tensor& target, const Tensor& grad,
                       Reduction reduction, std::int64_t ignore_index, double smoothing, Kernel&& kernel) {
  const DType cd = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor x = input.defined() ? input.to(cd) : Tensor();
  const Tensor g = grad.to(cd);
  Tensor dx = detail::allocate(grad.runtime(), shape, cd, "backward");
  detail::adopt_output(dx);
  ScratchLease<std::int64_t> scratch;
  cpu::ClassLossBackward p;
  p.dtype = cd;
  p.rows = shape.rank() == 2 ? shape[0] : 1;
  p.classes = shape.back();
  if (x.defined()) {
    p.rs = x.dim() == 2 ? x.strides()[0] : 0;
    p.cs = x.strides().back();
    p.x = detail::first_element(x);
  }
  p.targets = detail::index_values(target, scratch);
  p.ignore_index = ignore_index;
  p.label_smoothing = smoothing;
  p.g = detail::first_element(g);
  p.g_stride = reduction == Reduction::none && g.dim() == 1 ? g.strides()[0] : 0;
  p.mean = reduction == Reduction::mean;
  p.dx = detail::first_element(dx);
  if (dx.numel() > 0) kernel(grad.runtime(), p);
  return dx;
}

}  // namespace

void cross_entropy(const Tensor& out, const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  record(out, "cross_entropy", inputs(logits), saves(logits, target), [options](Vjp& v) {
    v.set(0, class_loss_grad(v.input_shape(0), v.input_dtype(0), v.saved(0), v.saved(1), v.grad(), options.reduction,
                             options.ignore_index, options.label_smoothing, cpu::cross_entropy_backward));
  });
}

void nll_loss(const Tensor& out, const Tensor& log_probs, const Tensor& target, Reduction reduction,
              std::int64_t ignore_index) {
  // Only the input's shape and the targets matter: save the targets alone.
  record(out, "nll_loss", inputs(log_probs), saves(target), [reduction, ignore_index](Vjp& v) {
    v.set(0, class_loss_grad(v.input_shape(0), v.input_dtype(0), Tensor(), v.saved(0), v.grad(), reduction,
                             ignore_index, 0.0, cpu::nll_loss_backward));
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
