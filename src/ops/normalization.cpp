// softmax, log_softmax, layer_norm, rms_norm: validate, then run the nn
// family's fused kernels (backend/kernels/nn.h) on packed data. A strided
// input is packed into a temporary first, and a strided `out` is written
// through one, so the kernels only ever see contiguous rows.

#include <cfloat>

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge {
namespace {

void check_float(const char* op, const Tensor& x) {
  FORGE_CHECK(is_floating(x.dtype()), dtype, op, "needs a floating input, got ", dtype_name(x.dtype()));
}

// x itself when packed, else a packed temporary that `holder` keeps alive.
const Tensor& packed(const char* op, const Tensor& x, Tensor& holder) {
  if (x.is_contiguous()) return x;
  holder = detail::cast_temporary(x, x.dtype(), op);
  return holder;
}

void check_out(const char* op, const Tensor& out, const Tensor& x) {
  FORGE_CHECK(out.shape() == x.shape(), shape, op, "out has shape ", out.shape(), " but the result has shape ",
              x.shape());
  FORGE_CHECK(out.dtype() == x.dtype(), dtype, op, "out is ", dtype_name(out.dtype()), " but the result is ",
              dtype_name(x.dtype()));
}

// Runs kernel(in_bytes, out_bytes) from a packed x into out, through a packed
// temporary when out is strided.
template <typename Kernel>
void run_packed(const char* op, Tensor& out, const Tensor& x, Kernel&& kernel) {
  Tensor hold;
  const Tensor& in = packed(op, x, hold);
  if (out.is_contiguous()) {
    kernel(detail::first_element(in), detail::first_element(out));
    return;
  }
  Tensor tmp = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  kernel(detail::first_element(in), detail::first_element(tmp));
  detail::copy_cast(op, out, x.shape(), detail::operand(out), detail::operand(tmp));
}

// ---- softmax ----

void run_softmax(const char* op, Tensor& out, const Tensor& x, int dim, bool log) {
  std::int64_t outer = 1, n = 1, inner = 1;
  for (int d = 0; d < x.dim(); ++d) {
    if (d < dim)
      outer *= x.shape()[d];
    else if (d == dim)
      n = x.shape()[d];
    else
      inner *= x.shape()[d];
  }
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::SoftmaxFn* const kernel = dev.kernels().nn.softmax.get(op, x.dtype(), dev);
  run_packed(op, out, x,
             [&](const std::byte* in, std::byte* o) { kernel(dev, x.dtype(), outer, n, inner, in, o, log); });
}

Tensor softmax_op(const char* op, const Tensor& x, std::int64_t dim, bool log) try {
  detail::check_input(op, x, "x");
  check_float(op, x);
  const int d = wrap_dim(dim, x.dim(), op);
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  run_softmax(op, out, x, d, log);
  detail::adopt_output(out);
  if (log) {
    FORGE_RECORD(log_softmax, out, x, dim);
  } else {
    FORGE_RECORD(softmax, out, x, dim);
  }
  return out;
}
FORGE_CATCH_OOM(op)

Tensor& softmax_into_op(const char* op, Tensor& out, const Tensor& x, std::int64_t dim, bool log) {
  detail::check_writable(op, out, "out");
  detail::check_input(op, x, "x");
  detail::check_same_runtime(op, out, x);
  check_float(op, x);
  const int d = wrap_dim(dim, x.dim(), op);
  check_out(op, out, x);
  detail::check_no_partial_overlap(op, out, x, "x");
  run_softmax(op, out, x, d, log);
  out.buffer()->bump_version();
  return out;
}

// ---- layer_norm and rms_norm ----

// Checks normalized_shape against x's trailing dims and weight/bias against
// it; returns the row length.
std::int64_t check_norm_args(const char* op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                             const Tensor& bias) {
  detail::check_input(op, x, "x");
  check_float(op, x);
  const int k = normalized_shape.rank();
  FORGE_CHECK(k >= 1, invalid_argument, op, "normalized_shape must have at least one dim");
  bool matches = k <= x.dim();
  for (int i = 0; i < k && matches; ++i) matches = x.shape()[x.dim() - k + i] == normalized_shape[i];
  FORGE_CHECK(matches, shape, op, "normalized_shape ", normalized_shape, " does not match the trailing dims of x ",
              x.shape());
  auto check_param = [&](const Tensor& p, const char* name) {
    if (!p.defined()) return;
    detail::check_input(op, p, name);
    detail::check_same_runtime(op, x, p);
    FORGE_CHECK(p.shape() == normalized_shape, shape, op, name, " has shape ", p.shape(), " but normalized_shape is ",
                normalized_shape);
    FORGE_CHECK(p.dtype() == x.dtype(), dtype, op, name, " is ", dtype_name(p.dtype()), " but x is ",
                dtype_name(x.dtype()));
  };
  check_param(weight, "weight");
  check_param(bias, "bias");
  return normalized_shape.numel();
}

const std::byte* param_data(const char* op, const Tensor& p, Tensor& holder) {
  if (!p.defined()) return nullptr;
  return detail::first_element(packed(op, p, holder));
}

void run_layer_norm(const char* op, Tensor& out, const Tensor& x, std::int64_t n, const Tensor& weight,
                    const Tensor& bias, double eps) {
  Tensor hw, hb;
  const std::byte* w = param_data(op, weight, hw);
  const std::byte* b = param_data(op, bias, hb);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::LayerNormFn* const kernel = dev.kernels().nn.layer_norm.get(op, x.dtype(), dev);
  run_packed(op, out, x, [&](const std::byte* in, std::byte* o) { kernel(dev, x.dtype(), rows, n, in, w, b, eps, o); });
}

double default_rms_eps(DType t) {
  switch (t) {
    case DType::f64:
      return DBL_EPSILON;
    case DType::f16:
      return 0.0009765625;  // 2^-10
    case DType::bf16:
      return 0.0078125;  // 2^-7
    default:
      return FLT_EPSILON;
  }
}

void run_rms_norm(const char* op, Tensor& out, const Tensor& x, std::int64_t n, const Tensor& weight,
                  std::optional<double> eps) {
  Tensor hw;
  const std::byte* w = param_data(op, weight, hw);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  const double e = eps ? *eps : default_rms_eps(x.dtype());
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  backend::RmsNormFn* const kernel = dev.kernels().nn.rms_norm.get(op, x.dtype(), dev);
  run_packed(op, out, x, [&](const std::byte* in, std::byte* o) { kernel(dev, x.dtype(), rows, n, in, w, e, o); });
}

void check_into(const char* op, Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_out(op, out, x);
  detail::check_same_runtime(op, out, x);
  detail::check_no_partial_overlap(op, out, x, "x");
  if (weight.defined()) detail::check_no_partial_overlap(op, out, weight, "weight");
  if (bias.defined()) detail::check_no_partial_overlap(op, out, bias, "bias");
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) { return softmax_op("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return softmax_op("log_softmax", x, dim, true); }
Tensor& softmax_into(Tensor& out, const Tensor& x, std::int64_t dim) try {
  return softmax_into_op("softmax_into", out, x, dim, false);
}
FORGE_CATCH_OOM("softmax_into")
Tensor& log_softmax_into(Tensor& out, const Tensor& x, std::int64_t dim) try {
  return softmax_into_op("log_softmax_into", out, x, dim, true);
}
FORGE_CATCH_OOM("log_softmax_into")

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) try {
  const char* op = "layer_norm";
  const std::int64_t n = check_norm_args(op, x, normalized_shape, weight, bias);
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  run_layer_norm(op, out, x, n, weight, bias, eps);
  detail::adopt_output(out);
  FORGE_RECORD(layer_norm, out, x, normalized_shape, weight, bias, eps);
  return out;
}
FORGE_CATCH_OOM("layer_norm")

Tensor& layer_norm_into(Tensor& out, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                        const Tensor& bias, double eps) try {
  const char* op = "layer_norm_into";
  detail::check_writable(op, out, "out");
  const std::int64_t n = check_norm_args(op, x, normalized_shape, weight, bias);
  check_into(op, out, x, weight, bias);
  run_layer_norm(op, out, x, n, weight, bias, eps);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("layer_norm_into")

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) try {
  const char* op = "rms_norm";
  const std::int64_t n = check_norm_args(op, x, normalized_shape, weight, Tensor());
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  run_rms_norm(op, out, x, n, weight, eps);
  detail::adopt_output(out);
  FORGE_RECORD(rms_norm, out, x, normalized_shape, weight, eps ? *eps : default_rms_eps(x.dtype()));
  return out;
}
FORGE_CATCH_OOM("rms_norm")

Tensor& rms_norm_into(Tensor& out, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                      std::optional<double> eps) try {
  const char* op = "rms_norm_into";
  detail::check_writable(op, out, "out");
  const std::int64_t n = check_norm_args(op, x, normalized_shape, weight, Tensor());
  check_into(op, out, x, weight, Tensor());
  run_rms_norm(op, out, x, n, weight, eps);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("rms_norm_into")

Tensor Tensor::softmax(std::int64_t dim) const { return forge::softmax(*this, dim); }
Tensor Tensor::log_softmax(std::int64_t dim) const { return forge::log_softmax(*this, dim); }

}  // namespace forge
