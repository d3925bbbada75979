// infer::linear: y = x @ W^T (+ bias) over a PackedMatrix. Checks, then one
// pass that rounds x into pool scratch (Note [Activation rounding] in
// quant_kernels.cpp) and one over W's rows, split across the context's
// threads when the product is large enough to pay for it. The steady path
// allocates nothing but the output and the scratch, both from the pool.

#include <algorithm>

#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/infer/quant.h"
#include "infer/quant_internal.h"
#include "infer/quant_kernels.h"
#include "ops/linalg_internal.h"

namespace forge::infer {
namespace {

// Multiply-adds a task must hold before work is split (below: inline).
constexpr std::int64_t kGrainMacs = std::int64_t{1} << 17;

void check_no_grad(const char* op, const Tensor& t, const char* name) {
  FORGE_CHECK(!(t.requires_grad() && autograd::GradMode::is_enabled()), invalid_argument, op, name,
              " requires grad, and packed weights record no gradient: detach it, or call under NoGradGuard");
}

// The checks of linear and linear_into; returns the result's shape.
Shape check_linear(const char* op, const Tensor& x, const PackedMatrix& w, const Tensor& bias) {
  FORGE_CHECK(w.defined(), invalid_argument, op, "the weight matrix is empty (default-constructed)");
  detail::check_host(op, x, "x");
  forge::detail::check_readable(op, w.storage(), "the weight's storage");
  FORGE_CHECK(x.dtype() == DType::f32, dtype, op, "x must be f32, got ", dtype_name(x.dtype()));
  FORGE_CHECK(x.dim() >= 1, shape, op, "x needs at least one dimension, got shape ", x.shape());
  FORGE_CHECK(x.shape().back() == w.cols(), shape, op, "x has ", x.shape().back(), " features in its last dim (shape ",
              x.shape(), ") but the ", format_name(w.format()), " weight [", w.rows(), ", ", w.cols(), "] takes ",
              w.cols());
  check_no_grad(op, x, "x");
  if (bias.defined()) {
    detail::check_host(op, bias, "bias");
    FORGE_CHECK(bias.dtype() == DType::f32, dtype, op, "bias must be f32, got ", dtype_name(bias.dtype()));
    FORGE_CHECK(bias.dim() == 1 && bias.shape()[0] == w.rows(), shape, op, "bias must have shape [", w.rows(),
                "], got ", bias.shape());
    check_no_grad(op, bias, "bias");
  }
  Shape out = x.shape();
  out[out.rank() - 1] = w.rows();
  return out;
}

// The product into `out` (packed f32 of the result's shape, checked).
void compute(const char* op, detail::LinearKernel kernel, const Tensor& out, const Tensor& x, const PackedMatrix& w,
             const Tensor& bias) {
  detail::LinearProblem p;
  p.k = w.cols();
  p.n = w.rows();
  p.m = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) p.m *= x.shape()[d];
  if (p.m == 0 || p.n == 0) return;
  const Tensor xc = x.is_contiguous() ? x : forge::detail::cast_temporary(x, DType::f32, op);
  p.x = static_cast<const float*>(xc.raw_data(op));
  p.format = w.format();
  p.w = static_cast<const std::byte*>(w.storage().raw_data(op));
  p.w_row_bytes = packed_row_bytes(w.format(), w.cols());
  const Tensor bc = bias.defined() && !bias.is_contiguous() ? forge::detail::cast_temporary(bias, DType::f32, op) : bias;
  p.bias = bc.defined() ? static_cast<const float*>(bc.raw_data(op)) : nullptr;
  p.y = static_cast<float*>(out.raw_data(op));

  forge::detail::DeviceRuntime& host = x.runtime().host();
  const std::size_t scratch_bytes = detail::scratch_bytes(kernel, p);
  ScratchLease<std::byte> scratch;
  if (scratch_bytes > 0) scratch = host.pool().scratch<std::byte>(scratch_bytes);
  detail::prepare_activations(kernel, p, scratch.data());
  const std::int64_t grain = std::max<std::int64_t>(16, kGrainMacs / std::max<std::int64_t>(1, p.m * p.k));
  host.parallel_for(p.n, grain, [&](std::int64_t n0, std::int64_t n1) {
    detail::compute_rows(kernel, p, scratch.data(), n0, n1);
  });
}

Tensor linear_impl(const char* op, detail::LinearKernel kernel, const Tensor& x, const PackedMatrix& w,
                   const Tensor& bias) {
  const Shape shape = check_linear(op, x, w, bias);
  Runtime& rt = x.runtime();
  Tensor out = forge::detail::allocate_in(rt, rt.pool(), shape, DType::f32, op);
  compute(op, kernel, out, x, w, bias);
  forge::detail::adopt_output(out);
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const PackedMatrix& w, const Tensor& bias) try {
  return linear_impl("infer::linear", w.defined() ? detail::best_kernel(w.format()) : detail::LinearKernel::portable,
                     x, w, bias);
}
FORGE_CATCH_OOM("infer::linear")

Tensor& linear_into(Tensor& out, const Tensor& x, const PackedMatrix& w, const Tensor& bias) try {
  constexpr const char* op = "infer::linear_into";
  const Shape shape = check_linear(op, x, w, bias);
  detail::check_host(op, out, "out");
  check_no_grad(op, out, "out");
  if (!out.is_contiguous()) forge::detail::check_writable(op, out, "out");
  FORGE_CHECK(out.dtype() == DType::f32, dtype, op, "out must be f32, got ", dtype_name(out.dtype()));
  FORGE_CHECK(out.shape() == shape, shape, op, "out has shape ", out.shape(), " but the result has shape ", shape);
  forge::detail::check_no_overlap(op, out, x, "x");
  if (bias.defined()) forge::detail::check_no_overlap(op, out, bias, "bias");
  forge::detail::check_no_overlap(op, out, w.storage(), "the weight's storage");
  const detail::LinearKernel kernel = detail::best_kernel(w.format());
  if (out.is_contiguous()) {
    compute(op, kernel, out, x, w, bias);
  } else {
    Runtime& rt = x.runtime();
    const Tensor packed = forge::detail::allocate_in(rt, rt.pool(), shape, DType::f32, op);
    compute(op, kernel, packed, x, w, bias);
    forge::detail::copy_cast(op, out, shape, forge::detail::operand(out), forge::detail::operand(packed));
  }
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("infer::linear_into")

namespace detail {
Tensor linear_using(LinearKernel kernel, const Tensor& x, const PackedMatrix& w, const Tensor& bias) {
  return linear_impl("infer::linear", kernel, x, w, bias);
}
}  // namespace detail

}  // namespace forge::infer
