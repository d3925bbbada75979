#pragma once
// Unchecked CPU kernels, reached through the cpu backend's table
// (backend/cpu/cpu_backend.cpp). Callers (the ops) have validated shapes,
// dtypes, bounds and aliasing; kernels never allocate their outputs.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/device_runtime.h"
#include "backend/kernels/copy.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::cpu {

// Below this many elements a kernel runs inline, spawning no task.
inline constexpr std::int64_t kGrainElements = 32768;

using backend::Operand;
using detail::DeviceRuntime;

// Runs run_item(item, slot) for items [0, items), split statically over
// `slots` (one per thread, each with its own leased scratch), inline when
// there is one slot.
template <typename Fn>
void run_by_slot(DeviceRuntime& rt, std::int64_t items, std::int64_t slots, Fn&& run_item) {
  if (slots <= 1) {
    for (std::int64_t i = 0; i < items; ++i) run_item(i, std::int64_t{0});
    return;
  }
  rt.parallel_for(slots, 1, [&](std::int64_t s0, std::int64_t s1) {
    for (std::int64_t s = s0; s < s1; ++s)
      for (std::int64_t i = items * s / slots; i < items * (s + 1) / slots; ++i) run_item(i, s);
  });
}

// dst[i] = convert(src[i]) over `shape`, any dtypes, any strides.
void copy_cast(DeviceRuntime& rt, const Shape& shape, const Operand& dst, const Operand& src);
// dst[i] = one element of dst's dtype (its bytes).
void fill(DeviceRuntime& rt, const Shape& shape, const Operand& dst, const std::byte* element);
// A packed tensor from a sequence or the generator (backend/kernels/copy.h), in element order.
void generate(DeviceRuntime& rt, DType dtype, std::int64_t n, std::byte* dst, const backend::SequenceSpec& spec,
              std::mt19937_64* generator);

// ---- the strided loop every elementwise kernel uses ----

// Drops size-1 dimensions and merges neighbours that are contiguous with each
// other in every operand, so most layouts become one or two dimensions.
template <int N>
struct StridedLoop {
  Shape shape;
  Strides strides[N];

  StridedLoop(const Shape& full, const Strides* const (&operand_strides)[N]) {
    for (int d = 0; d < full.rank(); ++d) {
      if (full[d] == 1) continue;
      const int r = shape.rank();
      bool merge = r > 0;
      for (int k = 0; k < N && merge; ++k) merge = strides[k][r - 1] == (*operand_strides[k])[d] * full[d];
      if (merge) {
        shape[r - 1] *= full[d];
        for (int k = 0; k < N; ++k) strides[k][r - 1] = (*operand_strides[k])[d];
      } else {
        shape.push_back(full[d]);
        for (int k = 0; k < N; ++k) strides[k].push_back((*operand_strides[k])[d]);
      }
    }
    if (shape.rank() == 0) {  // a single element
      shape.push_back(1);
      for (int k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  std::int64_t inner() const noexcept { return shape.back(); }

  // Element offsets of row `row` (all dims but the last) for every operand.
  void row_offsets(std::int64_t row, std::int64_t (&offsets)[N]) const noexcept {
    for (int k = 0; k < N; ++k) offsets[k] = 0;
    for (int d = shape.rank() - 2; d >= 0; --d) {
      const std::int64_t i = row % shape[d];
      row /= shape[d];
      for (int k = 0; k < N; ++k) offsets[k] += i * strides[k][d];
    }
  }
};

// Calls run(offsets, count) for runs of `count` consecutive inner elements
// (offsets in elements, one per operand), covering the loop once; splits the
// work over the runtime's threads above the grain, so a long contiguous run is
// cut into pieces too.
template <int N, typename RunFn>
void for_each_run(DeviceRuntime& rt, const StridedLoop<N>& loop, RunFn&& run) {
  const std::int64_t total = loop.shape.numel(), inner = loop.inner();
  if (total == 0) return;
  rt.parallel_for(total, kGrainElements, [&](std::int64_t begin, std::int64_t end) {
    std::int64_t row = begin / inner, col = begin % inner;
    for (std::int64_t pos = begin; pos < end; ++row, col = 0) {
      std::int64_t off[N];
      loop.row_offsets(row, off);
      const std::int64_t count = std::min(inner - col, end - pos);
      for (int k = 0; k < N; ++k) off[k] += col * loop.strides[k].back();
      run(off, count);
      pos += count;
    }
  });
}

// Like for_each_run over [begin, end) of the loop's positions, run inline
// (the caller splits the work); run(offsets, count, pos) also gets the
// logical position of the run's first element.
template <int N, typename RunFn>
void for_each_run_in(const StridedLoop<N>& loop, std::int64_t begin, std::int64_t end, RunFn&& run) {
  const std::int64_t inner = loop.inner();
  std::int64_t row = begin / inner, col = begin % inner;
  for (std::int64_t pos = begin; pos < end; ++row, col = 0) {
    std::int64_t off[N];
    loop.row_offsets(row, off);
    const std::int64_t count = std::min(inner - col, end - pos);
    for (int k = 0; k < N; ++k) off[k] += col * loop.strides[k].back();
    run(off, count, pos);
    pos += count;
  }
}

}  // namespace forge::cpu
