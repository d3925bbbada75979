// cross_entropy, nll_loss, mse_loss.
//
// - The input is [C], [N, C] or [N, C, d1, ..., dk] (classes at dim 1, as in
//   libtorch) with targets of the other dims; a row is one target's classes,
//   read through the class stride wherever it lies (cpu::ClassRows).
// - cross_entropy is fused per row: max, then sum(exp(x - max)) and sum(x),
//   in f32 (f64 for f64 input); no log_softmax is materialized.
//   loss = (1 - ls) * (lse - x[t]) + ls * (lse - mean(x)), libtorch 1.13's
//   label smoothing for class-index targets.
// - Rows whose target is ignore_index give 0 and do not count in the mean;
//   a mean over no counted rows is NaN (0 / 0), as in libtorch.
// - Row losses land in a scratch array of doubles and are summed in row
//   order, so a reduction does not depend on the thread count.

#include <cmath>
#include <limits>

// GCC 12 reports a false (maybe-)uninitialized use inside Eigen's AVX-512 exp
// (_mm512_undefined_ps); the warning is about the intrinsic, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "backend/cpu/nn_backward_kernels.h"
#include "core/convert.h"
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
  if (auto bad = detail::find_bad_index(target, plan.classes, ignore_index)) {
    FORGE_FAIL(out_of_range, op, "target ", bad->value, " at position ", bad->position, " is out of range for ",
               plan.classes, " classes (ignore_index is ", ignore_index, ")");
  }
  if (reduction == Reduction::none) plan.out_shape = target.shape();
  return plan;
}

// Per-row losses into `losses` (0 for ignored rows), computed by
// row_fn(row pointer, column stride, target) -> double.
template <typename RowFn>
void for_each_row(Runtime& rt, const Tensor& input, const cpu::ClassRows& rows, const std::int64_t* targets,
                  std::int64_t ignore_index, double* losses, RowFn&& row_fn) {
  const std::int64_t classes = rows.classes, cs = rows.class_stride;
  const std::int64_t grain = std::max<std::int64_t>(1, cpu::kGrainElements / std::max<std::int64_t>(classes, 1));
  dispatch_dtype(input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) {
      const T* base = reinterpret_cast<const T*>(detail::first_element(input));
      rt.parallel_for(rows.rows, grain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          const std::int64_t t = targets[i];
          losses[i] = t == ignore_index ? 0.0 : row_fn(base + rows.offset(i), cs, classes, t);
        }
      });
    }
  });
}

// The fused cross entropy of one row: f32 and f64 rows go through Eigen's
// vectorized max, exp and sums; 16-bit rows are widened to f32 as they are read.
template <typename T>
double cross_entropy_row(const T* x, std::int64_t cs, std::int64_t n, std::int64_t t, double smoothing) {
  double m, s, sx;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
    auto stats = [&](const auto& row) {
      const T mt = row.maxCoeff();
      m = static_cast<double>(mt);
      s = static_cast<double>((row - mt).exp().sum());
      sx = smoothing == 0.0 ? 0.0 : static_cast<double>(row.sum());
    };
    if (cs == 1)
      stats(Eigen::Map<const Row>(x, n));
    else
      stats(Eigen::Map<const Row, 0, Eigen::InnerStride<>>(x, n, Eigen::InnerStride<>(cs)));
  } else {
    float mf = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < n; ++j) mf = std::max(mf, static_cast<float>(x[j * cs]));
    float sf = 0, sxf = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      const float v = static_cast<float>(x[j * cs]);
      sf += std::exp(v - mf);
      sxf += v;
    }
    m = mf;
    s = sf;
    sx = sxf;
  }
  const double lse = m + std::log(s);
  const double nll = lse - static_cast<double>(widen(x[t * cs]));
  if (smoothing == 0.0) return nll;
  return (1.0 - smoothing) * nll + smoothing * (lse - sx / static_cast<double>(n));
}

// Writes the row losses (reduction none) or their sum / mean into out.
void finish(Tensor& out, const double* losses, std::int64_t rows, const std::int64_t* targets,
            std::int64_t ignore_index, Reduction reduction) {
  Runtime& rt = out.runtime();
  if (reduction == Reduction::none) {  // out has the targets' shape; losses are in its row-major order
    const cpu::Operand src{reinterpret_cast<std::byte*>(const_cast<double*>(losses)), DType::f64,
                           contiguous_strides(out.shape())};
    cpu::copy_cast(rt, out.shape(), detail::operand(out), src);
    return;
  }
  double total = 0;
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    total += losses[i];
    counted += targets[i] != ignore_index;
  }
  const double value = reduction == Reduction::sum ? total : total / static_cast<double>(counted);
  detail::fill("loss", out, Shape{}, detail::operand(out), value);
}

template <typename RowFn>
void class_loss_kernel(Tensor& out, const Tensor& input, const Tensor& target, std::int64_t ignore_index,
                       Reduction reduction, RowFn&& row_fn) {
  Runtime& rt = input.runtime();
  const cpu::ClassRows layout(input.shape(), input.strides());
  const std::int64_t rows = layout.rows;
  ScratchLease<std::int64_t> target_scratch;
  const std::int64_t* targets = detail::index_values(target, target_scratch);
  // Small batches keep their row losses on the stack: no pool round trip.
  constexpr std::int64_t kStackRows = 64;
  double stack[kStackRows];
  ScratchLease<double> lease;
  double* losses = stack;
  if (rows > kStackRows) {
    lease = rt.pool().scratch<double>(static_cast<std::size_t>(rows));
    losses = lease.data();
  }
  for_each_row(rt, input, layout, targets, ignore_index, losses, row_fn);
  finish(out, losses, rows, targets, ignore_index, reduction);
}

void check_smoothing(const char* op, double ls) {
  FORGE_CHECK(ls >= 0.0 && ls <= 1.0, invalid_argument, op, "label_smoothing must be in [0, 1], got ", ls);
}

void cross_entropy_kernel(Tensor& out, const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  const double ls = o.label_smoothing;
  class_loss_kernel(out, logits, target, o.ignore_index, o.reduction,
                    [ls](const auto* x, std::int64_t cs, std::int64_t n, std::int64_t t) {
                      return cross_entropy_row(x, cs, n, t, ls);
                    });
}

void nll_loss_kernel(Tensor& out, const Tensor& log_probs, const Tensor& target, Reduction reduction,
                     std::int64_t ignore_index) {
  class_loss_kernel(out, log_probs, target, ignore_index, reduction,
                    [](const auto* x, std::int64_t cs, std::int64_t, std::int64_t t) {
                      return -static_cast<double>(widen(x[t * cs]));
                    });
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

void mse_kernel(Tensor& out, const Tensor& a_in, const Tensor& b_in, const MsePlan& plan, Reduction reduction) {
  Runtime& rt = out.runtime();
  Tensor ca, cb;  // inputs in the result dtype, when they are not
  if (a_in.dtype() != plan.dtype) ca = detail::cast_temporary(a_in, plan.dtype, "mse_loss");
  if (b_in.dtype() != plan.dtype) cb = detail::cast_temporary(b_in, plan.dtype, "mse_loss");
  const Tensor& a = ca.defined() ? ca : a_in;
  const Tensor& b = cb.defined() ? cb : b_in;
  const cpu::Operand oa = detail::operand_broadcast(a, plan.shape), ob = detail::operand_broadcast(b, plan.shape);
  const std::int64_t n = plan.shape.numel();
  dispatch_dtype(plan.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) {
      using C = compute_t<T>;
      if (reduction == Reduction::none) {
        const cpu::Operand oo = detail::operand(out);
        const Strides* const strides[3] = {&oo.strides, &oa.strides, &ob.strides};
        const cpu::StridedLoop<3> loop(plan.shape, strides);
        const std::int64_t so = loop.strides[0].back(), sa = loop.strides[1].back(), sb = loop.strides[2].back();
        cpu::for_each_run(rt, loop, [&](const std::int64_t(&off)[3], std::int64_t count) {
          T* o = reinterpret_cast<T*>(oo.data) + off[0];
          const T* x = reinterpret_cast<const T*>(oa.data) + off[1];
          const T* y = reinterpret_cast<const T*>(ob.data) + off[2];
          for (std::int64_t k = 0; k < count; ++k) {
            const C d = widen(x[k * sa]) - widen(y[k * sb]);
            o[k * so] = convert<T>(d * d);
          }
        });
        return;
      }
      // Fixed blocks, each summed in f64, then the block sums in order: the
      // result does not depend on how the blocks were spread over threads.
      const Strides* const strides[2] = {&oa.strides, &ob.strides};
      const cpu::StridedLoop<2> loop(plan.shape, strides);
      const std::int64_t sa = loop.strides[0].back(), sb = loop.strides[1].back();
      const std::int64_t block = cpu::kGrainElements, blocks = (n + block - 1) / block;
      ScratchLease<double> partial =
          rt.pool().scratch<double>(static_cast<std::size_t>(std::max<std::int64_t>(blocks, 1)));
      rt.parallel_for(blocks, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t k = begin; k < end; ++k) {
          double acc = 0;
          detail::for_each_run_in(loop, k * block, std::min(n, (k + 1) * block),
                                  [&](const std::int64_t(&off)[2], std::int64_t count, std::int64_t) {
                                    const T* x = reinterpret_cast<const T*>(oa.data) + off[0];
                                    const T* y = reinterpret_cast<const T*>(ob.data) + off[1];
                                    for (std::int64_t j = 0; j < count; ++j) {
                                      const double d =
                                          static_cast<double>(widen(x[j * sa])) - static_cast<double>(widen(y[j * sb]));
                                      acc += d * d;
                                    }
                                  });
          partial[static_cast<std::size_t>(k)] = acc;
        }
      });
      double total = 0;
      for (std::int64_t k = 0; k < blocks; ++k) total += partial[static_cast<std::size_t>(k)];
      const double value = reduction == Reduction::sum ? total : total / static_cast<double>(n);
      detail::fill("loss", out, Shape{}, detail::operand(out), value);
    }
  });
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) try {
  const char* op = "cross_entropy";
  const RowLoss plan = plan_rows(op, logits, "logits", target, options.ignore_index, options.reduction);
  check_smoothing(op, options.label_smoothing);
  Tensor out = detail::allocate(logits.runtime(), plan.out_shape, logits.dtype(), op);
  cross_entropy_kernel(out, logits, target, options);
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
  cross_entropy_kernel(out, logits, target, options);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("cross_entropy_into")

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, std::int64_t ignore_index) try {
  const char* op = "nll_loss";
  const RowLoss plan = plan_rows(op, log_probs, "log_probs", target, ignore_index, reduction);
  Tensor out = detail::allocate(log_probs.runtime(), plan.out_shape, log_probs.dtype(), op);
  nll_loss_kernel(out, log_probs, target, reduction, ignore_index);
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
  nll_loss_kernel(out, log_probs, target, reduction, ignore_index);
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
  mse_kernel(out, a, b, plan, reduction);
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
  mse_kernel(out, a, b, plan, reduction);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("mse_loss_into")

}  // namespace forge
