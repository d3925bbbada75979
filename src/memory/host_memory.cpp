#include "memory/host_memory.h"

#include <sys/mman.h>

#include <cstdlib>

#include "forge/buffer.h"
#include "memory/block_source.h"

namespace forge::detail {

void* allocate_host_block(std::size_t bytes) noexcept {
  if (bytes >= kMapThresholdBytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  constexpr std::size_t align = Buffer::kAlignmentBytes;
  return std::aligned_alloc(align, (bytes + align - 1) / align * align);
}

void free_host_block(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes >= kMapThresholdBytes) {
    ::munmap(p, bytes);
    return;
  }
  std::free(p);
}

namespace {

class HostBlockSource final : public BlockSource {
 public:
  Device device() const noexcept override { return Device::cpu(); }
  void* allocate(std::size_t bytes) noexcept override { return allocate_host_block(bytes); }
  void free(void* block, std::size_t bytes) noexcept override { free_host_block(block, bytes); }
};

}  // namespace

std::unique_ptr<BlockSource> host_block_source() { return std::make_unique<HostBlockSource>(); }

}  // namespace forge::detail
