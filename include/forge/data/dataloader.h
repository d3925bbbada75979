#pragma once
// DataLoader: batches of an in-memory dataset (inputs [N, ...], targets [N, ...]),
// shuffled per epoch from a seed, with the next batch gathered on a
// background thread while the current one trains.
//
//   data::DataLoader loader(ctx, images, labels, {.batch_size = 64, .seed = 1});
//   for (std::int64_t e = 0; e < epochs; ++e)
//     for (const data::Batch& b : loader.epoch(e)) train_step(b.input, b.target);
//
// or, by hand: loader.begin_epoch(e); while (auto b = loader.next()) { ... }
//
// Epoch e visits every sample exactly once, in the order of a Fisher-Yates
// shuffle seeded with seed + e (the same on every platform and run), or in
// dataset order when shuffle is off. Batches are fresh tensors from the
// context's pool (a steady loop allocates nothing from the system); the
// transform, if any, runs on the calling thread. The dataset tensors are
// read by the background thread: do not write to them while a loader lives.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "forge/tensor.h"

namespace forge {
class ExecContext;
}

namespace forge::data {

struct Batch {
  Tensor input;            // [B, ...] rows of the inputs, after the transform
  Tensor target;           // [B, ...] rows of the targets (undefined when the loader has none)
  std::int64_t index = 0;  // the batch's number in its epoch, from 0
};

struct DataLoaderOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;                          // drop a last batch smaller than batch_size
  std::uint64_t seed = 0;                          // epoch e shuffles with seed + e
  bool prefetch = true;                            // gather the next batch on a background thread
  std::function<Tensor(const Tensor&)> transform;  // applied to each input batch (e.g. u8 -> f32 / 255)
};

class DataLoader {
 public:
  class Iterator;
  class EpochRange;

  // inputs: [N, ...]; targets: [N, ...] or undefined. Both on ctx; copied to
  // contiguous form once if they are not.
  DataLoader(ExecContext& ctx, Tensor inputs, Tensor targets, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch.
  std::int64_t size() const noexcept { return batches_; }
  std::int64_t dataset_size() const noexcept { return samples_; }
  const DataLoaderOptions& options() const noexcept { return options_; }

  // The sample order of epoch e (what its batches visit, in order).
  std::vector<std::int64_t> order(std::int64_t epoch) const;

  // Starts epoch e (abandoning the current one, if any).
  void begin_epoch(std::int64_t epoch);
  // The next batch of the current epoch, or nullopt at its end.
  std::optional<Batch> next();
  // A range over epoch e's batches: begin() starts the epoch.
  EpochRange epoch(std::int64_t epoch);

 private:
  // Rows gathered into memory the background thread owns (never a tensor:
  // only the thread that drives the context may touch its pool).
  struct Staging {
    std::vector<std::byte> input;
    std::vector<std::byte> target;
    std::int64_t rows = 0;
  };

  std::int64_t batch_rows(std::int64_t batch) const noexcept;
  void gather(std::int64_t batch, Staging& into) const noexcept;
  Batch wrap(const Staging& staged, std::int64_t batch);
  void request(std::int64_t batch);  // under no lock: hands `batch` to the worker
  void wait_idle(std::unique_lock<std::mutex>& lock);
  void worker_loop();

  ExecContext& ctx_;
  Tensor inputs_;   // contiguous
  Tensor targets_;  // contiguous or undefined
  DataLoaderOptions options_;
  std::int64_t samples_ = 0;
  std::int64_t batches_ = 0;
  const std::byte* input_base_ = nullptr;  // read by the worker
  const std::byte* target_base_ = nullptr;
  std::size_t input_row_bytes_ = 0;
  std::size_t target_row_bytes_ = 0;

  std::vector<std::int64_t> order_;  // the current epoch's sample order
  std::int64_t cursor_ = 0;          // the next batch next() returns
  bool started_ = false;
  Staging current_;  // the batch being wrapped (caller's thread)

  // Handover with the worker (Note [DataLoader prefetch] in src/data/dataloader.cpp).
  std::mutex mutex_;
  std::condition_variable cv_;
  Staging ahead_;                // filled by the worker
  std::int64_t requested_ = -1;  // batch the worker should gather, -1: none
  std::int64_t ready_ = -1;      // batch ahead_ holds, -1: none
  bool busy_ = false;
  bool stop_ = false;
  std::thread worker_;
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
  EpochRange(DataLoader& loader, std::int64_t epoch) : loader_(&loader), epoch_(epoch) {}
  Iterator begin() {
    loader_->begin_epoch(epoch_);
    return Iterator(loader_);
  }
  Iterator end() { return Iterator(); }

 private:
  DataLoader* loader_;
  std::int64_t epoch_;
};

inline DataLoader::EpochRange DataLoader::epoch(std::int64_t epoch) { return EpochRange(*this, epoch); }

}  // namespace forge::data
