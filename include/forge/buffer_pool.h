#pragma once
// BufferPool: the allocator of every transient tensor of a Runtime. Its policy
// (rounding, best fit with LIFO, the oversize bound, the cache cap) is stated
// at the top of src/memory/buffer_pool.cpp and in docs/MEMORY.md.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <utility>

#include "forge/buffer.h"
#include "forge/device.h"
#include "forge/error.h"
#include "forge/ref.h"

namespace forge {

namespace detail {
class PoolCore;
class BlockSource;
struct Internal;
}  // namespace detail

struct PoolStats {
  std::uint64_t acquires = 0;            // acquire() calls that returned a buffer
  std::uint64_t hits = 0;                // served from the cache
  std::uint64_t misses = 0;              // needed a fresh block
  std::uint64_t system_allocations = 0;  // blocks taken from the system
  std::uint64_t system_frees = 0;        // blocks given back to the system
  std::uint64_t failed_allocations = 0;  // system refusals (reported as out_of_memory)
  std::size_t cached_bytes = 0;          // bytes on the free list
  std::size_t cached_blocks = 0;
  std::int64_t outstanding = 0;  // buffers handed out and not yet released
  std::size_t live_bytes = 0;    // block bytes of the outstanding buffers
  std::size_t peak_live_bytes = 0;
  std::size_t max_cached_bytes = 0;
  // Device pools (streams): released blocks another stream used, waiting for
  // that stream's event before they are cached; and how often a refused
  // allocation emptied the cache and tried again.
  std::size_t pending_blocks = 0;
  std::uint64_t cache_flushes = 0;
};

inline constexpr std::size_t kDefaultMaxCachedBytes = std::size_t{1} << 30;

struct BufferPoolOptions {
  Device device = Device::cpu();
  std::size_t max_cached_bytes = kDefaultMaxCachedBytes;
};

template <typename T>
class ScratchLease;

class BufferPool {
 public:
  static constexpr std::size_t kMinBlockBytes = 64;
  static constexpr std::size_t kSmallLimitBytes = 4096;   // up to here: powers of two
  static constexpr std::size_t kSlabQuantumBytes = 4096;  // beyond: multiples of this
  static constexpr std::size_t kMaxOversizeFactor = 2;    // a cached block > 2x the request stays put
  static constexpr std::size_t kDefaultMaxCachedBytes = forge::kDefaultMaxCachedBytes;

  // The block size that serves a request of `nbytes`.
  static std::size_t rounded_size(std::size_t nbytes) noexcept;

  // A host pool (options.device must be the CPU).
  explicit BufferPool(BufferPoolOptions options = {});
  // A pool over `source`'s blocks (a device runtime makes its pool so; the
  // device is the source's).
  BufferPool(const detail::Internal&, std::unique_ptr<detail::BlockSource> source, BufferPoolOptions options);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `nbytes`, uninitialised. Throws out_of_memory, naming
  // `op`, when the system refuses.
  Ref<Buffer> acquire(std::size_t nbytes, const char* op = "pool");
  // A device pool tags the buffer with the stream its driver has current,
  // and on a refusal empties its cache and tries once more before throwing.

  template <typename T>
  ScratchLease<T> scratch(std::size_t count);

  // Marks `buffer` (of this pool) as used by work queued on `stream` (a
  // cudaStream_t of the pool's device) as well as on the stream that
  // allocated it: when released, its block is reused only after that work
  // has completed. No effect on a host pool or for the buffer's own stream.
  void record_stream(Buffer& buffer, void* stream);

  void trim();  // returns every cached block to the system (waiting for streams still using them)
  void set_max_cached_bytes(std::size_t bytes);
  PoolStats stats() const;
  std::int64_t outstanding() const noexcept;
  std::size_t live_bytes() const noexcept;
  Device device() const noexcept;

  // Where its blocks come from (a device runtime takes owned memory there too).
  std::shared_ptr<detail::BlockSource> block_source(const detail::Internal&) const;

  // Test hook: the nth system allocation from now fails (1 = the next one);
  // 0 turns it off.
  void fail_system_allocation_after(std::uint64_t n) noexcept;

  // Peak tracking for exec scopes: opens a window whose peak starts at the
  // current live bytes, and closes it returning that window's peak (nested
  // windows fold into their parent).
  std::size_t open_peak_window() noexcept;
  std::size_t close_peak_window(std::size_t saved) noexcept;
  std::size_t peak_window() const noexcept;  // the innermost open window's peak so far

 private:
  detail::PoolCore* core_ = nullptr;
};

// Typed, 64-byte-aligned scratch memory from a pool, returned exactly once
// when the lease dies.
template <typename T>
class ScratchLease {
 public:
  ScratchLease() = default;
  ScratchLease(Ref<Buffer> buffer, std::size_t count) noexcept : buffer_(std::move(buffer)), count_(count) {}
  ScratchLease(ScratchLease&&) noexcept = default;
  ScratchLease& operator=(ScratchLease&&) noexcept = default;
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;

  T* data() const noexcept { return buffer_ ? reinterpret_cast<T*>(buffer_->data()) : nullptr; }
  std::size_t size() const noexcept { return count_; }
  std::span<T> span() const noexcept { return {data(), count_}; }
  T& operator[](std::size_t i) const noexcept { return data()[i]; }
  void release() noexcept {
    buffer_.reset();
    count_ = 0;
  }

 private:
  Ref<Buffer> buffer_;
  std::size_t count_ = 0;
};

template <typename T>
ScratchLease<T> BufferPool::scratch(std::size_t count) {
  FORGE_CHECK(count <= SIZE_MAX / sizeof(T), out_of_memory, "scratch", count, " elements of ", sizeof(T),
              " bytes overflow the address space");
  return ScratchLease<T>(acquire(count * sizeof(T), "scratch"), count);
}

}  // namespace forge
