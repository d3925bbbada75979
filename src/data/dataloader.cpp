// DataLoader (include/forge/data/dataloader.h).
//
// Note [DataLoader prefetch]
// One thread drives an ExecContext (DESIGN §5): its pool, exec scopes and
// tape are not for a second thread. So the background thread never makes a
// tensor. It gathers the rows of batch k + 1 into `ahead_`, host vectors the
// loader owns and sized once, while the caller trains on batch k. next() then
// swaps `ahead_` with `current_` under the mutex (a swap of vectors: no
// allocation), asks for batch k + 2, and, on the caller's thread, copies the
// rows into fresh pooled tensors and runs the transform. That copy is one
// memcpy of the batch; the gather it replaces is a random walk through the
// dataset. A second ExecContext owned by the loader would give the worker its
// own pool, but then batches would cross contexts (an error for every op) or
// be copied anyway.
//
// Handover protocol, all under mutex_: the caller sets requested_ and
// notifies; the worker takes it (busy_), gathers without the lock, then sets
// ready_ and notifies. Only the worker touches ahead_ while a request is
// pending or busy_; only the caller touches order_, which begin_epoch changes
// after waiting for the worker to go idle. A batch whose copy or transform
// throws goes back to ahead_ (after the worker is idle) with ready_ naming it,
// so the next call hands it out again.

#include "forge/data/dataloader.h"

#include <cstring>
#include <limits>
#include <random>

#include "core/tensor_internal.h"
#include "forge/exec_context.h"

namespace forge::data {
namespace {

constexpr const char* kOp = "DataLoader";

// A uniform draw from [0, bound) without modulo bias, from a generator whose
// output sequence the standard fixes (std::uniform_int_distribution's is not).
std::uint64_t draw_below(std::mt19937_64& gen, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  std::uint64_t r;
  do r = gen();
  while (r < threshold);
  return r % bound;
}

std::size_t row_bytes(const Tensor& t) {
  if (!t.defined()) return 0;
  std::size_t n = t.element_size();
  for (int d = 1; d < t.dim(); ++d) n *= static_cast<std::size_t>(t.size(d));
  return n;
}

const std::byte* base_of(const Tensor& t) {
  return t.defined() && t.numel() > 0 ? static_cast<const std::byte*>(t.raw_data(kOp)) : nullptr;
}

}  // namespace

DataLoader::DataLoader(ExecContext& ctx, Tensor inputs, Tensor targets, DataLoaderOptions options) try
    : ctx_(ctx), options_(std::move(options)) {
  FORGE_CHECK(inputs.defined(), invalid_argument, kOp, "inputs are undefined");
  FORGE_CHECK(inputs.dim() >= 1, shape, kOp, "inputs need a leading sample dim, got shape ", inputs.shape());
  FORGE_CHECK(options_.batch_size > 0, invalid_argument, kOp, "batch_size must be positive, got ", options_.batch_size);
  FORGE_CHECK(&inputs.runtime() == &ctx.runtime(), device, kOp, "inputs belong to another context");
  samples_ = inputs.size(0);
  if (targets.defined()) {
    FORGE_CHECK(&targets.runtime() == &ctx.runtime(), device, kOp, "targets belong to another context");
    FORGE_CHECK(targets.dim() >= 1 && targets.size(0) == samples_, shape, kOp, "targets of shape ", targets.shape(),
                " do not match ", samples_, " inputs of shape ", inputs.shape());
  }
  // The dataset is read on the host (a device one is copied back once);
  // batches go to the context's device (wrap).
  inputs_ = forge::detail::packed_where_it_is(inputs.cpu(), kOp);
  targets_ = targets.defined() ? forge::detail::packed_where_it_is(targets.cpu(), kOp) : Tensor();
  batches_ = samples_ / options_.batch_size + (!options_.drop_last && samples_ % options_.batch_size != 0);
  input_base_ = base_of(inputs_);
  target_base_ = base_of(targets_);
  input_row_bytes_ = row_bytes(inputs_);
  target_row_bytes_ = row_bytes(targets_);

  const auto rows = static_cast<std::size_t>(std::min(options_.batch_size, samples_));
  for (Staging* s : {&current_, &ahead_}) {
    s->input.resize(rows * input_row_bytes_);
    s->target.resize(rows * target_row_bytes_);
  }
  if (options_.prefetch) worker_ = std::thread([this] { worker_loop(); });
}
FORGE_CATCH_OOM(kOp)

DataLoader::~DataLoader() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::vector<std::int64_t> DataLoader::order(std::int64_t epoch) const try {
  FORGE_CHECK(epoch >= 0, invalid_argument, kOp, "epoch must be non-negative, got ", epoch);
  std::vector<std::int64_t> order(static_cast<std::size_t>(samples_));
  for (std::int64_t i = 0; i < samples_; ++i) order[static_cast<std::size_t>(i)] = i;
  if (!options_.shuffle) return order;
  std::mt19937_64 gen(options_.seed + static_cast<std::uint64_t>(epoch));
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[draw_below(gen, i)]);
  return order;
}
FORGE_CATCH_OOM(kOp)

std::int64_t DataLoader::batch_rows(std::int64_t batch) const noexcept {
  return std::min(options_.batch_size, samples_ - batch * options_.batch_size);
}

void DataLoader::gather(std::int64_t batch, Staging& into) const noexcept {
  const std::int64_t first = batch * options_.batch_size;
  into.rows = batch_rows(batch);
  for (std::int64_t r = 0; r < into.rows; ++r) {
    const auto sample = static_cast<std::size_t>(order_[static_cast<std::size_t>(first + r)]);
    const auto row = static_cast<std::size_t>(r);
    std::memcpy(into.input.data() + row * input_row_bytes_, input_base_ + sample * input_row_bytes_, input_row_bytes_);
    if (target_base_)
      std::memcpy(into.target.data() + row * target_row_bytes_, target_base_ + sample * target_row_bytes_,
                  target_row_bytes_);
  }
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || requested_ >= 0; });
    if (stop_) return;
    const std::int64_t batch = requested_;
    requested_ = -1;
    busy_ = true;
    lock.unlock();
    gather(batch, ahead_);
    lock.lock();
    busy_ = false;
    ready_ = batch;
    cv_.notify_all();
  }
}

void DataLoader::request(std::int64_t batch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requested_ = batch;
  }
  cv_.notify_all();
}

void DataLoader::wait_idle(std::unique_lock<std::mutex>& lock) {
  requested_ = -1;  // a request not yet taken is cancelled
  cv_.wait(lock, [&] { return !busy_; });
  ready_ = -1;
}

void DataLoader::begin_epoch(std::int64_t epoch) try {
  std::vector<std::int64_t> order = this->order(epoch);
  if (worker_.joinable()) {
    std::unique_lock<std::mutex> lock(mutex_);
    wait_idle(lock);
  }
  order_ = std::move(order);
  cursor_ = 0;
  started_ = true;
  if (worker_.joinable() && batches_ > 0) request(0);
}
FORGE_CATCH_OOM(kOp)

std::optional<Batch> DataLoader::next() try {
  FORGE_CHECK(started_, invalid_argument, kOp, "next() before begin_epoch()");
  if (cursor_ >= batches_) return std::nullopt;
  const std::int64_t batch = cursor_++;
  if (worker_.joinable()) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return ready_ == batch; });
      std::swap(current_, ahead_);
      ready_ = -1;
    }
    if (batch + 1 < batches_) request(batch + 1);
  } else {
    gather(batch, current_);
  }
  try {
    return wrap(current_, batch);
  } catch (...) {
    // The copy or the transform threw (out of memory, say): put the batch back
    // so that the next call returns it again instead of skipping it.
    cursor_ = batch;
    if (worker_.joinable()) {
      std::unique_lock<std::mutex> lock(mutex_);
      wait_idle(lock);  // the request for batch + 1 is cancelled or done: ahead_ is ours
      std::swap(current_, ahead_);
      ready_ = batch;
    }
    throw;
  }
}
FORGE_CATCH_OOM(kOp)

Batch DataLoader::wrap(const Staging& staged, std::int64_t batch) {
  auto rows_of = [&](const Tensor& dataset, const std::vector<std::byte>& bytes, std::size_t row_bytes) {
    Shape shape = dataset.shape();
    shape[0] = staged.rows;
    if (!ctx_.device().is_cpu()) {  // staged on the host, then moved to the context's device
      Tensor host = forge::detail::allocate_in(ctx_.runtime(), ctx_.runtime().pool(), shape, dataset.dtype(), kOp);
      if (host.numel() > 0)
        std::memcpy(host.raw_data(kOp), bytes.data(), static_cast<std::size_t>(staged.rows) * row_bytes);
      return host.to(ctx_.device());
    }
    Tensor t = ctx_.empty(shape, dataset.dtype());
    if (t.numel() > 0) std::memcpy(t.raw_data(kOp), bytes.data(), static_cast<std::size_t>(staged.rows) * row_bytes);
    return t;
  };
  Batch out;
  out.index = batch;
  out.input = rows_of(inputs_, staged.input, input_row_bytes_);
  if (targets_.defined()) out.target = rows_of(targets_, staged.target, target_row_bytes_);
  if (options_.transform) out.input = options_.transform(out.input);
  return out;
}

}  // namespace forge::data
