#pragma once
// Per-element math of the cuda backend's dropout and attention kernels
// (attention_kernels.cu), as plain C++ that tests/cuda_kernel_math_test.cpp
// checks on the host.
//
// dropout's mask is the cpu's (cpu/attention_kernels.cpp), bit for bit:
// element i is kept when the top 53 bits of splitmix64's finalizer over
// seed + i * 0x9e3779b97f4a7c15 are >= p * 2^53, so a seed drops the same
// elements on either device.

#include <math.h>

#include <cstdint>
#include <limits>

#include "backend/cuda/device_math.h"

namespace forge::cuda {

// splitmix64's finalizer: a bijection that mixes every input bit into every output bit.
FORGE_HD inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The keep threshold of drop probability p in [0, 1): p * 2^53.
inline std::uint64_t dropout_threshold(double p) noexcept { return static_cast<std::uint64_t>(::ldexp(p, 53)); }

// Whether dropout with `seed` keeps element i (its logical, row-major position).
FORGE_HD inline bool dropout_keeps(std::uint64_t seed, std::uint64_t i, std::uint64_t threshold) noexcept {
  return (mix64(seed + i * 0x9e3779b97f4a7c15ull) >> 11) >= threshold;
}

// One attention score: dot * scale + add, or -inf for a key masked out (a
// causal j > i, or a boolean mask's false); `add` is an additive mask's
// value (0 without one).
template <typename A>
FORGE_HD inline A attention_score(A dot, A scale, bool keep, A add) noexcept {
  return keep ? dot * scale + add : -std::numeric_limits<A>::infinity();
}

}  // namespace forge::cuda
