#pragma once
// Buffer: a block of bytes with an atomic refcount, a device, a byte length,
// 64-byte alignment, a version counter and an owner whose release runs
// exactly once, when the last reference drops. A pooled buffer's owner
// returns it to its pool's free list; a borrowed buffer (caller memory, a
// file mapping) runs its caller's hook; an arena output's owner drops the
// header (its generation lives in the arena's subclass, src/runtime/arena.cpp).
// Two fields serve their owners and stay here for speed: Note [Fields a
// Buffer keeps for its holders].

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "forge/device.h"
#include "forge/ref.h"

namespace forge {

class Buffer;

namespace detail {
// A key only forge's own sources can name: it guards constructors that trust
// their arguments (a public header cannot hide them from user code otherwise).
struct Internal;
class PoolCore;
bool arena_output_stale(const Buffer& buffer) noexcept;  // src/runtime/arena.cpp
// Buffer::borrow whose hook stays unarmed until arm_borrowed(): for a caller
// that must still allocate before it hands the buffer out (from_blob), so
// that a failure there releases the buffer without running the hook.
Ref<Buffer> borrow_unarmed(void* data, std::size_t nbytes, Device device, std::function<void()> on_release);
void arm_borrowed(Buffer& buffer) noexcept;
}  // namespace detail

// Who takes a buffer back when its last reference drops (see buffer.cpp).
class BufferOwner {
 public:
  virtual void release(Buffer* buffer) noexcept = 0;

 protected:
  ~BufferOwner() = default;
};

class Buffer : public RefCounted<Buffer> {
 public:
  static constexpr std::size_t kAlignmentBytes = 64;

  // Wraps memory the caller owns; `on_release` runs once when forge is done with it.
  static Ref<Buffer> borrow(void* data, std::size_t nbytes, Device device, std::function<void()> on_release);

  std::byte* data() const noexcept { return data_; }
  std::size_t nbytes() const noexcept { return nbytes_; }                  // what was asked for
  std::size_t capacity_bytes() const noexcept { return capacity_bytes_; }  // the block behind it
  Device device() const noexcept { return device_; }
  // Who made it: a pool, an arena (a region of one of its chunks), or a
  // caller who lent the memory.
  enum class Kind : std::uint8_t { pooled, arena, borrowed };
  Kind kind() const noexcept { return kind_; }
  bool pooled() const noexcept { return kind_ == Kind::pooled; }

  // An arena region a later call has rewound (Note [Stale outputs] in arena.cpp).
  bool stale() const noexcept { return kind_ == Kind::arena && detail::arena_output_stale(*this); }
  // The arena this buffer lies in, if any (compared by identity only).
  const void* arena() const noexcept { return kind_ == Kind::arena ? static_cast<const void*>(owner_) : nullptr; }
  BufferOwner* owner() const noexcept { return owner_; }
  // The stream a pooled device buffer was allocated on (a cudaStream_t;
  // nullptr on the host): work queued there may use it with no event.
  void* stream() const noexcept { return stream_; }

  // Version counter shared by every view of these bytes; in-place writes bump
  // it. Writes to one buffer come from the thread driving its context (two
  // threads writing the same bytes race on the bytes anyway), so the bump is a
  // plain load and store, not a locked read-modify-write.
  std::uint32_t version() const noexcept { return version_.load(std::memory_order_relaxed); }
  void bump_version() noexcept {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // How many open exec scopes hold this buffer (0 or 1: a scope adopts only
  // fresh op outputs). Autograd uses it to tell a gradient nobody else sees.
  std::uint32_t scope_refs() const noexcept { return scope_refs_; }
  // For the exec-scope stack, which counts its holds here.
  void add_scope_hold(const detail::Internal&) noexcept { ++scope_refs_; }
  void drop_scope_hold(const detail::Internal&) noexcept { --scope_refs_; }

  // Called by RefCounted when the last reference drops: runs the release hook.
  void on_last_release() noexcept { owner_->release(this); }

  // ---- for owners (pool, arena, borrow) only ----
  struct Init {
    std::byte* data = nullptr;
    std::size_t nbytes = 0;
    std::size_t capacity_bytes = 0;
    Device device{};
    BufferOwner* owner = nullptr;
    Kind kind = Kind::borrowed;
  };
  Buffer(const detail::Internal&, const Init& init) noexcept
      : data_(init.data),
        nbytes_(init.nbytes),
        capacity_bytes_(init.capacity_bytes),
        device_(init.device),
        kind_(init.kind),
        owner_(init.owner) {}

 private:
  friend class detail::PoolCore;
  // Re-arms a cached pooled buffer for a new holder.
  void recycle(std::size_t nbytes) noexcept {
    nbytes_ = nbytes;
    reset_ref_count();
  }

  // Note [Fields a Buffer keeps for its holders]
  // - next_free_: the pool's free list runs through its cached buffers, so
  //   releasing, trimming and evicting never allocate (they run in noexcept
  //   paths, where a failure would terminate).
  // - scope_refs_: autograd's sole-owner test (src/autograd/engine.cpp) runs
  //   for every gradient it accumulates and must discount an open scope's
  //   hold; a lookup in the scope's list would cost a search each time.
  // - stream_, cross_stream_: a device pool files a released block under the
  //   stream that allocated it, and sends it through its event-gated list
  //   only when another stream used it (Note [Streams and reuse] in
  //   buffer_pool.cpp); the flag spares every other release a lookup.
  // An arena output's generation, by contrast, lives in the arena's own
  // subclass (src/runtime/arena.cpp).
  Buffer* next_free_ = nullptr;
  void* stream_ = nullptr;
  bool cross_stream_ = false;

  std::byte* data_;
  std::size_t nbytes_;
  std::size_t capacity_bytes_;
  Device device_;
  Kind kind_;
  BufferOwner* owner_;
  std::atomic<std::uint32_t> version_{0};
  std::uint32_t scope_refs_ = 0;  // written by the thread driving the context
};

}  // namespace forge
