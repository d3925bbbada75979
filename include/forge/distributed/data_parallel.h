#pragma once
// Data-parallel training (libtorch's DistributedDataParallel): every rank
// holds the whole model, runs its share of the global batch, and backward
// leaves every rank's .grad the mean over the ranks.
//
//   dist::ProcessGroup group(ctx);
//   auto model = std::make_shared<Net>(ctx);
//   dist::DataParallel ddp(model, group);  // rank 0's parameters everywhere
//   optim::Adam opt(model->parameters(), {.lr = 1e-3});
//   for (const data::Batch& b : loader.epoch(e)) {   // a DistributedSampler
//     Tensor loss = cross_entropy(ddp(b.input), b.target);
//     loss.backward();  // gradients averaged over the ranks when it returns
//     opt.step();
//     opt.zero_grad();
//   }
//
// Policy:
//   - Construction broadcasts rank 0's parameters and buffers (collective:
//     every rank constructs it, with the same model). With broadcast_buffers,
//     each forward broadcasts rank 0's buffers again (running statistics).
//   - Parameters that require grad are packed into buckets of up to
//     bucket_cap_mb (one dtype each), in the reverse of registration order
//     at first, then, after the first reduced pass, in the order its
//     gradients became ready (rank 0's, on every rank). A bucket's reduction starts on
//     the group's thread as soon as the post-accumulate hooks of all its
//     parameters have run, and in bucket order on every rank, so that it
//     overlaps with the rest of backward (Note [Buckets] in data_parallel.cpp).
//   - When the pass ends (autograd::queue_callback) every reduction is waited
//     for and each .grad becomes the mean over the ranks.
//   - A parameter that got no gradient in a pass is an error naming it,
//     unless find_unused_parameters: then it counts as zero on that rank, and a
//     parameter no rank used keeps no .grad.
//   - Only a backward after a forward through DataParallel reduces (a pass
//     through the bare module stays local). no_sync(): a forward inside it
//     makes a pass that accumulates locally; the next synced pass reduces the
//     accumulated .grad (gradient accumulation).
//   - Frozen parameters (requires_grad false at construction) are left out;
//     optimizers and their parameter groups see the module's own parameters.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "forge/distributed/process_group.h"
#include "forge/nn/module.h"

namespace forge::dist {

struct DataParallelOptions {
  double bucket_cap_mb = 25;            // bytes of gradient per reduction
  bool find_unused_parameters = false;  // allow parameters without a gradient in a pass
  bool broadcast_buffers = true;        // rank 0's buffers before each forward
};

struct DataParallelStats {
  std::int64_t buckets = 0;         // buckets of the layout
  std::int64_t reductions = 0;      // passes reduced so far
  std::int64_t early_launches = 0;  // buckets started before their pass ended, over all passes
  std::int64_t late_launches = 0;   // buckets started only when their pass ended
  std::int64_t bytes_reduced = 0;   // gradient bytes all-reduced, over all passes
  double wait_ms = 0;               // time the passes' ends waited for reductions
};

class DataParallel {
 public:
  DataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  nn::Module& module() const noexcept { return *module_; }
  ProcessGroup& group() const noexcept { return group_; }
  const DataParallelOptions& options() const noexcept { return options_; }
  const DataParallelStats& stats() const noexcept { return stats_; }
  // The parameter names of each bucket, in reduction order.
  std::vector<std::vector<std::string>> bucket_names() const;

  // While a NoSync lives, forwards make passes that do not reduce (libtorch's no_sync()).
  class NoSync {
   public:
    explicit NoSync(DataParallel& ddp) noexcept : ddp_(&ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSync() { ddp_->sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DataParallel* ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() noexcept { return NoSync(*this); }

  struct Reducer;  // data_parallel.cpp

 private:
  std::shared_ptr<nn::Module> module_;
  ProcessGroup& group_;
  DataParallelOptions options_;
  DataParallelStats stats_;
  bool sync_ = true;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace forge::dist
