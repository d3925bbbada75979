#pragma once
// clip_grad_norm_: rescales gradients whose total norm exceeds a bound.

#include <limits>
#include <vector>

#include "forge/tensor.h"

namespace forge::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// The norm of all the parameters' gradients taken together, as one vector
// (norm_type p > 0, or kInfNorm for the largest magnitude); parameters without
// a .grad are skipped. When it exceeds max_norm, every gradient is multiplied
// in place by max_norm / (norm + 1e-6) (as libtorch). A non-finite norm is
// returned and the gradients are left as they are. Returns the norm before clipping.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace forge::optim
