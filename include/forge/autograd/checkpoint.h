#pragma once
// Activation checkpointing (torch.utils.checkpoint, chosen in C++): trade a
// second forward for the memory of a stretch of the tape. An exec scope with
// ScopePolicy::recompute calls it from ExecScope::run (docs/MEMORY.md,
// "Scope policies"; docs/AUTOGRAD.md, "Checkpointing").

#include <functional>
#include <vector>

#include "forge/tensor.h"

namespace forge::autograd {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs fn(inputs) recording as usual, then keeps on the tape only one node
// whose inputs are `inputs` and the leaves fn read (parameters): fn's own
// nodes and the activations they saved are freed. Backward reruns fn with
// grad mode on, over detached copies of `inputs` and with the context's
// random generator as it was at the start (dropout draws the same mask), and
// passes the gradients it computes to `inputs` and to those leaves.
// - fn must read every tensor with history (a non-leaf) through `inputs`:
//   one it reaches otherwise is invalid_argument, naming the op that made it.
//   It must not write its inputs in place (invalid_argument), must compute
//   the same output shape when rerun (backward), and it, and what it
//   captures, must live until backward has run.
// - One output, as every node has. With grad mode off, or when the output
//   needs no gradient, this is fn(inputs) and records nothing.
// - The saved inputs are version-checked like any saved tensor, and so are
//   the leaves fn read.
// - Called inside a hold scope, the forward's outputs are held by that scope
//   as every output is, until it closes: checkpoint in a release or
//   recompute scope (ExecScope::run). The recompute is never held.
// - A backward that records itself (create_graph) through a checkpoint is
//   not_implemented.
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

}  // namespace forge::autograd
