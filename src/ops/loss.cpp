// cross_entropy, nll_loss, mse_loss: validate, plan the rows (the input is
// [C], [N, C] or [N, C, d1, ..., dk], classes at dim 1 as in libtorch, with
// targets of the other dims), then run the nn family's loss kernels
// (backend/kernels/nn.h). Rows whose target is ignore_index give 0 and do
// not count in the mean; a mean over no counted rows is NaN (0 / 0), as in
// libtorch.

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "forge/ops.h"
#include "ops/nn_internal.h"

namespace forge {
namespace {

void check_reduction(const char* op, Reduction r) {
  FORGE_CHECK(r == Reduction::none || r == Reduction::mean || r == Reduction::sum, invalid_argument, op,
              "unknown reduction ", static_cast<int>(r));
}

// What a class-index loss is computed over.
struct RowLoss {
  std::int64_t classes;
  Shape out_shape;
};

RowLoss plan_rows(const char* op, const Tensor& input, const char* input_name, const Tensor& target,
                  std::int64_t ignore_index, Reduction reduction) {
  detail::check_input(op, input, input_name);
  detail::check_input(op, target, "target");
  detail::check_same_runtime(op, input, target);
  check_reduction(op, reduction);
  detail::check_floating(op, input, input_name);
  detail::check_index_dtype(op, target, "target");
  FORGE_CHECK(input.dim() >= 1, shape, op, input_name, " must be [C], [N, C] or [N, C, d1, ...], got shape ",
              input.shape());
  // The class dim is 1 (0 for [C]); the target has the input's other dims.
  const int class_dim = input.dim() == 1 ? 0 : 1;
  Shape want;
  for (int d = 0; d < input.dim(); ++d)
    if (d != class_dim) want.push_back(input.shape()[d]);
  FORGE_CHECK(target.shape() == want, shape, op, "target has shape ", target.shape(), " but ", input_name, " of shape ",
              input.shape(), " needs ", want, " (the classes are dim ", class_dim, ")");
  RowLoss plan{input.shape()[class_dim], Shape{}};
  if (auto bad = detail::find_bad_index(op, target, plan.classes, ignore_index)) {
    FORGE_FAIL(out_of_range, op, "target ", bad->value, " at position ", bad->position, " is out of range for ",
               plan.classes, " classes (ignore_index is ", ignore_index, ")");
  }
  if (reduction == Reduction::none) plan.out_shape = target.shape();
  return plan;
}

using ClassLossEntry = backend::Entry<backend::ClassLossFn> backend::NnKernels::*;

// The class loss of input over target into out, by the nn family's `entry`
// (cross_entropy or nll_loss).
void run_class_loss(const char* op, ClassLossEntry entry, Tensor& out, const Tensor& input, const Tensor& target,
                    std::int64_t ignore_index, Reduction reduction, double label_smoothing) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::ClassLossFn* const fn = (dev.kernels().nn.*entry).get(op, input.dtype(), dev);
  ScratchLease<std::int64_t> target_scratch;
  backend::ClassLoss p;
  p.rows = backend::ClassRows(input.shape(), input.strides());
  p.x = detail::first_element(input);
  p.targets = detail::index_values(op, target, target_scratch);
  p.ignore_index = ignore_index;
  p.label_smoothing = label_smoothing;
  p.reduce = reduction != Reduction::none;
  p.mean = reduction == Reduction::mean;
  p.out_shape = out.shape();
  p.out = detail::operand(out);
  fn(dev, p);
}

void check_smoothing(const char* op, double ls) {
  FORGE_CHECK(ls >= 0.0 && ls <= 1.0, invalid_argument, op, "label_smoothing must be in [0, 1], got ", ls);
}

void run_cross_entropy(const char* op, Tensor& out, const Tensor& logits, const Tensor& target,
                       const CrossEntropyOptions& o) {
  run_class_loss(op, &backend::NnKernels::cross_entropy, out, logits, target, o.ignore_index, o.reduction,
                 o.label_smoothing);
}

void run_nll_loss(const char* op, Tensor& out, const Tensor& log_probs, const Tensor& target, Reduction reduction,
                  std::int64_t ignore_index) {
  run_class_loss(op, &backend::NnKernels::nll_loss, out, log_probs, target, ignore_index, reduction, 0.0);
}

void check_into(const char* op, const Tensor& out, const Tensor& in, const Shape& shape) {
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, in);
  detail::check_out_geometry(op, out, shape, in.dtype());
}

// ---- mse_loss ----

struct MsePlan {
  Shape shape;
  DType dtype;
};

MsePlan plan_mse(const char* op, const Tensor& a, const Tensor& b, Reduction reduction) {
  detail::check_input(op, a, "a");
  detail::check_input(op, b, "b");
  detail::check_same_runtime(op, a, b);
  check_reduction(op, reduction);
  const DType dtype = promote_types(a.dtype(), b.dtype());
  FORGE_CHECK(is_floating(dtype), dtype, op, "takes floating tensors, got ", dtype_name(a.dtype()), " and ",
              dtype_name(b.dtype()));
  return {broadcast_shapes(a.shape(), b.shape(), op), dtype};
}

void run_mse_loss(const char* op, Tensor& out, const Tensor& a_in, const Tensor& b_in, const MsePlan& plan,
                  Reduction reduction) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::MseLossFn* const fn = dev.kernels().nn.mse_loss.get(op, plan.dtype, dev);
  Tensor ca, cb;  // inputs in the result dtype, when they are not
  if (a_in.dtype() != plan.dtype) ca = detail::cast_temporary(a_in, plan.dtype, op);
  if (b_in.dtype() != plan.dtype) cb = detail::cast_temporary(b_in, plan.dtype, op);
  const Tensor& a = ca.defined() ? ca : a_in;
  const Tensor& b = cb.defined() ? cb : b_in;
  backend::MseLoss p;
  p.shape = plan.shape;
  p.a = detail::operand_broadcast(a, plan.shape);
  p.b = detail::operand_broadcast(b, plan.shape);
  p.out = detail::operand(out);
  p.reduce = reduction != Reduction::none;
  p.mean = reduction == Reduction::mean;
  fn(dev, p);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) try {
  const char* op = "cross_entropy";
  const RowLoss plan = plan_rows(op, logits, "logits", target, options.ignore_index, options.reduction);
  check_smoothing(op, options.label_smoothing);
  Tensor out = detail::allocate(logits.runtime(), plan.out_shape, logits.dtype(), op);
  run_cross_entropy(op, out, logits, target, options);
  detail::adopt_output(out);
  FORGE_RECORD(cross_entropy, out, logits, target, options);
  return out;
}
FORGE_CATCH_OOM("cross_entropy")

Tensor& cross_entropy_into(Tensor& out, const Tensor& logits, const Tensor& target,
                           const CrossEntropyOptions& options) try {
  const char* op = "cross_entropy_into";
  const RowLoss plan = plan_rows(op, logits, "logits", target, options.ignore_index, options.reduction);
  check_smoothing(op, options.label_smoothing);
  check_into(op, out, logits, plan.out_shape);
  detail::check_no_overlap(op, out, logits, "logits");
  detail::check_no_overlap(op, out, target, "target");
  run_cross_entropy(op, out, logits, target, options);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("cross_entropy_into")

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, std::int64_t ignore_index) try {
  const char* op = "nll_loss";
  const RowLoss plan = plan_rows(op, log_probs, "log_probs", target, ignore_index, reduction);
  Tensor out = detail::allocate(log_probs.runtime(), plan.out_shape, log_probs.dtype(), op);
  run_nll_loss(op, out, log_probs, target, reduction, ignore_index);
  detail::adopt_output(out);
  FORGE_RECORD(nll_loss, out, log_probs, target, reduction, ignore_index);
  return out;
}
FORGE_CATCH_OOM("nll_loss")

Tensor& nll_loss_into(Tensor& out, const Tensor& log_probs, const Tensor& target, Reduction reduction,
                      std::int64_t ignore_index) try {
  const char* op = "nll_loss_into";
  const RowLoss plan = plan_rows(op, log_probs, "log_probs", target, ignore_index, reduction);
  check_into(op, out, log_probs, plan.out_shape);
  detail::check_no_overlap(op, out, log_probs, "log_probs");
  detail::check_no_overlap(op, out, target, "target");
  run_nll_loss(op, out, log_probs, target, reduction, ignore_index);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("nll_loss_into")

Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction) try {
  const char* op = "mse_loss";
  const MsePlan plan = plan_mse(op, a, b, reduction);
  const Shape shape = reduction == Reduction::none ? plan.shape : Shape{};
  detail::checked_numel(op, plan.shape, plan.dtype);
  Tensor out = detail::allocate(a.runtime(), shape, plan.dtype, op);
  run_mse_loss(op, out, a, b, plan, reduction);
  detail::adopt_output(out);
  FORGE_RECORD(mse_loss, out, a, b, reduction);
  return out;
}
FORGE_CATCH_OOM("mse_loss")

Tensor& mse_loss_into(Tensor& out, const Tensor& a, const Tensor& b, Reduction reduction) try {
  const char* op = "mse_loss_into";
  const MsePlan plan = plan_mse(op, a, b, reduction);
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, a);
  detail::check_out_geometry(op, out, reduction == Reduction::none ? plan.shape : Shape{}, plan.dtype);
  if (reduction == Reduction::none) {  // elementwise: out may be an input exactly
    detail::check_no_partial_overlap(op, out, a, "a");
    detail::check_no_partial_overlap(op, out, b, "b");
  }
  run_mse_loss(op, out, a, b, plan, reduction);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("mse_loss_into")

}  // namespace forge
