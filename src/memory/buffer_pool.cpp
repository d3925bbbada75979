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
//   host's aligned allocation and mapping, or a device's allocator).

#include "forge/buffer_pool.h"

#include <tbb/spin_mutex.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "core/internal.h"
#include "forge/error.h"
#include "memory/block_source.h"

namespace forge {
namespace detail {

class PoolCore final : public BufferOwner {
 public:
  // Requests beyond this are refused up front (no rounding overflow).
  static constexpr std::size_t kMaxRequestBytes = std::size_t{1} << 56;

  PoolCore(std::unique_ptr<BlockSource> source, const BufferPoolOptions& options)
      : source_(std::move(source)), device_(source_->device()), max_cached_bytes_(options.max_cached_bytes) {}

  Ref<Buffer> acquire(std::size_t nbytes, const char* op);
  void release(Buffer* buffer) noexcept override;
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
  struct Bucket {
    std::size_t bytes;
    Buffer* head;  // most recently released first
    std::size_t count;
  };

  Buffer* take_cached(std::size_t rounded) noexcept;  // under mu_
  Buffer* take_all_cached() noexcept;                 // under mu_
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
  std::uint64_t system_allocations_ = 0, system_frees_ = 0, failed_allocations_ = 0;
  std::atomic<std::int64_t> outstanding_{0};
  std::atomic<std::uint64_t> fail_countdown_{0};
  bool orphaned_ = false;
};

Buffer* PoolCore::take_cached(std::size_t rounded) noexcept {
  auto it = std::lower_bound(buckets_.begin(), buckets_.end(), rounded,
                             [](const Bucket& b, std::size_t n) { return b.bytes < n; });
  for (; it != buckets_.end() && it->bytes <= rounded * BufferPool::kMaxOversizeFactor; ++it) {
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
  {
    std::lock_guard lock(mu_);
    if (Buffer* b = take_cached(rounded)) {
      ++acquires_;
      ++hits_;
      note_live(b->capacity_bytes());
      bump_outstanding(+1);
      b->recycle(nbytes);
      return Ref<Buffer>::adopt(b);
    }
  }
  // A miss: allocate outside the lock (the new block is not shared yet).
  void* block = should_fail() ? nullptr : source_->allocate(rounded);
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
  std::lock_guard lock(mu_);
  if (b == nullptr) {
    ++failed_allocations_;
    FORGE_FAIL(out_of_memory, op, "the system refused ", rounded, " bytes (a request of ", nbytes, " bytes; ",
               live_bytes_, " bytes live, ", cached_bytes_, " cached)");
  }
  ++acquires_;
  ++misses_;
  ++system_allocations_;
  note_live(rounded);
  bump_outstanding(+1);
  return Ref<Buffer>::adopt(b);
}

void PoolCore::release(Buffer* buffer) noexcept {
  const std::size_t bytes = buffer->capacity_bytes();
  bool free_it = true;
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
    if (!orphaned_ && bytes <= max_cached_bytes_ && cached_bytes_ + bytes <= max_cached_bytes_) {
      auto it = std::lower_bound(buckets_.begin(), buckets_.end(), bytes,
                                 [](const Bucket& b, std::size_t n) { return b.bytes < n; });
      try {
        if (it == buckets_.end() || it->bytes != bytes) it = buckets_.insert(it, Bucket{bytes, nullptr, 0});
        buffer->next_free_ = it->head;
        it->head = buffer;
        ++it->count;
        cached_bytes_ += bytes;
        ++cached_blocks_;
        free_it = false;
      } catch (...) {
        // No room for a new bucket: give the block back instead of caching it.
      }
    }
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
  {
    std::lock_guard lock(mu_);
    chain = take_all_cached();
  }
  free_chain(chain);
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
  return s;
}

void PoolCore::orphan() noexcept {
  // One critical section: after it no release can cache a block, and exactly
  // one side (here, or the release of the last outstanding buffer) sees the
  // core orphaned with nothing outstanding and deletes it.
  Buffer* chain;
  bool destroy_now;
  {
    std::lock_guard lock(mu_);
    orphaned_ = true;
    chain = take_all_cached();
    destroy_now = outstanding_.load(std::memory_order_relaxed) == 0;
  }
  free_chain(chain);
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
