// Anomaly mode (docs/AUTOGRAD.md "Anomaly mode"): while it is on, the engine
// hands every gradient a VJP produced to check_anomaly, which throws
// ErrorCode::backward naming the node's op and sequence number when one holds
// NaN or Inf. Off, the engine pays one thread-local branch per node.

#include <cmath>

#include "autograd/hooks.h"
#include "autograd/node.h"
#include "forge/autograd.h"
#include "forge/ops.h"

namespace forge::detail {

namespace {

// "NaN", "Inf" or nullptr for a gradient whose elements are all finite.
const char* non_finite(const Tensor& g) {
  // x * 0 is 0 for a finite x and NaN for NaN or +-Inf: one reduction decides.
  if (std::isfinite(sum(mul(g, 0.0)).item<double>())) return nullptr;
  return sum(ne(g, g).to(DType::f64)).item<double>() > 0 ? "NaN" : "Inf";
}

}  // namespace

void check_anomaly(const autograd::Node& node, std::span<const Tensor> grads) {
  autograd::NoGradGuard no_grad;  // the check itself records nothing
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || !is_floating(g.dtype())) continue;
    if (const char* what = non_finite(g))
      FORGE_FAIL(backward, "backward", "the backward of ", node.name(), " (recorded as node #", node.sequence_nr(),
                 ") produced ", what, " in the gradient of input ", i, " of shape ", g.shape());
  }
}

}  // namespace forge::detail
