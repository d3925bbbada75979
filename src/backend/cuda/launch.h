#pragma once
// Launch geometry and index helpers of the cuda backend's kernels, as plain
// C++ (FORGE_HD where a kernel calls them) so that tests/cuda_math_test.cpp
// checks them on the host:
//   - grid_for: blocks for a grid-stride loop over n elements (capped);
//   - VectorSplit: the 16-byte vector part and scalar tail of a contiguous run;
//   - StridedIndexer: element offsets of N operands for a linear index over a
//     shape (broadcast dims have stride 0);
//   - RowSplit / BlockChunks: how row reductions and whole-tensor reductions
//     split their work.

#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_math.h"
#include "forge/shape.h"

namespace forge::cuda {

inline constexpr int kThreads = 256;  // threads of an elementwise block
// Blocks of a grid-stride loop: enough to fill an H200 many times over; more
// only adds scheduling.
inline constexpr std::int64_t kMaxBlocks = 8192;

// Blocks for n elements at `threads` per block, each thread taking
// `per_thread` elements per step; 0 when n is 0 (launch nothing).
inline unsigned grid_for(std::int64_t n, int threads = kThreads, int per_thread = 1) noexcept {
  if (n <= 0) return 0;
  const std::int64_t per_block = static_cast<std::int64_t>(threads) * per_thread;
  const std::int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// ---- the vectorized contiguous path ----

inline constexpr std::size_t kVectorBytes = 16;

inline bool aligned16(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p) % kVectorBytes == 0; }

// A contiguous run of n elements of `size` bytes: vectors [0, vectors) cover
// elements [0, vectors * lanes) with 16-byte loads; [tail, n) goes element
// by element. Vectors are used only when every pointer is 16-byte aligned.
struct VectorSplit {
  std::int64_t lanes = 1;    // elements per vector
  std::int64_t vectors = 0;  // 16-byte vectors
  std::int64_t tail = 0;     // first element of the scalar tail
};
inline VectorSplit vector_split(std::int64_t n, std::size_t size, bool all_aligned) noexcept {
  VectorSplit v;
  if (!all_aligned || size == 0 || size > kVectorBytes) return v;
  v.lanes = static_cast<std::int64_t>(kVectorBytes / size);
  v.vectors = n > 0 ? n / v.lanes : 0;
  v.tail = v.vectors * v.lanes;
  return v;
}

// ---- strided operands ----

// The offsets (in elements) of N operands for each linear (row-major) index
// of a shape. Dims of extent 1 are dropped, so an index walks only real dims.
template <int N>
struct StridedIndexer {
  int rank = 0;
  std::int64_t size[kMaxRank] = {};
  std::int64_t stride[N][kMaxRank] = {};

  StridedIndexer() = default;
  StridedIndexer(const Shape& shape, const Strides* const (&strides)[N]) noexcept {
    for (int d = 0; d < shape.rank(); ++d) {
      if (shape[d] == 1) continue;
      size[rank] = shape[d];
      for (int k = 0; k < N; ++k) stride[k][rank] = (*strides[k])[d];
      ++rank;
    }
  }
  FORGE_HD void offsets(std::int64_t linear, std::int64_t (&off)[N]) const noexcept {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const std::int64_t i = linear % size[d];
      linear /= size[d];
      for (int k = 0; k < N; ++k) off[k] += i * stride[k][d];
    }
  }
};

// ---- reductions ----

// One block per row (grid-stride over rows when there are more than the
// cap), `threads` threads walking the row's columns c = t, t + threads, ...:
// a power of two in [32, 1024] no larger than needed.
struct RowSplit {
  unsigned blocks = 0;
  int threads = 32;
};
inline RowSplit row_split(std::int64_t rows, std::int64_t cols) noexcept {
  RowSplit s;
  if (rows <= 0) return s;
  s.blocks = static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
  while (s.threads < 1024 && s.threads < cols) s.threads *= 2;
  return s;
}

// A whole-tensor reduction in fixed chunks: chunk b covers
// [b * chunk, min(n, (b + 1) * chunk)); partial results are combined in chunk
// order, so the result does not depend on the launch.
struct BlockChunks {
  std::int64_t chunk = 0;
  std::int64_t count = 0;
};
inline BlockChunks block_chunks(std::int64_t n, std::int64_t chunk) noexcept {
  BlockChunks c;
  c.chunk = chunk;
  c.count = n <= 0 ? 0 : (n + chunk - 1) / chunk;
  return c;
}

}  // namespace forge::cuda
