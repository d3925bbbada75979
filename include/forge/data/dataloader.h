#pragma once
// DataLoader: batches of a Dataset, in the order a Sampler gives per epoch,
// gathered ahead by worker threads while the current batch trains.
//
//   auto text = std::make_shared<data::TextWindowDataset>("corpus.txt", data::TextWindowOptions{.context = 128});
//   data::DataLoader loader(ctx, text, {.batch_size = 32, .seed = 1, .num_workers = 2});
//   for (std::int64_t e = 0; e < epochs; ++e)
//     for (const data::Batch& b : loader.epoch(e)) train_step(b.input, b.target);
//
// or over in-memory tensors (a TensorDataset):
//
//   data::DataLoader loader(ctx, images, labels, {.batch_size = 64, .seed = 1});
//
// or, by hand: loader.begin_epoch(e); while (auto b = loader.next()) { ... }
//
// Order. Epoch e visits the sampler's indices(e) in batches of batch_size
// (the last one smaller unless drop_last). Without a sampler: a Fisher-Yates
// shuffle seeded with seed + e (the same on every platform and run), or
// dataset order when shuffle is off.
//
// Threads. num_workers threads call Dataset::fill and gather up to
// 2 * num_workers batches ahead, in order; with 0 (or prefetch off) the
// calling thread gathers each batch in next(). Batches are fresh tensors from
// the context's pool, made on the calling thread, where the collate and the
// transform run too (Note [DataLoader prefetch] in src/data/dataloader.cpp).
// The batches do not depend on num_workers.
//
// Failures. When next() throws (the dataset's fill, the collate, the
// transform, out of memory), the batch is not consumed: position() still
// names it and the next call tries it again (gathering it anew when the
// dataset threw), so nothing is skipped silently. To move past a batch that
// always fails, begin_epoch(epoch, position().batch + 1).
//
// Resuming. position() is {epoch, the batch next() returns next};
// begin_epoch(epoch, batch) continues from there with exactly the batches an
// uninterrupted run gets.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "forge/data/dataset.h"
#include "forge/data/sampler.h"
#include "forge/tensor.h"

namespace forge {
class ExecContext;
}

namespace forge::data {

struct Batch {
  Tensor input;            // [B, ...] rows of the inputs, after the transform
  Tensor target;           // [B, ...] rows of the targets (undefined when the dataset has none)
  std::int64_t index = 0;  // the batch's number in its epoch, from 0
};

// Turns a batch's examples into tensors of `ctx` (input and target; the
// loader sets index). Runs on the calling thread: it may make tensors.
using Collate = std::function<Batch(ExecContext& ctx, std::span<const Example> examples)>;

// The default collate: stacks the examples' inputs into [B, ...] and their
// targets likewise. Every example must have the input shape and dtype of the
// first, and a target like the first's or none when it has none (else shape,
// or dtype, naming both examples). The tensors are on ctx's device.
Batch default_collate(ExecContext& ctx, std::span<const Example> examples);

struct Position {
  std::int64_t epoch = 0;
  std::int64_t batch = 0;  // the batch next() returns next
  friend bool operator==(const Position&, const Position&) = default;
};

struct DataLoaderOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;                                  // without a sampler: permute per epoch
  bool drop_last = false;                               // drop a last batch smaller than batch_size
  std::uint64_t seed = 0;                               // without a sampler: epoch e shuffles with seed + e
  bool prefetch = true;                                 // false: no worker threads (num_workers taken as 0)
  std::function<Tensor(const Tensor&)> transform = {};  // applied to each input batch (e.g. u8 -> f32 / 255)
  int num_workers = 1;                                  // threads gathering ahead; 0: the calling thread, in next()
  std::shared_ptr<const Sampler> sampler = {};          // the order; when set, shuffle and seed are unused
  Collate collate = {};                                 // examples -> batch; empty: default_collate
};

class DataLoader {
 public:
  class Iterator;
  class EpochRange;

  // A loader over any dataset (kept alive by the loader).
  DataLoader(ExecContext& ctx, std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  // A loader over TensorDataset(inputs, targets). inputs: [N, ...]; targets:
  // [N, ...] or undefined. Both on ctx; copied to packed host form once if
  // they are not.
  DataLoader(ExecContext& ctx, Tensor inputs, Tensor targets, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch.
  std::int64_t size() const noexcept { return batches_; }
  std::int64_t dataset_size() const noexcept { return dataset_->size(); }
  const Dataset& dataset() const noexcept { return *dataset_; }
  const Sampler& sampler() const noexcept { return *sampler_; }
  const DataLoaderOptions& options() const noexcept { return options_; }
  int num_workers() const noexcept { return static_cast<int>(workers_.size()); }

  // The sample order of epoch e (what its batches visit, in order).
  std::vector<std::int64_t> order(std::int64_t epoch) const;

  // Starts epoch e at batch start_batch (0 <= start_batch <= size()),
  // abandoning the current epoch, if any.
  void begin_epoch(std::int64_t epoch, std::int64_t start_batch = 0);
  // The next batch of the current epoch, or nullopt at its end.
  std::optional<Batch> next();
  // {epoch begun, batch next() returns next}; {0, 0} before any begin_epoch.
  Position position() const noexcept { return position_; }
  // A range over epoch e's batches from start_batch: begin() starts the epoch.
  EpochRange epoch(std::int64_t epoch, std::int64_t start_batch = 0);

 private:
  struct Slot;

  void start_workers(int count);
  void stop_workers() noexcept;
  void worker_loop();
  Slot* next_pending() noexcept;
  Slot& slot_of(std::int64_t batch) noexcept;
  void assign(Slot& slot, std::int64_t batch) noexcept;  // under mutex_
  void gather(Slot& slot) const;
  std::int64_t batch_rows(std::int64_t batch) const noexcept;
  Batch wrap(const Slot& slot);
  void check_examples(const Slot& slot) const;

  ExecContext& ctx_;
  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const Sampler> sampler_;
  DataLoaderOptions options_;
  std::int64_t batches_ = 0;

  std::vector<std::int64_t> order_;  // the current epoch's sample order (read by the workers)
  Position position_;
  bool started_ = false;

  // Handover with the workers (Note [DataLoader prefetch]); batch k lives in
  // slots_[k % slots_.size()].
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable work_cv_;   // workers wait here for a pending slot
  std::condition_variable ready_cv_;  // the caller and begin_epoch wait here
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = const Batch*;
  using reference = const Batch&;

  Iterator() = default;  // the end
  explicit Iterator(DataLoader* loader) : loader_(loader), batch_(loader->next()) {}
  const Batch& operator*() const { return *batch_; }
  const Batch* operator->() const { return &*batch_; }
  Iterator& operator++() {
    batch_.reset();  // release the finished batch before gathering the next into the pool
    batch_ = loader_->next();
    return *this;
  }
  friend bool operator==(const Iterator& a, const Iterator& b) noexcept {
    return a.batch_.has_value() == b.batch_.has_value();
  }

 private:
  DataLoader* loader_ = nullptr;
  std::optional<Batch> batch_;
};

class DataLoader::EpochRange {
 public:
  EpochRange(DataLoader& loader, std::int64_t epoch, std::int64_t start_batch)
      : loader_(&loader), epoch_(epoch), start_batch_(start_batch) {}
  Iterator begin() {
    loader_->begin_epoch(epoch_, start_batch_);
    return Iterator(loader_);
  }
  Iterator end() { return Iterator(); }

 private:
  DataLoader* loader_;
  std::int64_t epoch_;
  std::int64_t start_batch_;
};

inline DataLoader::EpochRange DataLoader::epoch(std::int64_t epoch, std::int64_t start_batch) {
  return EpochRange(*this, epoch, start_batch);
}

}  // namespace forge::data
