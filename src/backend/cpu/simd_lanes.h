#pragma once
// The lane mask of a partial AVX-512 vector, shared by the kernels that run
// a row's tail under a mask (the GEMMs, the pools, im2col, argmax).

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

namespace forge::cpu {

// The first `valid` of 16 lanes: all of them from 16 up, none at 0 or below.
inline __mmask16 lanes16(std::int64_t valid) noexcept {
  return valid >= 16 ? __mmask16(0xFFFF) : valid <= 0 ? __mmask16(0) : __mmask16((1u << valid) - 1);
}

}  // namespace forge::cpu

#endif
