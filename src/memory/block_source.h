#pragma once
// BlockSource: where a device's pool (and arenas) get their blocks from the
// system. The pool policy (src/memory/buffer_pool.cpp) is written once over
// this interface; each device supplies one source: the host's is the
// aligned allocation and large-block mapping of host_memory.h, a CUDA
// device's is cudaMalloc on that device. A source is called only on a pool
// miss, a trim or an eviction, never per op, so one virtual call is free.

#include <cstddef>
#include <memory>

#include "forge/device.h"

namespace forge::detail {

class StreamDriver;  // memory/stream_driver.h

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // The device whose memory the blocks are.
  virtual Device device() const noexcept = 0;
  // A block of `bytes` (a multiple of 64), 64-byte aligned and uninitialised;
  // nullptr when the system refuses.
  virtual void* allocate(std::size_t bytes) noexcept = 0;
  // Gives back a block this source allocated with the same `bytes`.
  virtual void free(void* block, std::size_t bytes) noexcept = 0;
  // A device whose work runs on streams gives its driver (the pool then tags
  // blocks with streams and gates cross-stream reuse on events); the host
  // gives nullptr.
  virtual StreamDriver* streams() noexcept { return nullptr; }
};

// The host's source: allocate_host_block / free_host_block.
std::unique_ptr<BlockSource> host_block_source();

}  // namespace forge::detail
