#pragma once
// Checkpoints in a data-parallel job (docs/DISTRIBUTED.md "Checkpoints and
// logs"): rank 0 writes, every rank reads the same file.
//
//   dist::save_checkpoint(group, "run.safetensors", {.model = model.get(), .optimizer = &opt, .step = step});
//   ...
//   const train::Checkpoint at = dist::load_checkpoint(group, "run.safetensors",
//                                                      {.model = model.get(), .optimizer = &opt});
//
// Both are collective. A failure on any rank (rank 0 cannot write, a rank
// cannot read) throws on every rank: the failing rank its own error, the
// others ErrorCode::distributed naming the rank and its message, so no rank
// waits for a peer that gave up. Parameters and optimizer state are the same
// on every rank after DataParallel's reductions, so rank 0's are everyone's;
// the context's generator is rank 0's too when `.context` is set (leave it
// unset for each rank to keep its own dropout stream).

#include <filesystem>

#include "forge/distributed/process_group.h"
#include "forge/train/checkpoint.h"

namespace forge::dist {

// Rank 0 writes `what` (train::save_checkpoint); returns on every rank once
// the file is complete.
void save_checkpoint(ProcessGroup& group, const std::filesystem::path& path, const train::Checkpoint& what);

// Every rank loads `path` into its own `into` (train::load_checkpoint).
train::Checkpoint load_checkpoint(ProcessGroup& group, const std::filesystem::path& path,
                                  const train::Checkpoint& into);

}  // namespace forge::dist
