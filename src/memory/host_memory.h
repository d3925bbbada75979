#pragma once
// System allocation of host blocks for the pool and the arenas: 64-byte
// aligned, never written here (pages commit on first touch). Large blocks are
// mapped directly so that freeing them returns the pages to the system.

#include <cstddef>

namespace forge::detail {

inline constexpr std::size_t kMapThresholdBytes = std::size_t{1} << 20;

// nullptr when the system refuses.
void* allocate_host_block(std::size_t bytes) noexcept;
void free_host_block(void* p, std::size_t bytes) noexcept;

}  // namespace forge::detail
