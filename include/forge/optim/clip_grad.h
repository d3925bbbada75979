#pragma once
// clip_grad_norm_: rescales gradients whose total norm exceeds a bound.
// clip_grad_value_: clamps every gradient element into [-value, value].

#include <limits>
#include <vector>

#include "forge/tensor.h"

namespace forge::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// The norm of all the parameters' gradients taken together, as one vector
// (norm_type p > 0, or kInfNorm for the largest magnitude; summed in f64);
// parameters without a .grad are skipped. As libtorch 1.13, every gradient is
// then multiplied in place by min(max_norm / (norm + 1e-6), 1): an infinite
// norm zeroes the finite entries and turns infinite ones into NaN, a NaN norm
// makes every entry NaN. With error_if_nonfinite, a non-finite norm is
// invalid_argument instead and no gradient changes. Returns the norm before
// clipping (0 when no parameter has a .grad).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// As libtorch: every parameter's .grad is clamped in place to [-clip_value,
// clip_value] (NaN entries stay NaN); parameters without a .grad are skipped.
// A negative or NaN clip_value is invalid_argument and changes nothing.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace forge::optim
