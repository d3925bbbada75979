// Unary elementwise ops and clamp. neg, abs, sign, square, relu and clamp keep
// the dtype (square of bool gives i64, as libtorch's pow(x, 2)); the others
// compute in floating point, integer and bool inputs giving f32. Each
// differentiable op records itself when autograd needs it (FORGE_RECORD; the
// rules are in src/autograd/rules/unary.cpp, clamp's in elementwise.cpp).

#include "autograd/rules/unary.h"

#include "autograd/record.h"
#include "autograd/rules/elementwise.h"
#include "forge/ops.h"
#include "ops/elementwise_internal.h"

namespace forge {
namespace {

using backend::Unary;
using backend::UnaryParams;

// The dtype `kind` computes in (and returns) for an input of `dtype`.
DType unary_dtype(const char* op, Unary kind, DType dtype) {
  switch (kind) {
    case Unary::neg:
      FORGE_CHECK(dtype != DType::boolean, dtype, op, "does not take bool tensors (use logical_not)");
      return dtype;
    case Unary::relu:
      FORGE_CHECK(dtype != DType::boolean, dtype, op, "does not take bool tensors");
      return dtype;
    case Unary::abs:
    case Unary::sign:
      return dtype;
    case Unary::square:
      return dtype == DType::boolean ? DType::i64 : dtype;
    default:
      return is_floating(dtype) ? dtype : DType::f32;
  }
}

void launch(const char* op, Unary kind, DType compute, const UnaryParams& params, const Tensor& out, const Tensor& x) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const backend::ElementwiseKernels& kernels = dev.kernels().elementwise;
  if (out.is_contiguous() && x.is_contiguous()) {
    kernels.unary_flat.get(op, compute, dev)(dev, kind, compute, params, out.numel(), detail::flat_arg(out),
                                             detail::flat_arg(x));
  } else {
    kernels.unary_op.get(op, compute, dev)(dev, kind, compute, params, out.shape(), detail::operand(out),
                                           detail::operand(x));
  }
}

Tensor unary(const char* op, Unary kind, const Tensor& x, const UnaryParams& params = {}) {
  detail::check_input(op, x, "x");
  const DType dtype = unary_dtype(op, kind, x.dtype());
  Tensor out = detail::allocate(x.runtime(), x.shape(), dtype, op);
  launch(op, kind, dtype, params, out, x);
  detail::adopt_output(out);
  return out;
}

// Every _into form is this call; it reports an allocation failure itself.
Tensor& unary_into(const char* op, Unary kind, Tensor& out, const Tensor& x, const UnaryParams& params = {}) try {
  detail::check_writable(op, out, "out");
  detail::check_input(op, x, "x");
  const DType dtype = unary_dtype(op, kind, x.dtype());
  detail::check_out(op, out, x, x.shape(), dtype);
  detail::check_no_partial_overlap(op, out, x, "x");
  launch(op, kind, dtype, params, out, x);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM(op)

UnaryParams slope(double negative_slope) { return {.p0 = negative_slope}; }
UnaryParams softplus_params(double beta, double threshold) { return {.p0 = beta, .p1 = threshold}; }
UnaryParams elu_params(double alpha) { return {.p0 = alpha}; }
Unary gelu_kind(GeluApproximation approximate) {
  return approximate == GeluApproximation::tanh ? Unary::gelu_tanh : Unary::gelu;
}

// clamp's dtype (libtorch's result_type over x and the bounds) and its bounds in it.
DType clamp_setup(const char* op, const Tensor& x, const std::optional<Scalar>& min, const std::optional<Scalar>& max,
                  UnaryParams& params) {
  detail::check_input(op, x, "x");
  FORGE_CHECK(min || max, invalid_argument, op, "needs at least one of min and max");
  DType dtype = x.dtype();
  if (min) dtype = result_type(dtype, *min);
  if (max) dtype = result_type(dtype, *max);
  FORGE_CHECK(dtype != DType::boolean, dtype, op, "does not take bool tensors");
  if (min) {
    const detail::ScalarSlot lo = detail::checked_slot(op, dtype, *min, "min");
    params.has_lo = true;
    params.lo = lo.as_double();
    params.lo_int = lo.as_int();
  }
  if (max) {
    const detail::ScalarSlot hi = detail::checked_slot(op, dtype, *max, "max");
    params.has_hi = true;
    params.hi = hi.as_double();
    params.hi_int = hi.as_int();
  }
  return dtype;
}

}  // namespace

Tensor neg(const Tensor& x) try {
  Tensor out = unary("neg", Unary::neg, x);
  FORGE_RECORD(neg, out, x);
  return out;
}
FORGE_CATCH_OOM("neg")
Tensor abs(const Tensor& x) try {
  Tensor out = unary("abs", Unary::abs, x);
  FORGE_RECORD(abs, out, x);
  return out;
}
FORGE_CATCH_OOM("abs")
Tensor sign(const Tensor& x) try {
  Tensor out = unary("sign", Unary::sign, x);
  FORGE_RECORD(sign, out, x);
  return out;
}
FORGE_CATCH_OOM("sign")
Tensor exp(const Tensor& x) try {
  Tensor out = unary("exp", Unary::exp, x);
  FORGE_RECORD(exp, out, x);
  return out;
}
FORGE_CATCH_OOM("exp")
Tensor expm1(const Tensor& x) try {
  Tensor out = unary("expm1", Unary::expm1, x);
  FORGE_RECORD(expm1, out, x);
  return out;
}
FORGE_CATCH_OOM("expm1")
Tensor log(const Tensor& x) try {
  Tensor out = unary("log", Unary::log, x);
  FORGE_RECORD(log, out, x);
  return out;
}
FORGE_CATCH_OOM("log")
Tensor log1p(const Tensor& x) try {
  Tensor out = unary("log1p", Unary::log1p, x);
  FORGE_RECORD(log1p, out, x);
  return out;
}
FORGE_CATCH_OOM("log1p")
Tensor sqrt(const Tensor& x) try {
  Tensor out = unary("sqrt", Unary::sqrt, x);
  FORGE_RECORD(sqrt, out, x);
  return out;
}
FORGE_CATCH_OOM("sqrt")
Tensor rsqrt(const Tensor& x) try {
  Tensor out = unary("rsqrt", Unary::rsqrt, x);
  FORGE_RECORD(rsqrt, out, x);
  return out;
}
FORGE_CATCH_OOM("rsqrt")
Tensor square(const Tensor& x) try {
  Tensor out = unary("square", Unary::square, x);
  FORGE_RECORD(square, out, x);
  return out;
}
FORGE_CATCH_OOM("square")
Tensor reciprocal(const Tensor& x) try {
  Tensor out = unary("reciprocal", Unary::reciprocal, x);
  FORGE_RECORD(reciprocal, out, x);
  return out;
}
FORGE_CATCH_OOM("reciprocal")
Tensor sin(const Tensor& x) try {
  Tensor out = unary("sin", Unary::sin, x);
  FORGE_RECORD(sin, out, x);
  return out;
}
FORGE_CATCH_OOM("sin")
Tensor cos(const Tensor& x) try {
  Tensor out = unary("cos", Unary::cos, x);
  FORGE_RECORD(cos, out, x);
  return out;
}
FORGE_CATCH_OOM("cos")
Tensor tanh(const Tensor& x) try {
  Tensor out = unary("tanh", Unary::tanh, x);
  FORGE_RECORD(tanh, out, x);
  return out;
}
FORGE_CATCH_OOM("tanh")
Tensor sigmoid(const Tensor& x) try {
  Tensor out = unary("sigmoid", Unary::sigmoid, x);
  FORGE_RECORD(sigmoid, out, x);
  return out;
}
FORGE_CATCH_OOM("sigmoid")
Tensor relu(const Tensor& x) try {
  Tensor out = unary("relu", Unary::relu, x);
  FORGE_RECORD(relu, out, x);
  return out;
}
FORGE_CATCH_OOM("relu")
Tensor leaky_relu(const Tensor& x, double negative_slope) try {
  Tensor out = unary("leaky_relu", Unary::leaky_relu, x, slope(negative_slope));
  FORGE_RECORD(leaky_relu, out, x, negative_slope);
  return out;
}
FORGE_CATCH_OOM("leaky_relu")
Tensor gelu(const Tensor& x, GeluApproximation approximate) try {
  Tensor out = unary("gelu", gelu_kind(approximate), x);
  FORGE_RECORD(gelu, out, x, approximate);
  return out;
}
FORGE_CATCH_OOM("gelu")
Tensor silu(const Tensor& x) try {
  Tensor out = unary("silu", Unary::silu, x);
  FORGE_RECORD(silu, out, x);
  return out;
}
FORGE_CATCH_OOM("silu")
Tensor softplus(const Tensor& x, double beta, double threshold) try {
  Tensor out = unary("softplus", Unary::softplus, x, softplus_params(beta, threshold));
  FORGE_RECORD(softplus, out, x, beta, threshold);
  return out;
}
FORGE_CATCH_OOM("softplus")
Tensor elu(const Tensor& x, double alpha) try {
  Tensor out = unary("elu", Unary::elu, x, elu_params(alpha));
  FORGE_RECORD(elu, out, x, alpha);
  return out;
}
FORGE_CATCH_OOM("elu")
Tensor erf(const Tensor& x) try {
  Tensor out = unary("erf", Unary::erf, x);
  FORGE_RECORD(erf, out, x);
  return out;
}
FORGE_CATCH_OOM("erf")

Tensor& neg_into(Tensor& out, const Tensor& x) { return unary_into("neg_into", Unary::neg, out, x); }
Tensor& abs_into(Tensor& out, const Tensor& x) { return unary_into("abs_into", Unary::abs, out, x); }
Tensor& sign_into(Tensor& out, const Tensor& x) { return unary_into("sign_into", Unary::sign, out, x); }
Tensor& exp_into(Tensor& out, const Tensor& x) { return unary_into("exp_into", Unary::exp, out, x); }
Tensor& expm1_into(Tensor& out, const Tensor& x) { return unary_into("expm1_into", Unary::expm1, out, x); }
Tensor& log_into(Tensor& out, const Tensor& x) { return unary_into("log_into", Unary::log, out, x); }
Tensor& log1p_into(Tensor& out, const Tensor& x) { return unary_into("log1p_into", Unary::log1p, out, x); }
Tensor& sqrt_into(Tensor& out, const Tensor& x) { return unary_into("sqrt_into", Unary::sqrt, out, x); }
Tensor& rsqrt_into(Tensor& out, const Tensor& x) { return unary_into("rsqrt_into", Unary::rsqrt, out, x); }
Tensor& square_into(Tensor& out, const Tensor& x) { return unary_into("square_into", Unary::square, out, x); }
Tensor& reciprocal_into(Tensor& out, const Tensor& x) {
  return unary_into("reciprocal_into", Unary::reciprocal, out, x);
}
Tensor& sin_into(Tensor& out, const Tensor& x) { return unary_into("sin_into", Unary::sin, out, x); }
Tensor& cos_into(Tensor& out, const Tensor& x) { return unary_into("cos_into", Unary::cos, out, x); }
Tensor& tanh_into(Tensor& out, const Tensor& x) { return unary_into("tanh_into", Unary::tanh, out, x); }
Tensor& sigmoid_into(Tensor& out, const Tensor& x) { return unary_into("sigmoid_into", Unary::sigmoid, out, x); }
Tensor& relu_into(Tensor& out, const Tensor& x) { return unary_into("relu_into", Unary::relu, out, x); }
Tensor& leaky_relu_into(Tensor& out, const Tensor& x, double negative_slope) {
  return unary_into("leaky_relu_into", Unary::leaky_relu, out, x, slope(negative_slope));
}
Tensor& gelu_into(Tensor& out, const Tensor& x, GeluApproximation approximate) {
  return unary_into("gelu_into", gelu_kind(approximate), out, x);
}
Tensor& silu_into(Tensor& out, const Tensor& x) { return unary_into("silu_into", Unary::silu, out, x); }
Tensor& softplus_into(Tensor& out, const Tensor& x, double beta, double threshold) {
  return unary_into("softplus_into", Unary::softplus, out, x, softplus_params(beta, threshold));
}
Tensor& elu_into(Tensor& out, const Tensor& x, double alpha) {
  return unary_into("elu_into", Unary::elu, out, x, elu_params(alpha));
}
Tensor& erf_into(Tensor& out, const Tensor& x) { return unary_into("erf_into", Unary::erf, out, x); }

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) try {
  UnaryParams params;
  const DType dtype = clamp_setup("clamp", x, min, max, params);
  Tensor out = detail::allocate(x.runtime(), x.shape(), dtype, "clamp");
  launch("clamp", Unary::clamp, dtype, params, out, x);
  detail::adopt_output(out);
  FORGE_RECORD(clamp, out, x, min, max);
  return out;
}
FORGE_CATCH_OOM("clamp")

Tensor& clamp_into(Tensor& out, const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) try {
  detail::check_writable("clamp_into", out, "out");
  UnaryParams params;
  const DType dtype = clamp_setup("clamp_into", x, min, max, params);
  detail::check_out("clamp_into", out, x, x.shape(), dtype);
  detail::check_no_partial_overlap("clamp_into", out, x, "x");
  launch("clamp_into", Unary::clamp, dtype, params, out, x);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("clamp_into")

// ---- Tensor methods ----

Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return forge::clamp(*this, min, max);
}
Tensor Tensor::neg() const { return forge::neg(*this); }
Tensor Tensor::abs() const { return forge::abs(*this); }
Tensor Tensor::sign() const { return forge::sign(*this); }
Tensor Tensor::exp() const { return forge::exp(*this); }
Tensor Tensor::log() const { return forge::log(*this); }
Tensor Tensor::sqrt() const { return forge::sqrt(*this); }
Tensor Tensor::rsqrt() const { return forge::rsqrt(*this); }
Tensor Tensor::square() const { return forge::square(*this); }
Tensor Tensor::reciprocal() const { return forge::reciprocal(*this); }
Tensor Tensor::sin() const { return forge::sin(*this); }
Tensor Tensor::cos() const { return forge::cos(*this); }
Tensor Tensor::tanh() const { return forge::tanh(*this); }
Tensor Tensor::sigmoid() const { return forge::sigmoid(*this); }
Tensor Tensor::relu() const { return forge::relu(*this); }

}  // namespace forge
