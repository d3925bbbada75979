// DataLoader (include/forge/data/dataloader.h).
//
// Note [DataLoader prefetch]
// One thread drives an ExecContext (DESIGN §5): its pool, exec scopes and
// tape are not for a second thread. So a worker never makes a tensor. It
// gathers a batch's examples (Dataset::fill) into a slot: host arrays the
// loader owns and reuses (Note [Dataset examples are host arrays] in
// src/data/dataset.cpp). next() takes the slot of the batch it returns once
// it is ready and, on the caller's thread, runs the collate (for the default
// one: a memcpy of each row into a fresh pooled tensor) and the transform.
// A second ExecContext owned by the loader would give the workers a pool of
// their own, but then batches would cross contexts (an error for every op)
// or be copied anyway.
//
// Slots and order. With W workers there are 2W slots and batch k lives in
// slot k mod 2W: batches position .. position + 2W - 1 are pending, being
// gathered or ready. A worker takes the pending slot with the lowest batch,
// so the batch the caller waits for is never behind later ones; a batch is
// gathered by one worker from its own slot, so its examples and their order
// do not depend on W (0 workers: one slot, filled by next() itself).
//
// Handover, all under mutex_: a slot goes free -> pending (begin_epoch, or
// next() once it has made tensors of the slot's batch and moves it on to
// batch k + 2W) -> busy (a worker took it; only that worker touches the slot
// now) -> ready (examples, or the exception fill threw). Only the caller
// touches a ready slot, order_ and position_; begin_epoch changes order_
// after cancelling pending slots and waiting for busy ones.
//
// Failures leave the batch where it was: a slot whose gather threw goes back
// to pending (a transient failure may pass on the second try) and next()
// rethrows; a collate or transform that throws leaves the slot ready. Either
// way position_ still names the batch and the next call returns it.

#include "forge/data/dataloader.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "core/tensor_internal.h"
#include "forge/exec_context.h"

namespace forge::data {
namespace {

constexpr const char* kOp = "DataLoader";
constexpr const char* kCollate = "default_collate";

// Where examples[k] first differs from examples[0]: the part ("input" or
// "target") and the error a stack of them is.
struct Mismatch {
  std::size_t at = 0;
  const char* part = "";
  ErrorCode code = ErrorCode::shape;
};

std::optional<Mismatch> first_mismatch(std::span<const Example> examples) {
  const Example& first = examples.front();
  for (std::size_t k = 1; k < examples.size(); ++k) {
    for (auto [part, name] : {std::pair{&Example::input, "input"}, std::pair{&Example::target, "target"}}) {
      const HostArray &a = first.*part, &b = examples[k].*part;
      if (a.defined() != b.defined() || (a.defined() && a.shape() != b.shape())) return Mismatch{k, name};
      if (a.defined() && a.dtype() != b.dtype()) return Mismatch{k, name, ErrorCode::dtype};
    }
  }
  return std::nullopt;
}

std::string describe(const HostArray& a) {
  return a.defined() ? forge::detail::cat(a.shape(), " of ", dtype_name(a.dtype())) : std::string("none");
}

const HostArray& part_of(const Example& e, const char* part) {
  return std::string_view(part) == "input" ? e.input : e.target;
}

// [B, ...]: every example's `part`, one row each, on ctx's device.
Tensor stack(ExecContext& ctx, std::span<const Example> examples, HostArray Example::*part) {
  const HostArray& first = examples.front().*part;
  Shape shape = first.shape();
  shape.insert(0, static_cast<std::int64_t>(examples.size()));
  const bool host = ctx.device().is_cpu();  // else staged on the host, then moved to the device
  Tensor t = host ? ctx.empty(shape, first.dtype())
                  : forge::detail::allocate_in(ctx.runtime(), ctx.runtime().pool(), shape, first.dtype(), kCollate);
  if (t.numel() > 0) {
    auto* to = static_cast<std::byte*>(t.raw_data(kCollate));
    const std::size_t row = first.nbytes();
    for (std::size_t r = 0; r < examples.size(); ++r) std::memcpy(to + r * row, (examples[r].*part).data(), row);
  }
  return host ? t : t.to(ctx.device());
}

std::shared_ptr<const Dataset> tensor_dataset(ExecContext& ctx, Tensor inputs, Tensor targets) try {
  detail::check_dataset_tensors(kOp, inputs, targets);
  FORGE_CHECK(&inputs.runtime() == &ctx.runtime(), device, kOp, "inputs belong to another context");
  return std::make_shared<TensorDataset>(std::move(inputs), std::move(targets));
}
FORGE_CATCH_OOM(kOp)

}  // namespace

Batch default_collate(ExecContext& ctx, std::span<const Example> examples) try {
  FORGE_CHECK(!examples.empty(), invalid_argument, kCollate, "no examples to stack");
  if (const auto m = first_mismatch(examples))
    forge::detail::fail(m->code, kCollate, "example ", m->at, " has ", m->part, " ",
                        describe(part_of(examples[m->at], m->part)), ", example 0 has ",
                        describe(part_of(examples.front(), m->part)));
  Batch out;
  out.input = stack(ctx, examples, &Example::input);
  if (examples.front().target.defined()) out.target = stack(ctx, examples, &Example::target);
  return out;
}
FORGE_CATCH_OOM(kCollate)

struct DataLoader::Slot {
  enum class State { free, pending, busy, ready };
  State state = State::free;
  std::int64_t batch = -1;
  std::int64_t rows = 0;
  std::vector<Example> examples;  // rows of them hold the batch
  std::exception_ptr error;       // what the gather threw, when ready
};

DataLoader::DataLoader(ExecContext& ctx, std::shared_ptr<const Dataset> dataset, DataLoaderOptions options) try
    : ctx_(ctx), dataset_(std::move(dataset)), options_(std::move(options)) {
  FORGE_CHECK(dataset_ != nullptr, invalid_argument, kOp, "the dataset is null");
  FORGE_CHECK(options_.batch_size > 0, invalid_argument, kOp, "batch_size must be positive, got ", options_.batch_size);
  FORGE_CHECK(options_.num_workers >= 0, invalid_argument, kOp, "num_workers must be non-negative, got ",
              options_.num_workers);
  const std::int64_t n = dataset_->size();
  FORGE_CHECK(n >= 0, invalid_argument, kOp, "the dataset's size() is negative: ", n);
  if (options_.sampler)
    sampler_ = options_.sampler;
  else if (options_.shuffle)
    sampler_ = std::make_shared<RandomSampler>(n, options_.seed);
  else
    sampler_ = std::make_shared<SequentialSampler>(n);
  const std::int64_t samples = sampler_->size();
  batches_ = samples / options_.batch_size + (!options_.drop_last && samples % options_.batch_size != 0);

  const int workers = options_.prefetch ? options_.num_workers : 0;
  slots_.resize(workers == 0 ? 1 : 2 * static_cast<std::size_t>(workers));
  for (Slot& slot : slots_) slot.examples.resize(static_cast<std::size_t>(std::min(options_.batch_size, samples)));
  start_workers(workers);
}
FORGE_CATCH_OOM(kOp)

DataLoader::DataLoader(ExecContext& ctx, Tensor inputs, Tensor targets, DataLoaderOptions options)
    : DataLoader(ctx, tensor_dataset(ctx, std::move(inputs), std::move(targets)), std::move(options)) {}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::start_workers(int count) {
  workers_.reserve(static_cast<std::size_t>(count));
  try {
    for (int w = 0; w < count; ++w) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    stop_workers();  // a thread that would not start: the ones that did must not outlive the loader
    throw;
  }
}

void DataLoader::stop_workers() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

DataLoader::Slot* DataLoader::next_pending() noexcept {
  Slot* first = nullptr;
  for (Slot& slot : slots_)
    if (slot.state == Slot::State::pending && (!first || slot.batch < first->batch)) first = &slot;
  return first;
}

DataLoader::Slot& DataLoader::slot_of(std::int64_t batch) noexcept {
  return slots_[static_cast<std::size_t>(batch) % slots_.size()];
}

void DataLoader::assign(Slot& slot, std::int64_t batch) noexcept {
  slot.error = nullptr;
  slot.batch = batch < batches_ ? batch : -1;
  slot.state = batch < batches_ ? Slot::State::pending : Slot::State::free;
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    Slot* slot = nullptr;
    work_cv_.wait(lock, [&] { return stop_ || (slot = next_pending()) != nullptr; });
    if (stop_) return;
    slot->state = Slot::State::busy;
    lock.unlock();
    std::exception_ptr error;
    try {
      gather(*slot);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    slot->error = std::move(error);
    slot->state = Slot::State::ready;
    ready_cv_.notify_all();
  }
}

std::int64_t DataLoader::batch_rows(std::int64_t batch) const noexcept {
  return std::min(options_.batch_size, static_cast<std::int64_t>(order_.size()) - batch * options_.batch_size);
}

void DataLoader::gather(Slot& slot) const {
  const std::int64_t first = slot.batch * options_.batch_size;
  slot.rows = batch_rows(slot.batch);
  for (std::int64_t r = 0; r < slot.rows; ++r)
    dataset_->fill(order_[static_cast<std::size_t>(first + r)], slot.examples[static_cast<std::size_t>(r)]);
}

std::vector<std::int64_t> DataLoader::order(std::int64_t epoch) const try {
  FORGE_CHECK(epoch >= 0, invalid_argument, kOp, "epoch must be non-negative, got ", epoch);
  std::vector<std::int64_t> order = sampler_->indices(epoch);
  const auto samples = static_cast<std::size_t>(sampler_->size());
  FORGE_CHECK(order.size() == samples, invalid_argument, kOp, "the sampler gave ", order.size(), " indices for epoch ",
              epoch, " but its size() is ", samples);
  const std::int64_t n = dataset_->size();
  for (std::size_t p = 0; p < order.size(); ++p)
    FORGE_CHECK(order[p] >= 0 && order[p] < n, out_of_range, kOp, "the sampler's index ", order[p], " (position ", p,
                " of epoch ", epoch, ") is out of range for a dataset of ", n, " examples");
  return order;
}
FORGE_CATCH_OOM(kOp)

void DataLoader::begin_epoch(std::int64_t epoch, std::int64_t start_batch) try {
  std::vector<std::int64_t> order = this->order(epoch);
  FORGE_CHECK(start_batch >= 0 && start_batch <= batches_, out_of_range, kOp, "start_batch ", start_batch,
              " is outside [0, ", batches_, "]: epoch ", epoch, " has ", batches_, " batches");
  {
    std::unique_lock<std::mutex> lock(mutex_);
    for (Slot& slot : slots_)  // cancel what no worker has taken
      if (slot.state == Slot::State::pending) slot.state = Slot::State::free;
    ready_cv_.wait(lock, [&] {
      return std::none_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.state == Slot::State::busy; });
    });
    order_ = std::move(order);
    position_ = {epoch, start_batch};
    started_ = true;
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      const std::int64_t batch = start_batch + static_cast<std::int64_t>(k);
      if (workers_.empty())
        slot_of(batch).state = Slot::State::free;  // next() gathers it itself
      else
        assign(slot_of(batch), batch);
    }
  }
  work_cv_.notify_all();
}
FORGE_CATCH_OOM(kOp)

std::optional<Batch> DataLoader::next() try {
  FORGE_CHECK(started_, invalid_argument, kOp, "next() before begin_epoch()");
  const std::int64_t batch = position_.batch;
  if (batch >= batches_) return std::nullopt;
  Slot& slot = slot_of(batch);
  if (workers_.empty()) {
    slot.batch = batch;
    gather(slot);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_cv_.wait(lock, [&] { return slot.state == Slot::State::ready; });
    FORGE_ASSERT(slot.batch == batch, "slot holds batch ", slot.batch, ", expected ", batch);
    if (slot.error) {
      const std::exception_ptr error = std::exchange(slot.error, nullptr);
      slot.state = Slot::State::pending;  // gathered anew for the next call
      lock.unlock();
      work_cv_.notify_one();
      std::rethrow_exception(error);
    }
  }
  Batch out = wrap(slot);  // a throw leaves the slot ready and the position on this batch
  out.index = batch;
  ++position_.batch;
  if (!workers_.empty()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      assign(slot, batch + static_cast<std::int64_t>(slots_.size()));
    }
    work_cv_.notify_one();
  }
  return out;
}
FORGE_CATCH_OOM(kOp)

void DataLoader::check_examples(const Slot& slot) const {
  const std::span<const Example> examples(slot.examples.data(), static_cast<std::size_t>(slot.rows));
  const auto m = first_mismatch(examples);
  if (!m) return;
  const std::int64_t first = slot.batch * options_.batch_size;
  const std::int64_t index = order_[static_cast<std::size_t>(first + static_cast<std::int64_t>(m->at))];
  const std::int64_t index0 = order_[static_cast<std::size_t>(first)];
  forge::detail::fail(m->code, kOp, "batch ", slot.batch, " of epoch ", position_.epoch, " cannot be stacked: example ",
                      index, " has ", m->part, " ", describe(part_of(examples[m->at], m->part)), ", example ", index0,
                      " has ", describe(part_of(examples.front(), m->part)));
}

Batch DataLoader::wrap(const Slot& slot) {
  const std::span<const Example> examples(slot.examples.data(), static_cast<std::size_t>(slot.rows));
  Batch out;
  if (options_.collate) {
    out = options_.collate(ctx_, examples);
  } else {
    check_examples(slot);  // says which dataset examples disagree
    out = default_collate(ctx_, examples);
  }
  if (options_.transform) out.input = options_.transform(out.input);
  return out;
}

}  // namespace forge::data
