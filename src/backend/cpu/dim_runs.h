#pragma once
// Iteration over coalesced dims, shared by the reduction and scan kernels:
// dims become (size, stride) runs, neighbours contiguous in every stride set
// merge, and a Walker steps a linear index through the runs while tracking
// one offset per stride set.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "backend/cpu/kernels.h"
#include "core/convert.h"
#include "forge/shape.h"

namespace forge::cpu {

// Walks a linear index over up to kMaxRank dims, tracking K offsets.
template <int K>
struct Walker {
  int rank = 0;
  const std::int64_t* size = nullptr;
  const std::int64_t* stride[K] = {};
  std::int64_t idx[kMaxRank] = {};
  std::int64_t off[K] = {};

  // Over the first `rank` dims of `size`, offset k stepping by strides[k].
  static Walker over(int rank, const std::int64_t* size, const std::int64_t* const (&strides)[K]) noexcept {
    Walker w;
    w.rank = rank;
    w.size = size;
    for (int k = 0; k < K; ++k) w.stride[k] = strides[k];
    return w;
  }

  void seek(std::int64_t linear) noexcept {
    for (int k = 0; k < K; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = linear % size[d];
      linear /= size[d];
      for (int k = 0; k < K; ++k) off[k] += idx[d] * stride[k][d];
    }
  }
  void next() noexcept {
    for (int d = rank - 1; d >= 0; --d) {
      for (int k = 0; k < K; ++k) off[k] += stride[k][d];
      if (++idx[d] < size[d]) return;
      for (int k = 0; k < K; ++k) off[k] -= stride[k][d] * size[d];
      idx[d] = 0;
    }
  }
};

struct DimRun {
  std::int64_t size, s0, s1, s2;
};

// Sorts dims outermost first by their first stride, then merges neighbours
// that are contiguous with each other in every stride set.
inline int coalesce(DimRun* d, int n, int sets) {
  for (int i = 1; i < n; ++i)  // insertion sort: stable, and no buffer for at most kMaxRank dims
    for (int j = i; j > 0 && std::abs(d[j - 1].s0) < std::abs(d[j].s0); --j) std::swap(d[j - 1], d[j]);
  int r = 0;
  for (int i = 0; i < n; ++i) {
    if (r > 0) {
      DimRun& p = d[r - 1];
      const bool merge = p.s0 == d[i].s0 * d[i].size && (sets < 2 || p.s1 == d[i].s1 * d[i].size) &&
                         (sets < 3 || p.s2 == d[i].s2 * d[i].size);
      if (merge) {
        p.size *= d[i].size;
        p.s0 = d[i].s0;
        p.s1 = d[i].s1;
        p.s2 = d[i].s2;
        continue;
      }
    }
    d[r++] = d[i];
  }
  return r;
}

// The accumulator element type of a kernel over T: bool is read as bytes.
template <typename T>
using int_or_v = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, compute_t<T>>;

}  // namespace forge::cpu
