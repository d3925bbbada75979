// autograd::gradcheck: the analytic vector-Jacobian product w·J of fn at the
// inputs against central finite differences, both in f64. gradgradcheck runs
// gradcheck on a function made of fn's recorded backward pass.

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

// A fresh f64 tensor like `like`'s shape filled with fixed random values in [-1, 1].
Tensor random_weights(const Tensor& like, const Shape& shape, std::uint64_t seed) {
  Tensor w = detail::allocate(like.runtime(), shape, DType::f64, "gradcheck");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto* p = w.data_ptr<double>();
  for (std::int64_t i = 0; i < w.numel(); ++i) p[i] = uniform(rng);
  return w;
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
  const Tensor w = random_weights(out, out.shape(), options.seed);
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

// g(inputs, u) = sum_k <u'_k, d<fn(inputs), u>/d input_k>, the first-order
// gradients taken with create_graph, so that gradcheck's analytic side runs
// the backward of fn's backward. u is an input of g (it requires grad): the
// backward is linear in it, and its derivative checks that the gradient
// flowing into each VJP is recorded too.
GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                              const std::vector<Tensor>& inputs, const GradcheckOptions& options) try {
  std::vector<std::size_t> positions;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) positions.push_back(i);
  FORGE_CHECK(!positions.empty(), invalid_argument, "gradgradcheck", "no input requires grad");
  Tensor out;
  {
    GradModeGuard on(true);
    out = fn(inputs);
  }
  FORGE_CHECK(out.defined() && is_floating(out.dtype()), dtype, "gradgradcheck", "fn must return a floating tensor");
  Tensor u = random_weights(out, out.shape(), options.seed + 1);
  u.requires_grad_();
  std::vector<Tensor> u2;
  for (std::size_t k = 0; k < positions.size(); ++k)
    u2.push_back(random_weights(out, inputs[positions[k]].shape(), options.seed + 2 + k));
  out = Tensor();

  auto first_order = [&fn, &positions, &u2](const std::vector<Tensor>& all) {
    GradModeGuard on(true);
    const std::vector<Tensor> in(all.begin(), all.end() - 1);
    const Tensor o = fn(in);
    std::vector<Tensor> wrt;
    for (std::size_t i : positions) wrt.push_back(in[i]);
    const std::vector<Tensor> grads =
        grad({o}, wrt, {.grad_outputs = {all.back().to(o.dtype())}, .allow_unused = true, .create_graph = true});
    Tensor total;
    for (std::size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) continue;
      const Tensor term = sum(mul(grads[k].to(DType::f64), u2[k]));
      total = total.defined() ? add(total, term) : term;
    }
    FORGE_CHECK(total.defined(), backward, "gradgradcheck", "fn's output does not depend on its inputs");
    return total;
  };
  std::vector<Tensor> all = inputs;
  all.push_back(u);
  return gradcheck(first_order, all, options);
}
FORGE_CATCH_OOM("gradgradcheck")

}  // namespace forge::autograd
