#pragma once
// What the optimizers' steps share beyond the Optimizer base class.

#include <vector>

#include "forge/tensor.h"

namespace forge::optim {

// Every parameter's .grad, contiguous and of the parameter's dtype (undefined
// where there is none). A step takes them all before it updates anything, so
// a step that runs out of memory changes nothing.
std::vector<Tensor> packed_grads(const std::vector<Tensor>& params);

}  // namespace forge::optim
