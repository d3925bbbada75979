// Output arenas (DESIGN §9).
//
// Note [Stale outputs]
// Each output a call writes gets its own Buffer header over a region of the
// arena's current chunk. The header records the arena's generation when the
// call made it; every rewind bumps the generation, so a header whose recorded
// generation differs is stale, and every checked access (ops, data_ptr, views)
// refuses it with ErrorCode::stale_output instead of reading bytes a later call
// overwrote. The header holds a reference to its chunk and to the arena's core,
// so the memory behind a stale view stays mapped (it is never read) until the
// view dies, and a host arena may outlive its context.
//
// Growth: a call writes into one chunk. A call that outgrows it mid-way gets a
// second chunk (the first stays alive for the outputs already in it); the next
// rewind drops both and the next call gets one chunk of the high-water size,
// so a steady loop allocates once.
//
// Note [Stream-ordered arenas]
// A device arena (its context computes on a device with streams) belongs to
// the stream that was current when it was made; every call on it runs on that
// stream (ArenaCall makes it current for the call). Its chunks come from the
// driver's stream-ordered allocator (cudaMallocAsync from a pool that keeps
// what is freed) and are freed in stream order, so a rewind needs no
// synchronization: the next call's writes are queued after the previous
// call's reads. A call is deferred: it returns once its work is queued, and
// commit records an event; the arena stays held until the event completes
// (Arena::ready/wait), and a call naming it before then is `contended`. A
// chunk the device refuses is out_of_memory naming the device; there is no
// fallback to host memory.

#include "forge/arena.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "backend/device_runtime.h"
#include "core/internal.h"
#include "core/tensor_internal.h"
#include "forge/exec_context.h"
#include "forge/runtime.h"
#include "memory/host_memory.h"

namespace forge {
namespace detail {

class ArenaCore;

class ArenaChunk : public RefCounted<ArenaChunk> {
 public:
  ArenaChunk(std::byte* data, std::size_t bytes, ArenaCore* core) noexcept : data_(data), bytes_(bytes), core_(core) {}
  void on_last_release() noexcept;
  std::byte* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  std::byte* data_;
  std::size_t bytes_;
  ArenaCore* core_;
};

// An output's header: a Buffer that keeps its chunk and the core alive.
// An arena output's header: the chunk it lies in, and the arena generation it
// was written in (Note [Stale outputs]).
struct ArenaBuffer : Buffer {
  ArenaBuffer(const Buffer::Init& init, Ref<ArenaChunk> c, const std::atomic<std::uint64_t>* source) noexcept
      : Buffer(internal, init),
        chunk(std::move(c)),
        generation_source(source),
        generation(source->load(std::memory_order_relaxed)) {}
  Ref<ArenaChunk> chunk;
  const std::atomic<std::uint64_t>* generation_source;
  std::uint64_t generation;
};

bool arena_output_stale(const Buffer& buffer) noexcept {
  const auto& b = static_cast<const ArenaBuffer&>(buffer);
  return b.generation_source->load(std::memory_order_acquire) != b.generation;
}

class ArenaCore final : public RefCounted<ArenaCore>, public BufferOwner {
 public:
  static std::size_t aligned(std::size_t bytes) noexcept {
    return (bytes + Buffer::kAlignmentBytes - 1) / Buffer::kAlignmentBytes * Buffer::kAlignmentBytes;
  }

  explicit ArenaCore(Ref<Runtime> runtime)
      : runtime_(std::move(runtime)),
        streams_(runtime_->compute().streams()),
        stream_(streams_ != nullptr ? streams_->current_stream() : nullptr) {}
  ~ArenaCore() {
    if (in_flight_ != nullptr) streams_->destroy_event(in_flight_);
  }
  void on_last_release() noexcept { delete this; }

  void release(Buffer* buffer) noexcept override {
    delete static_cast<ArenaBuffer*>(buffer);  // drops its chunk first
    release_ref();
  }

  Runtime& runtime() const noexcept { return *runtime_; }
  Device device() const noexcept { return runtime_->device(); }

  // Claims the arena for a call: false while another call runs or a device
  // call's work is still in flight (Note [Stream-ordered arenas]).
  bool try_begin() noexcept {
    bool expected = false;
    if (!busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) return false;
    if (!settle(false)) {
      busy_.store(false, std::memory_order_release);
      return false;
    }
    return true;
  }
  // Ends a call; a committed device call leaves an event behind it.
  void end(bool committed) noexcept {
    if (committed && streams_ != nullptr) {
      std::lock_guard lock(in_flight_mu_);
      in_flight_ = streams_->record_event(stream_);
      if (in_flight_ == nullptr) streams_->synchronize(stream_);  // no event: finish now
    }
    busy_.store(false, std::memory_order_release);
  }
  // Whether the last call's work has completed; with `wait`, waits for it.
  bool settle(bool wait) noexcept {
    std::lock_guard lock(in_flight_mu_);
    if (in_flight_ == nullptr) return true;
    if (wait)
      streams_->wait_event(in_flight_);
    else if (!streams_->event_done(in_flight_))
      return false;
    streams_->destroy_event(in_flight_);
    in_flight_ = nullptr;
    return true;
  }
  StreamId stream() const noexcept { return stream_; }
  StreamDriver* streams() const noexcept { return streams_; }

  void rewind() noexcept {
    generation_.fetch_add(1, std::memory_order_acq_rel);
    if (!overflow_.empty()) {  // last call outgrew its chunk: next time, one chunk of the high water
      overflow_.clear();
      current_.reset();
    }
    used_ = 0;
    call_bytes_ = 0;
  }
  void begin_call() noexcept {
    rewind();
    ++calls_;
  }

  void reserve(const char* op, std::size_t bytes) {
    if (current_ && current_->bytes() - used_ >= bytes) return;
    grow(op, bytes);
  }

  Tensor allocate(const char* op, const Shape& shape, DType dtype) {
    const auto bytes = static_cast<std::size_t>(checked_numel(op, shape, dtype)) * dtype_size(dtype);
    const std::size_t padded = aligned(bytes);
    if (padded > 0 && (!current_ || current_->bytes() - used_ < padded)) grow(op, padded);
    Buffer::Init init;
    init.data = current_ ? current_->data() + used_ : nullptr;
    init.nbytes = bytes;
    init.capacity_bytes = padded;
    init.device = device();
    init.owner = this;
    init.kind = Buffer::Kind::arena;
    auto* header = new ArenaBuffer(init, current_, &generation_);
    retain_ref();  // the header's reference to this core, dropped in release()
    Ref<Buffer> buffer = Ref<Buffer>::adopt(header);
    used_ += padded;
    call_bytes_ += padded;
    high_water_ = std::max(high_water_, call_bytes_);
    return Tensor(Ref<TensorImpl>::adopt(
        new TensorImpl(internal, runtime_, std::move(buffer), shape, contiguous_strides(shape), 0, dtype)));
  }

  void chunk_freed(std::size_t bytes, std::byte* data) noexcept {
    if (streams_ != nullptr)
      streams_->free_async(data, bytes, stream_);  // after the work queued on the stream
    else
      free_host_block(data, bytes);
    system_frees_.fetch_add(1, std::memory_order_relaxed);
  }

  void fail_after(std::uint64_t n) noexcept { fail_countdown_.store(n, std::memory_order_relaxed); }

  ArenaStats stats() const noexcept {
    ArenaStats s;
    s.capacity_bytes = current_ ? current_->bytes() : 0;
    s.used_bytes = call_bytes_;
    s.high_water_bytes = high_water_;
    s.calls = calls_;
    s.system_allocations = system_allocations_.load(std::memory_order_relaxed);
    s.system_frees = system_frees_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  void grow(const char* op, std::size_t need) {
    std::size_t bytes = std::max(need, high_water_);
    if (call_bytes_ > 0 && current_) bytes = std::max(need, current_->bytes() * 2);  // mid-call: keep the old chunk
    void* block = nullptr;
    if (!should_fail())
      block = streams_ != nullptr ? streams_->allocate_async(bytes, stream_) : allocate_host_block(bytes);
    FORGE_CHECK(block != nullptr, out_of_memory, op, "the arena cannot grow to ", bytes, " bytes",
                streams_ != nullptr ? ": " : "", streams_ != nullptr ? device().str() : "",
                streams_ != nullptr ? " refused them" : "");
    system_allocations_.fetch_add(1, std::memory_order_relaxed);
    Ref<ArenaChunk> chunk;
    try {
      chunk = Ref<ArenaChunk>::adopt(new ArenaChunk(static_cast<std::byte*>(block), bytes, this));
      if (call_bytes_ > 0 && current_) overflow_.push_back(current_);
    } catch (...) {
      if (!chunk) chunk_freed(bytes, static_cast<std::byte*>(block));
      throw;
    }
    current_ = std::move(chunk);
    used_ = 0;
  }

  bool should_fail() noexcept {  // the countdown of fail_growth_after, as the pool's
    std::uint64_t n = fail_countdown_.load(std::memory_order_relaxed);
    while (n > 0) {
      if (fail_countdown_.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) return n == 1;
    }
    return false;
  }

  Ref<Runtime> runtime_;
  StreamDriver* const streams_;  // the device's, or nullptr (a host arena)
  const StreamId stream_;        // the stream every call runs on
  std::mutex in_flight_mu_;
  EventId in_flight_ = nullptr;  // the last device call's event, until it completes
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> busy_{false};
  Ref<ArenaChunk> current_;
  std::vector<Ref<ArenaChunk>> overflow_;
  std::size_t used_ = 0;        // bytes of current_ this call has used
  std::size_t call_bytes_ = 0;  // bytes this call has written, over all chunks
  std::size_t high_water_ = 0;
  std::uint64_t calls_ = 0;
  std::atomic<std::uint64_t> system_allocations_{0};
  std::atomic<std::uint64_t> system_frees_{0};
  std::atomic<std::uint64_t> fail_countdown_{0};
};

void ArenaChunk::on_last_release() noexcept {
  core_->chunk_freed(bytes_, data_);
  delete this;
}

}  // namespace detail

std::string ArenaDescription::str() const { return device.is_cpu() ? "host" : device.str(); }

Arena::Arena(ExecContext& ctx) try : core_(new detail::ArenaCore(Ref<Runtime>::share(&ctx.runtime()))) {}
FORGE_CATCH_OOM("Arena")

Arena::~Arena() {
  if (core_) core_->release_ref();
}

Arena::Arena(Arena&& other) noexcept : core_(std::exchange(other.core_, nullptr)) {}

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    if (core_) core_->release_ref();
    core_ = std::exchange(other.core_, nullptr);
  }
  return *this;
}

ArenaDescription Arena::describe() const { return {core_ ? core_->device() : Device::cpu()}; }
ArenaStats Arena::stats() const { return core_ ? core_->stats() : ArenaStats{}; }

void Arena::fail_growth_after(std::uint64_t n) noexcept {
  if (core_) core_->fail_after(n);
}

bool Arena::ready() const noexcept { return core_ == nullptr || core_->settle(false); }
void Arena::wait() const noexcept {
  if (core_) core_->settle(true);
}

ArenaCall::ArenaCall(const char* op, Arena* arena, std::initializer_list<std::reference_wrapper<const Tensor>> inputs)
    : op_(op), core_(nullptr) {
  FORGE_CHECK(arena != nullptr && arena->core_ != nullptr, invalid_argument, op,
              "no arena given; lend the call an Arena for its outputs");
  detail::ArenaCore* core = arena->core_;
  for (const Tensor& input : inputs) {
    if (!input.defined()) continue;  // the call's own checks report it
    FORGE_CHECK(input.device() == core->device(), device, op, "the arena lives on ", core->device().str(),
                " but an input lives on ", input.device().str());
    FORGE_CHECK(&input.runtime() == &core->runtime(), device, op,
                "the arena was made by another ExecContext than the inputs'");
  }
  FORGE_CHECK(core->try_begin(), contended, op,
              "the arena is already serving another call (or its last call's work is still queued on ",
              core->device().str(), ": Arena::wait() first)");
  for (const Tensor& input : inputs) {
    if (input.defined() && input.buffer()->arena() == core) {
      core->end(false);
      FORGE_FAIL(invalid_argument, op,
                 "an input lies inside the arena this call would rewind; copy it out or lend another arena");
    }
  }
  core->begin_call();
  core_ = core;
  if (detail::StreamDriver* d = core->streams()) {  // the call runs on the arena's stream
    previous_stream_ = d->current_stream();
    d->set_current_stream(core->stream());
  }
}

ArenaCall::~ArenaCall() {
  if (!committed_) core_->rewind();  // a failed call leaves no outputs behind
  if (detail::StreamDriver* d = core_->streams()) d->set_current_stream(previous_stream_);
  core_->end(committed_);
}

Runtime& ArenaCall::runtime() const noexcept { return core_->runtime(); }

std::size_t ArenaCall::bytes_for(const Shape& shape, DType dtype) {
  return detail::ArenaCore::aligned(static_cast<std::size_t>(detail::checked_numel("arena", shape, dtype)) *
                                    dtype_size(dtype));
}

void ArenaCall::reserve(std::size_t bytes) try { core_->reserve(op_, bytes); }
FORGE_CATCH_OOM(op_)

Tensor ArenaCall::allocate(const Shape& shape, DType dtype) try { return core_->allocate(op_, shape, dtype); }
FORGE_CATCH_OOM(op_)

// ---- ragged views ----

namespace {

void check_offsets(const char* view, const Tensor& offsets) {
  FORGE_CHECK(offsets.defined() && offsets.dim() == 1 && offsets.numel() >= 1 && offsets.dtype() == DType::i64 &&
                  offsets.is_contiguous(),
              invalid_argument, view, "offsets must be a contiguous i64 tensor of count + 1 elements");
}

}  // namespace

RowsView::RowsView(Tensor rows) : rows_(std::move(rows)) {
  FORGE_CHECK(rows_.defined() && rows_.dim() == 2 && (rows_.size(1) <= 1 || rows_.stride(1) == 1), invalid_argument,
              "RowsView", "rows must be a rank-2 tensor with unit stride along a row");
}

TapeView::TapeView(Tensor values, Tensor offsets) : values_(std::move(values)), offsets_(std::move(offsets)) {
  FORGE_CHECK(values_.defined() && values_.dim() == 1, invalid_argument, "TapeView", "values must be rank 1");
  check_offsets("TapeView", offsets_);
}

RowsTapeView::RowsTapeView(Tensor rows, Tensor offsets) : rows_(std::move(rows)), offsets_(std::move(offsets)) {
  FORGE_CHECK(rows_.defined() && rows_.dim() == 2, invalid_argument, "RowsTapeView", "rows must be rank 2");
  check_offsets("RowsTapeView", offsets_);
}

Tensor TapeView::item(std::int64_t i) const try {
  FORGE_CHECK(i >= 0 && i < count(), out_of_range, "TapeView", "item ", i, " of ", count());
  const std::int64_t* off = offsets_data();
  return values_.narrow(0, off[i], off[i + 1] - off[i]);
}
FORGE_CATCH_OOM("TapeView")

Tensor RowsTapeView::item(std::int64_t i) const try {
  FORGE_CHECK(i >= 0 && i < count(), out_of_range, "RowsTapeView", "item ", i, " of ", count());
  const std::int64_t* off = offsets_data();
  return rows_.narrow(0, off[i], off[i + 1] - off[i]);
}
FORGE_CATCH_OOM("RowsTapeView")

}  // namespace forge
