#pragma once
// StateDict: named tensors, ordered by name. What modules and optimizers save
// and load, and what a safetensors file holds.

#include <map>
#include <string>

#include "forge/tensor.h"

namespace forge {

using StateDict = std::map<std::string, Tensor>;

}  // namespace forge
