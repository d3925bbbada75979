// autograd::gradcheck: the analytic vector-Jacobian product w·J of fn at the
// inputs against central finite differences, both in f64.

#include <cmath>
#include <random>
#include <sstream>

#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/ops.h"

namespace forge::autograd {

namespace {

// <fn(inputs), w> as a double.
double weighted(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                const Tensor& w) {
  const Tensor out = fn(inputs);
  FORGE_CHECK(out.defined() && out.shape() == w.shape(), shape, "gradcheck",
              "fn returned a different shape on a perturbed input");
  return sum(mul(out.to(DType::f64), w)).item<double>();
}

// Calls visit(element pointer, flat index) for every element of t, in row-major order.
template <typename Visit>
void each_element(const Tensor& t, Visit&& visit) {
  auto* base = static_cast<double*>(t.raw_data("gradcheck"));
  const Shape& shape = t.shape();
  const std::int64_t n = t.numel();
  Dims index = Dims::filled(shape.rank(), 0);
  for (std::int64_t flat = 0; flat < n; ++flat) {
    std::int64_t offset = 0;
    for (int d = 0; d < shape.rank(); ++d) offset += index[d] * t.strides()[d];
    visit(base + offset, flat);
    for (int d = shape.rank() - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) try {
  std::vector<Tensor> wrt;
  std::vector<std::size_t> positions;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined() || !in.requires_grad()) continue;
    FORGE_CHECK(in.dtype() == DType::f64, dtype, "gradcheck", "input ", i, " requires grad but holds ",
                dtype_name(in.dtype()), "; finite differences need f64");
    detail::check_writable("gradcheck", in, "input");  // no expanded or self-overlapping elements
    wrt.push_back(in);
    positions.push_back(i);
  }
  FORGE_CHECK(!wrt.empty(), invalid_argument, "gradcheck", "no input requires grad");

  Tensor out;
  {
    GradModeGuard on(true);
    out = fn(inputs);
  }
  FORGE_CHECK(out.defined() && is_floating(out.dtype()), dtype, "gradcheck", "fn must return a floating tensor");
  FORGE_CHECK(out.requires_grad(), backward, "gradcheck",
              "fn's output does not depend on any input that requires grad");

  // The output weighting: fixed random values in [-1, 1].
  Tensor w = detail::allocate(out.runtime(), out.shape(), DType::f64, "gradcheck");
  {
    std::mt19937_64 rng(options.seed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    auto* p = w.data_ptr<double>();
    for (std::int64_t i = 0; i < w.numel(); ++i) p[i] = uniform(rng);
  }
  const std::vector<Tensor> analytic =
      grad({out}, wrt, GradOptions{{w.to(out.dtype())}, /*retain_graph=*/false, /*allow_unused=*/true});
  out = Tensor();

  GradcheckResult result;
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < wrt.size(); ++k) {
    const std::vector<double> exact = analytic[k].defined()
                                          ? analytic[k].to_vector<double>()
                                          : std::vector<double>(static_cast<std::size_t>(wrt[k].numel()), 0.0);
    each_element(wrt[k], [&](double* p, std::int64_t flat) {
      const double original = *p;
      *p = original + options.eps;
      const double plus = weighted(fn, inputs, w);
      *p = original - options.eps;
      const double minus = weighted(fn, inputs, w);
      *p = original;
      const double numeric = (plus - minus) / (2.0 * options.eps);
      const double a = exact[static_cast<std::size_t>(flat)];
      const double err = std::abs(a - numeric);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (result.ok && !(err <= options.atol + options.rtol * std::abs(numeric))) {
        result.ok = false;
        std::ostringstream msg;
        msg << "input " << positions[k] << " element " << flat << ": analytic " << a << " vs numeric " << numeric;
        result.message = msg.str();
      }
    });
  }
  return result;
}
FORGE_CATCH_OOM("gradcheck")

}  // namespace forge::autograd
