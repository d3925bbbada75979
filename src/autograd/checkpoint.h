#pragma once
// checkpoint() for an exec scope, which counts what its checkpoints keep and
// recompute (Note [Checkpoint stats] in src/runtime/exec_scope.cpp).

#include <cstdint>

#include "forge/autograd/checkpoint.h"

namespace forge::autograd {

// scope_id: the recompute scope of the calling thread's context that run()
// this (0: none).
Tensor checkpoint_in_scope(const CheckpointFn& fn, const std::vector<Tensor>& inputs, std::uint64_t scope_id);

}  // namespace forge::autograd
