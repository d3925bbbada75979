#pragma once
// Helpers that build parameter groups (optimizer.h) from a module.

#include <vector>

#include "forge/nn/module.h"
#include "forge/optim/optimizer.h"

namespace forge::optim {

// The usual "no weight decay on norms and biases" split of a module's
// parameters (each once, in named_parameters() order): group 0 gets
// weight_decay, group 1 gets 0 and holds every parameter with at most one
// dimension, whose name ends in "bias", or one of whose dotted name parts
// contains "norm" (any case). Either group may be empty. For example
//   optim::AdamW opt(optim::decay_groups(*model, 0.1), {.lr = 3e-4});
std::vector<ParamGroup> decay_groups(const nn::Module& module, double weight_decay);

}  // namespace forge::optim
