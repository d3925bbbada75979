#pragma once
// Index arithmetic of the cuda backend's mapped copies and mask compactions,
// as plain C++ (FORGE_HD where a kernel calls it) that
// tests/cuda_kernel_math_test.cpp checks on the host:
//   - MappedIndexer: the source offset of each output element of
//     mapped_copy (index maps, -1 meaning fill, a tiled last dim);
//   - ScanChunks: how the compactions cut the flags into per-block chunks
//     (count per chunk, exclusive scan of the counts, scatter).

#include <cstdint>

#include "backend/cuda/device_math.h"
#include "forge/shape.h"

namespace forge::cuda {

// mapped_copy's element walk (backend/kernels/indexing.h): for output element
// `linear` (row-major over the shape), out's offset and src's, where dim d
// reads source index map[d][i_d] (the identity without a map), the last dim
// reads i mod period when period > 0 and it has no map, and a map entry
// below 0 writes the fill value. maps point to memory the caller can read
// (device memory in a kernel).
struct MappedIndexer {
  int rank = 0;
  std::int64_t size[kMaxRank] = {};
  std::int64_t out_stride[kMaxRank] = {};
  std::int64_t src_stride[kMaxRank] = {};
  const std::int64_t* map[kMaxRank] = {};
  std::int64_t period = 0;

  // False when some map says "fill" (src is then not set).
  FORGE_HD bool offsets(std::int64_t linear, std::int64_t& out, std::int64_t& src) const noexcept {
    out = 0;
    src = 0;
    bool fill = false;
    for (int d = rank - 1; d >= 0; --d) {
      const std::int64_t i = linear % size[d];
      linear /= size[d];
      out += i * out_stride[d];
      std::int64_t m = i;
      if (map[d] != nullptr)
        m = map[d][i];
      else if (d == rank - 1 && period > 0)
        m = i % period;
      if (m < 0) fill = true;
      src += m * src_stride[d];
    }
    return !fill;
  }
};

// The indexer of mapped_copy's arguments (maps already readable where the
// indexer is used).
inline MappedIndexer mapped_indexer(const Shape& shape, const Strides& out_strides, const Strides& src_strides,
                                    const std::int64_t* const* maps, std::int64_t period) noexcept {
  MappedIndexer ix;
  ix.rank = shape.rank();
  for (int d = 0; d < ix.rank; ++d) {
    ix.size[d] = shape[d];
    ix.out_stride[d] = out_strides[d];
    ix.src_stride[d] = src_strides[d];
    ix.map[d] = maps[d];
  }
  ix.period = period;
  return ix;
}

// The compactions' scan: chunk b holds flags [b * kChunk, min(n, (b + 1) *
// kChunk)), one block of kThreadsPerChunk threads per chunk, thread t
// taking kPerThread consecutive flags from b * kChunk + t * kPerThread, so
// a thread's flags, the block's threads and the chunks all go in order.
struct ScanChunks {
  static constexpr int kThreadsPerChunk = 256;
  static constexpr int kPerThread = 8;
  static constexpr std::int64_t kChunk = std::int64_t{kThreadsPerChunk} * kPerThread;
  std::int64_t n = 0;
  std::int64_t count = 0;  // chunks

  // The flags [first, last) thread t of chunk b takes.
  FORGE_HD void thread_span(std::int64_t b, int t, std::int64_t& first, std::int64_t& last) const noexcept {
    first = b * kChunk + std::int64_t{t} * kPerThread;
    if (first > n) first = n;
    last = first + kPerThread < n ? first + kPerThread : n;
  }
};
inline ScanChunks scan_chunks(std::int64_t n) noexcept {
  ScanChunks c;
  c.n = n > 0 ? n : 0;
  c.count = (c.n + ScanChunks::kChunk - 1) / ScanChunks::kChunk;
  return c;
}

// The widest unit (8, 4, 2 or 1 bytes) that divides row_bytes and both
// addresses' alignment: compact_rows moves rows in units of it.
inline std::size_t move_unit(std::size_t row_bytes, const void* a, const void* b) noexcept {
  const auto bits = row_bytes | reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b);
  for (std::size_t u = 8; u > 1; u /= 2)
    if (bits % u == 0) return u;
  return 1;
}

}  // namespace forge::cuda
