#pragma once
// Samplers: the dataset indices each epoch visits, in order.
//
//   auto shard = std::make_shared<data::DistributedSampler>(dataset->size(),
//       data::DistributedSamplerOptions{.world_size = 4, .rank = rank, .seed = 1});
//   data::DataLoader loader(ctx, dataset, {.batch_size = 32, .sampler = shard});
//
// A sampler is a pure function of the epoch: the same epoch gives the same
// indices on every run and platform, so a resumed run (DataLoader::begin_epoch
// with a start batch) continues with exactly the batches it would have had.
// indices() is called on the thread that drives the loader.

#include <cstdint>
#include <vector>

namespace forge::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Indices per epoch.
  virtual std::int64_t size() const = 0;
  // Epoch `epoch`'s indices (size() of them); throws invalid_argument for a
  // negative epoch.
  virtual std::vector<std::int64_t> indices(std::int64_t epoch) const = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(std::int64_t n);
  std::int64_t size() const override { return n_; }
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;

 private:
  std::int64_t n_;
};

// A permutation of 0..n-1 per epoch: a Fisher-Yates shuffle driven by
// std::mt19937_64 seeded with seed + epoch (both fixed by the standard), with
// draws free of modulo bias.
class RandomSampler final : public Sampler {
 public:
  explicit RandomSampler(std::int64_t n, std::uint64_t seed = 0);
  std::int64_t size() const override { return n_; }
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;

 private:
  std::int64_t n_;
  std::uint64_t seed_;
};

struct DistributedSamplerOptions {
  std::int64_t world_size = 1;  // replicas sharing the dataset
  std::int64_t rank = 0;        // this replica, in [0, world_size)
  bool shuffle = true;          // permute per epoch (seed + epoch, the same on every rank) before sharding
  std::uint64_t seed = 0;
  bool drop_last = false;  // drop the tail that does not divide evenly, instead of padding
};

// One replica's shard, as torch.utils.data.DistributedSampler: the epoch's
// order (shuffled or not) is padded by repeating its head, or cut when
// drop_last, to a multiple of world_size; rank r takes positions r,
// r + world_size, ... So every rank has the same number of indices, the
// shards are disjoint and (without drop_last) cover the dataset, a few
// examples counted twice when world_size does not divide it.
class DistributedSampler final : public Sampler {
 public:
  // Throws invalid_argument for world_size < 1 or a rank outside [0, world_size).
  DistributedSampler(std::int64_t n, DistributedSamplerOptions options);
  std::int64_t size() const override { return per_rank_; }
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  const DistributedSamplerOptions& options() const noexcept { return options_; }

 private:
  std::int64_t n_;
  DistributedSamplerOptions options_;
  std::int64_t per_rank_ = 0;
};

}  // namespace forge::data
