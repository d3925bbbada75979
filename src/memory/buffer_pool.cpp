// BufferPool policy (DESIGN §3; kept exact so that its tests mean something):
// - Rounding: n bytes are served by a block of max(64, next_pow2(n)) bytes up
//   to kSmallLimitBytes (4096), and of align_up(n, kSlabQuantumBytes) beyond.
// - Fit: the smallest cached block that fits, LIFO among blocks of one size,
//   but never a block more than kMaxOversizeFactor (2x) the rounded request.
// - Cap: cached (free-list) bytes stay <= max_cached_bytes; a released block
//   that alone exceeds the cap, or would push the cache past it, is freed.
// - Threads: one mutex (a spin mutex: the critical sections are a few loads
//   and stores, and a context is driven by one thread, so it is nearly never
//   contended) guards the free list and the counters; buffers may be released
//   from any thread; `outstanding_` is written under the lock and readable
//   without it.
// - Teardown: the pool's core outlives the BufferPool while buffers are out
//   (each release finds it), and deletes itself with the last one.
// - Devices: the policy above is the same for every device; only where
//   blocks come from differs (the BlockSource the pool is made with: the
//   host's aligned allocation and mapping, or a device's allocator). A
//   device with streams adds Note [Streams and reuse] and retries a refused
//   allocation once after emptying the cache; the host has one "stream".

// Note [Streams and reuse]
// A device runs work in order on streams, after the host has moved on, so a
// block may still be read by queued work when its buffer is released. The
// pool keeps that safe the way the CUDA caching allocators do:
// - Every block is tagged with the stream that allocated it (the driver's
//   current stream at acquire), and the free list is kept per stream. A
//   block released is reused only by acquires on its own stream: work queued
//   there later runs after the work that used it, so reuse is immediate and
//   needs no event.
// - A buffer that work on another stream uses (record_stream) goes, when
//   released, to a pending list instead, with an event recorded on each such
//   stream; acquires poll the list and cache a block once all its events
//   have completed. An event that cannot be made is replaced by waiting for
//   that stream there and then.
// - trim(), an allocation refused by the system (which empties the cache and
//   retries once) and the pool's teardown wait for pending events before
//   freeing those blocks. Freeing a cached block needs no wait: the device
//   allocator's free (cudaFree) waits for the device itself.

#include "forge/buffer_pool.h"

#include <tbb/spin_mutex.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/internal.h"
#include "forge/error.h"
#include "memory/block_source.h"
#include "memory/stream_driver.h"

namespace forge {
namespace detail {

class PoolCore final : public BufferOwner {
 public:
  // Requests beyond this are refused up front (no rounding overflow).
  static constexpr std::size_t kMaxRequestBytes = std::size_t{1} << 56;

  // Streams another than a buffer's own may record on it (record_stream).
  static constexpr int kMaxStreamUses = 4;

  PoolCore(std::unique_ptr<BlockSource> source, const BufferPoolOptions& options)
      : source_(std::move(source)),
        streams_(source_->streams()),
        device_(source_->device()),
        max_cached_bytes_(options.max_cached_bytes) {}

  Ref<Buffer> acquire(std::size_t nbytes, const char* op);
  void release(Buffer* buffer) noexcept override;
  void record_stream(Buffer& buffer, StreamId stream);
  void trim() noexcept;
  void set_max_cached_bytes(std::size_t bytes) noexcept;
  PoolStats stats() const;
  void orphan() noexcept;

  std::int64_t outstanding() const noexcept { return outstanding_.load(std::memory_order_relaxed); }
  std::size_t live_bytes() const noexcept {
    std::lock_guard lock(mu_);
    return live_bytes_;
  }
  Device device() const noexcept { return device_; }
  std::shared_ptr<BlockSource> source() const noexcept { return source_; }
  void fail_after(std::uint64_t n) noexcept { fail_countdown_.store(n, std::memory_order_relaxed); }
  std::size_t open_window() noexcept {
    std::lock_guard lock(mu_);
    return std::exchange(window_peak_, live_bytes_);
  }
  std::size_t window() const noexcept {
    std::lock_guard lock(mu_);
    return window_peak_;
  }
  std::size_t close_window(std::size_t saved) noexcept {
    std::lock_guard lock(mu_);
    const std::size_t mine = window_peak_;
    window_peak_ = std::max(saved, mine);
    return mine;
  }

 private:
  // Free blocks of one size allocated on one stream (the host: nullptr).
  struct Bucket {
    StreamId stream;
    std::size_t bytes;
    Buffer* head;  // most recently released first
    std::size_t count;
  };
  static bool before(const Bucket& b, StreamId stream, std::size_t bytes) noexcept {
    const auto bs = reinterpret_cast<std::uintptr_t>(b.stream), s = reinterpret_cast<std::uintptr_t>(stream);
    return bs < s || (bs == s && b.bytes < bytes);
  }
  // A stream other than its own that used a live buffer.
  struct StreamUse {
    Buffer* buffer;
    StreamId stream;
  };
  // A released block waiting for the events of the streams that used it.
  struct Pending {
    Buffer* buffer;
    EventId events[kMaxStreamUses];
    int count;
  };

  Buffer* take_cached(StreamId stream, std::size_t rounded) noexcept;  // under mu_
  Buffer* take_all_cached() noexcept;                                  // under mu_
  bool cache(Buffer* buffer) noexcept;                                 // under mu_; false: free it
  void* allocate_block(std::size_t rounded, std::size_t& flushed) noexcept;
  std::size_t empty_cache() noexcept;
  void release_used_elsewhere(Buffer* buffer) noexcept;
  Buffer* collect_pending() noexcept;                           // under mu_; returns blocks to free
  std::vector<Pending> take_pending() noexcept;                 // under mu_
  void finish_pending(std::vector<Pending>& pending) noexcept;  // waits, then frees
  void free_chain(Buffer* chain) noexcept;
  Buffer* evict_until(std::size_t limit) noexcept;  // under mu_
  void note_live(std::size_t bytes) noexcept {      // under mu_
    live_bytes_ += bytes;
    peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
    window_peak_ = std::max(window_peak_, live_bytes_);
  }
  // Under mu_: every write to the counter happens under the lock, so a plain
  // load and store suffice; the atomic is only for lock-free readers.
  void bump_outstanding(std::int64_t delta) noexcept {
    outstanding_.store(outstanding_.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }
  bool should_fail() noexcept {
    std::uint64_t n = fail_countdown_.load(std::memory_order_relaxed);
    while (n > 0) {
      if (fail_countdown_.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) return n == 1;
    }
    return false;
  }
  void free_block(Buffer* buffer) noexcept {
    source_->free(buffer->data(), buffer->capacity_bytes());
    delete buffer;
  }

  const std::shared_ptr<BlockSource> source_;  // shared: see release()
  StreamDriver* const streams_;                // source_'s, or nullptr (the host)
  const Device device_;
  mutable tbb::spin_mutex mu_;
  std::vector<Bucket> buckets_;  // ascending by bytes; empty buckets are kept until trim
  std::size_t max_cached_bytes_;
  std::size_t cached_bytes_ = 0;
  std::size_t cached_blocks_ = 0;
  std::size_t live_bytes_ = 0;
  std::size_t peak_live_bytes_ = 0;
  std::size_t window_peak_ = 0;
  std::uint64_t acquires_ = 0, hits_ = 0, misses_ = 0;
  std::uint64_t system_allocations_ = 0, system_frees_ = 0, failed_allocations_ = 0, cache_flushes_ = 0;
  // Note [Streams and reuse]. pending_ keeps room for every buffer in uses_
  // (reserved by record_stream), so a release never allocates.
  std::vector<StreamUse> uses_;
  std::vector<Pending> pending_;
  std::size_t buffers_used_elsewhere_ = 0;
  std::atomic<std::int64_t> outstanding_{0};
  std::atomic<std::uint64_t> fail_countdown_{0};
  bool orphaned_ = false;
};

Buffer* PoolCore::take_cached(StreamId stream, std::size_t rounded) noexcept {
  auto it = std::lower_bound(buckets_.begin(), buckets_.end(), rounded,
                             [stream](const Bucket& b, std::size_t n) { return before(b, stream, n); });
  for (; it != buckets_.end() && it->stream == stream && it->bytes <= rounded * BufferPool::kMaxOversizeFactor; ++it) {
    if (it->head == nullptr) continue;
    Buffer* b = it->head;
    it->head = b->next_free_;
    --it->count;
    b->next_free_ = nullptr;
    cached_bytes_ -= b->capacity_bytes();
    --cached_blocks_;
    return b;
  }
  return nullptr;
}

Ref<Buffer> PoolCore::acquire(std::size_t nbytes, const char* op) {
  FORGE_CHECK(nbytes <= kMaxRequestBytes, out_of_memory, op, "cannot allocate ", nbytes,
              " bytes: larger than any block the pool hands out");
  const std::size_t rounded = BufferPool::rounded_size(nbytes);
  const StreamId stream = streams_ != nullptr ? streams_->current_stream() : nullptr;
  Buffer* done = nullptr;  // pending blocks whose events completed but that the cap turns away
  Buffer* hit;
  {
    std::lock_guard lock(mu_);
    if (!pending_.empty()) [[unlikely]]
      done = collect_pending();
    hit = take_cached(stream, rounded);
    if (hit != nullptr) {
      ++acquires_;
      ++hits_;
      note_live(hit->capacity_bytes());
      bump_outstanding(+1);
      hit->recycle(nbytes);
    }
  }
  free_chain(done);
  if (hit != nullptr) return Ref<Buffer>::adopt(hit);
  // A miss: allocate outside the lock (the new block is not shared yet).
  std::size_t flushed = 0;
  void* block = allocate_block(rounded, flushed);
  Buffer* b = nullptr;
  if (block != nullptr) {
    Buffer::Init init;
    init.data = static_cast<std::byte*>(block);
    init.nbytes = nbytes;
    init.capacity_bytes = rounded;
    init.device = device_;
    init.owner = this;
    init.kind = Buffer::Kind::pooled;
    b = new (std::nothrow) Buffer(internal, init);
    if (b == nullptr) source_->free(block, rounded);
  }
  // A device that failed for another reason than memory (a fault of queued
  // work, a lost device) says so: that is not out_of_memory.
  const std::string fault = b == nullptr && streams_ != nullptr ? streams_->take_error() : std::string();
  std::lock_guard lock(mu_);
  if (b == nullptr) {
    ++failed_allocations_;
    FORGE_CHECK(fault.empty(), device, op, device_.str(), " failed to allocate ", rounded, " bytes: ", fault);
    if (streams_ != nullptr)
      FORGE_FAIL(out_of_memory, op, device_.str(), " is out of memory: the system refused ", rounded,
                 " bytes (a request of ", nbytes, " bytes) after emptying a cache of ", flushed, " bytes; ",
                 live_bytes_, " bytes live, ", cached_bytes_, " cached");
    FORGE_FAIL(out_of_memory, op, "the system refused ", rounded, " bytes (a request of ", nbytes, " bytes; ",
               live_bytes_, " bytes live, ", cached_bytes_, " cached)");
  }
  b->stream_ = stream;
  ++acquires_;
  ++misses_;
  ++system_allocations_;
  note_live(rounded);
  bump_outstanding(+1);
  return Ref<Buffer>::adopt(b);
}

// A block from the system. A device pool whose request is refused empties
// its cache (waiting for pending blocks) and tries once more: cached blocks
// of other sizes or streams may be what the device lacks. An injected
// failure (fail_after) is final, so that tests see exactly one refusal.
void* PoolCore::allocate_block(std::size_t rounded, std::size_t& flushed) noexcept {
  if (should_fail()) return nullptr;
  if (void* block = source_->allocate(rounded)) return block;
  if (streams_ == nullptr) return nullptr;
  flushed = empty_cache();
  return source_->allocate(rounded);
}

// Frees every cached and pending block; returns the bytes given back.
std::size_t PoolCore::empty_cache() noexcept {
  Buffer* chain;
  std::vector<Pending> pending;
  std::size_t bytes;
  {
    std::lock_guard lock(mu_);
    ++cache_flushes_;
    bytes = cached_bytes_;
    chain = take_all_cached();
    pending = take_pending();
    for (const Pending& p : pending) bytes += p.buffer->capacity_bytes();
  }
  free_chain(chain);
  finish_pending(pending);
  return bytes;
}

// Files a released block on its stream's free list, if the cap allows.
bool PoolCore::cache(Buffer* buffer) noexcept {
  const std::size_t bytes = buffer->capacity_bytes();
  if (orphaned_ || bytes > max_cached_bytes_ || cached_bytes_ + bytes > max_cached_bytes_) return false;
  const StreamId stream = buffer->stream_;
  auto it = std::lower_bound(buckets_.begin(), buckets_.end(), bytes,
                             [stream](const Bucket& b, std::size_t n) { return before(b, stream, n); });
  try {
    if (it == buckets_.end() || it->stream != stream || it->bytes != bytes)
      it = buckets_.insert(it, Bucket{stream, bytes, nullptr, 0});
  } catch (...) {
    return false;  // no room for a new bucket: give the block back instead
  }
  buffer->next_free_ = it->head;
  it->head = buffer;
  ++it->count;
  cached_bytes_ += bytes;
  ++cached_blocks_;
  return true;
}

void PoolCore::release(Buffer* buffer) noexcept {
  if (buffer->cross_stream_) [[unlikely]]
    return release_used_elsewhere(buffer);
  const std::size_t bytes = buffer->capacity_bytes();
  bool free_it;
  bool destroy_core = false;
  // The block is freed after the lock is dropped, when the owner may already
  // have orphaned and deleted this core (a release on another thread that
  // brought outstanding to zero lets orphan() delete it): the source is
  // kept alive for that free by a reference taken under the lock.
  std::shared_ptr<BlockSource> source;
  {
    std::lock_guard lock(mu_);
    live_bytes_ -= bytes;
    bump_outstanding(-1);
    free_it = !cache(buffer);
    if (free_it) {
      ++system_frees_;
      source = source_;
    }
    destroy_core = orphaned_ && outstanding_.load(std::memory_order_relaxed) == 0;
  }
  if (free_it) {
    source->free(buffer->data(), bytes);
    delete buffer;
  }
  if (destroy_core) delete this;
}

void PoolCore::record_stream(Buffer& buffer, StreamId stream) {
  if (streams_ == nullptr || stream == buffer.stream_) return;
  std::lock_guard lock(mu_);
  int count = 0;
  for (const StreamUse& use : uses_) {
    if (use.buffer != &buffer) continue;
    if (use.stream == stream) return;
    ++count;
  }
  FORGE_CHECK(count < kMaxStreamUses, invalid_argument, "record_stream", "a buffer may be used on at most ",
              kMaxStreamUses, " streams besides its own");
  const std::size_t elsewhere = buffers_used_elsewhere_ + (buffer.cross_stream_ ? 0 : 1);
  try {
    pending_.reserve(pending_.size() + elsewhere);
    uses_.push_back({&buffer, stream});
  } catch (const std::bad_alloc&) {
    FORGE_FAIL(out_of_memory, "record_stream", "no memory to note a stream's use of a buffer");
  }
  if (!buffer.cross_stream_) {
    buffer.cross_stream_ = true;
    ++buffers_used_elsewhere_;
  }
}

// Note [Streams and reuse]: the release of a buffer other streams used.
// Events are recorded outside the lock (a driver call); the buffer is still
// counted outstanding then, so the core is alive.
void PoolCore::release_used_elsewhere(Buffer* buffer) noexcept {
  Pending p{buffer, {}, 0};
  StreamId used_on[kMaxStreamUses];
  int n = 0;
  {
    std::lock_guard lock(mu_);
    std::erase_if(uses_, [&](const StreamUse& use) {
      if (use.buffer != buffer) return false;
      used_on[n++] = use.stream;
      return true;
    });
  }
  for (int i = 0; i < n; ++i) {
    if (EventId event = streams_->record_event(used_on[i]))
      p.events[p.count++] = event;
    else
      streams_->synchronize(used_on[i]);  // no event: wait for that stream now
  }
  buffer->cross_stream_ = false;
  const std::size_t bytes = buffer->capacity_bytes();
  bool destroy_core;
  bool wait_and_free = false;
  {
    std::lock_guard lock(mu_);
    live_bytes_ -= bytes;
    bump_outstanding(-1);
    --buffers_used_elsewhere_;
    try {
      if (!orphaned_) pending_.push_back(p);  // room reserved by record_stream, unless a trim took it
      wait_and_free = orphaned_;
    } catch (...) {
      wait_and_free = true;
    }
    if (wait_and_free) ++system_frees_;
    destroy_core = orphaned_ && outstanding_.load(std::memory_order_relaxed) == 0;
  }
  if (wait_and_free) {
    for (int i = 0; i < p.count; ++i) {
      streams_->wait_event(p.events[i]);
      streams_->destroy_event(p.events[i]);
    }
    source_->free(buffer->data(), bytes);
    delete buffer;
  }
  if (destroy_core) delete this;
}

// Caches the pending blocks whose events have all completed; returns those
// the cap turns away, chained, for freeing outside the lock. Under mu_.
Buffer* PoolCore::collect_pending() noexcept {
  Buffer* chain = nullptr;
  std::erase_if(pending_, [&](Pending& p) {
    for (int i = 0; i < p.count; ++i)
      if (!streams_->event_done(p.events[i])) return false;
    for (int i = 0; i < p.count; ++i) streams_->destroy_event(p.events[i]);
    if (!cache(p.buffer)) {
      ++system_frees_;
      p.buffer->next_free_ = chain;
      chain = p.buffer;
    }
    return true;
  });
  return chain;
}

// Unlinks every pending block (counted as freed). Under mu_.
std::vector<PoolCore::Pending> PoolCore::take_pending() noexcept {
  system_frees_ += pending_.size();
  std::vector<Pending> taken;
  taken.swap(pending_);
  return taken;
}

void PoolCore::finish_pending(std::vector<Pending>& pending) noexcept {
  for (Pending& p : pending) {
    for (int i = 0; i < p.count; ++i) {
      streams_->wait_event(p.events[i]);
      streams_->destroy_event(p.events[i]);
    }
    free_block(p.buffer);
  }
  pending.clear();
}

// Unlinks cached blocks, largest first (they free the most for the fewest
// system calls), until at most `limit` bytes stay cached; returns them as one
// chain through next_free_ (nothing is allocated) for freeing outside the lock.
Buffer* PoolCore::evict_until(std::size_t limit) noexcept {
  Buffer* chain = nullptr;
  for (auto it = buckets_.rbegin(); it != buckets_.rend() && cached_bytes_ > limit; ++it) {
    while (it->head != nullptr && cached_bytes_ > limit) {
      Buffer* b = it->head;
      it->head = b->next_free_;
      --it->count;
      cached_bytes_ -= b->capacity_bytes();
      --cached_blocks_;
      ++system_frees_;
      b->next_free_ = chain;
      chain = b;
    }
  }
  std::erase_if(buckets_, [](const Bucket& b) { return b.head == nullptr; });
  return chain;
}

// Unlinks every cached block into one chain (through next_free_, so nothing
// is allocated) for freeing outside the lock. Under mu_.
Buffer* PoolCore::take_all_cached() noexcept {
  Buffer* chain = nullptr;
  for (Bucket& bucket : buckets_) {
    while (Buffer* b = bucket.head) {
      bucket.head = b->next_free_;
      b->next_free_ = chain;
      chain = b;
      ++system_frees_;
    }
  }
  buckets_.clear();
  cached_bytes_ = 0;
  cached_blocks_ = 0;
  return chain;
}

void PoolCore::free_chain(Buffer* chain) noexcept {
  while (chain != nullptr) {
    Buffer* next = chain->next_free_;
    free_block(chain);
    chain = next;
  }
}

void PoolCore::trim() noexcept {
  Buffer* chain;
  std::vector<Pending> pending;
  {
    std::lock_guard lock(mu_);
    chain = take_all_cached();
    pending = take_pending();
  }
  free_chain(chain);
  finish_pending(pending);
}

void PoolCore::set_max_cached_bytes(std::size_t bytes) noexcept {
  Buffer* chain;
  {
    std::lock_guard lock(mu_);
    max_cached_bytes_ = bytes;
    chain = evict_until(bytes);
  }
  free_chain(chain);
}

PoolStats PoolCore::stats() const {
  std::lock_guard lock(mu_);
  PoolStats s;
  s.acquires = acquires_;
  s.hits = hits_;
  s.misses = misses_;
  s.system_allocations = system_allocations_;
  s.system_frees = system_frees_;
  s.failed_allocations = failed_allocations_;
  s.cached_bytes = cached_bytes_;
  s.cached_blocks = cached_blocks_;
  s.outstanding = outstanding_.load(std::memory_order_relaxed);
  s.live_bytes = live_bytes_;
  s.peak_live_bytes = peak_live_bytes_;
  s.max_cached_bytes = max_cached_bytes_;
  s.pending_blocks = pending_.size();
  s.cache_flushes = cache_flushes_;
  return s;
}

void PoolCore::orphan() noexcept {
  // One critical section: after it no release can cache a block, and exactly
  // one side (here, or the release of the last outstanding buffer) sees the
  // core orphaned with nothing outstanding and deletes it.
  Buffer* chain;
  std::vector<Pending> pending;
  bool destroy_now;
  {
    std::lock_guard lock(mu_);
    orphaned_ = true;
    chain = take_all_cached();
    pending = take_pending();
    destroy_now = outstanding_.load(std::memory_order_relaxed) == 0;
  }
  free_chain(chain);
  finish_pending(pending);
  if (destroy_now) delete this;
}

}  // namespace detail

std::size_t BufferPool::rounded_size(std::size_t nbytes) noexcept {
  if (nbytes <= kSmallLimitBytes) return std::max(kMinBlockBytes, std::bit_ceil(nbytes));
  return (nbytes + kSlabQuantumBytes - 1) / kSlabQuantumBytes * kSlabQuantumBytes;
}

BufferPool::BufferPool(BufferPoolOptions options) : BufferPool(detail::internal, nullptr, options) {}

BufferPool::BufferPool(const detail::Internal&, std::unique_ptr<detail::BlockSource> source,
                       BufferPoolOptions options) try {
  if (source == nullptr) {
    FORGE_CHECK(options.device.is_cpu(), device, "BufferPool", "a pool of ", options.device.str(),
                " memory is made by that device's runtime");
    source = detail::host_block_source();
  }
  core_ = new detail::PoolCore(std::move(source), options);
}
FORGE_CATCH_OOM("BufferPool")
BufferPool::~BufferPool() { core_->orphan(); }

Ref<Buffer> BufferPool::acquire(std::size_t nbytes, const char* op) { return core_->acquire(nbytes, op); }
void BufferPool::trim() { core_->trim(); }
std::shared_ptr<detail::BlockSource> BufferPool::block_source(const detail::Internal&) const { return core_->source(); }
void BufferPool::record_stream(Buffer& buffer, void* stream) {
  FORGE_CHECK(buffer.owner() == core_, invalid_argument, "record_stream", "the buffer is not one of this pool's");
  core_->record_stream(buffer, stream);
}
void BufferPool::set_max_cached_bytes(std::size_t bytes) { core_->set_max_cached_bytes(bytes); }
PoolStats BufferPool::stats() const { return core_->stats(); }
std::int64_t BufferPool::outstanding() const noexcept { return core_->outstanding(); }
std::size_t BufferPool::live_bytes() const noexcept { return core_->live_bytes(); }
Device BufferPool::device() const noexcept { return core_->device(); }
void BufferPool::fail_system_allocation_after(std::uint64_t n) noexcept { core_->fail_after(n); }
std::size_t BufferPool::open_peak_window() noexcept { return core_->open_window(); }
std::size_t BufferPool::close_peak_window(std::size_t saved) noexcept { return core_->close_window(saved); }
std::size_t BufferPool::peak_window() const noexcept { return core_->window(); }

}  // namespace forge
