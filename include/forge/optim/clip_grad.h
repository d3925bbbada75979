#pragma once
// clip_grad_norm_: rescales gradients whose total norm exceeds a bound.

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

}  // namespace forge::optim
