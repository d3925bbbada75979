#pragma once
// Training checkpoints: everything a run needs to continue exactly where it
// stopped, in one safetensors file.
//
//   train::save_checkpoint(path, {.model = model.get(), .optimizer = &opt, .schedule = &sched,
//                                 .context = &ctx, .position = loader.position(), .step = step});
//   ...
//   const train::Checkpoint at = train::load_checkpoint(path, {.model = model.get(), .optimizer = &opt,
//                                                             .schedule = &sched, .context = &ctx});
//   loader.begin_epoch(at.position.epoch, at.position.batch);  // continue with the same batches
//
// The file holds the model's state_dict under "model.<name>", the
// optimizer's under "optimizer.<key>", the schedule's under "schedule.<key>",
// and, as metadata, the step, the data position, the state of the context's
// random generator (dropout masks, random initializers: the next draws
// repeat), the optimizer's and schedule's names and the user's own strings.
// Each part is optional: save writes the parts that are set; load fills the
// parts that are set and refuses (invalid_argument naming the part) a file
// without one of them; parts of the file nobody asked for are ignored (load
// only the model for inference). A load checks the file against every part
// before it changes any of them.

#include <cstdint>
#include <filesystem>
#include <string>

#include "forge/data/dataloader.h"
#include "forge/exec_context.h"
#include "forge/io/safetensors.h"
#include "forge/nn/module.h"
#include "forge/optim/lr_scheduler.h"
#include "forge/optim/optimizer.h"

namespace forge::train {

// Where a data loader is: batch `batch` (from 0) of epoch `epoch` is the
// next to train on (data::DataLoader::position(); resume with
// begin_epoch(position.epoch, position.batch)).
using DataPosition = data::Position;

struct Checkpoint {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* schedule = nullptr;
  ExecContext* context = nullptr;  // whose random generator's state is saved and restored
  DataPosition position = {};
  std::int64_t step = 0;       // the training step to run next (or any count the caller keeps)
  io::Metadata metadata = {};  // the caller's own strings
};

// Writes the parts of `what` that are set, with its position, step and
// metadata (atomically, as io::save_safetensors).
void save_checkpoint(const std::filesystem::path& path, const Checkpoint& what);

// Loads the file into the parts of `into` that are set (the model, the
// optimizer and schedule state, the generator's state) and returns `into`
// with the file's position, step and metadata.
Checkpoint load_checkpoint(const std::filesystem::path& path, const Checkpoint& into);

// The state of ctx's random generator as text, and back (invalid_argument
// for text that is not such a state; nothing changes then).
std::string rng_state(ExecContext& ctx);
void set_rng_state(ExecContext& ctx, const std::string& state);

}  // namespace forge::train
