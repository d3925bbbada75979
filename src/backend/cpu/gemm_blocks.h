#pragma once
// Pieces the packed GEMMs (sgemm.cpp's f32, bf16_gemm.cpp's bf16,
// int8_gemm.cpp's int8) share: block sizing, the loop nest, the micro-tiles'
// start and store, and the 8x8 in-register transpose their packing uses.
// AVX-512 builds only.

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/simd_lanes.h"

namespace forge::cpu::gemm_blocks {

constexpr std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// Splits `extent` into equal steps of at most `cap` (a 300-long k runs as
// 150 + 150, not 256 + 44), rounded up to `align`.
inline std::int64_t balanced_step(std::int64_t extent, std::int64_t cap, std::int64_t align) {
  const std::int64_t blocks = (extent + cap - 1) / cap;
  return std::min(cap, round_up((extent + blocks - 1) / blocks, align));
}

// The packed GEMMs' loop nest (BLIS's): for each [kc, nc] block of B,
// pack_b(pc, kc, jc, nc) packs it; for each [mc, kc] block of A under it,
// pack_a(ic, mc, pc, kc); then tile(i, rows, j, cols, kc, first) runs the
// micro-tile at C[i, j] over every row panel (MR rows) and column panel (NR
// columns) of the block, `first` on the first k block (where beta applies).
template <std::int64_t MR, std::int64_t NR, std::int64_t MC, typename PackB, typename PackA, typename Tile>
void for_packed_blocks(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t kc_step, std::int64_t nc_step,
                       PackB&& pack_b, PackA&& pack_a, Tile&& tile) {
  for (std::int64_t jc = 0; jc < n; jc += nc_step) {
    const std::int64_t nc = std::min(nc_step, n - jc);
    for (std::int64_t pc = 0; pc < k; pc += kc_step) {
      const std::int64_t kc = std::min(kc_step, k - pc);
      pack_b(pc, kc, jc, nc);
      for (std::int64_t ic = 0; ic < m; ic += MC) {
        const std::int64_t mc = std::min(MC, m - ic);
        pack_a(ic, mc, pc, kc);
        for (std::int64_t ir = 0; ir < mc; ir += MR)
          for (std::int64_t jr = 0; jr < nc; jr += NR)
            tile(ic, ir, std::min(MR, mc - ir), jc, jr, std::min(NR, nc - jr), kc, pc == 0);
      }
    }
  }
}

// The lanes' sum, pairwise (GCC 12's _mm512_reduce_add_ps trips
// -Wmaybe-uninitialized in its own header).
inline float horizontal_sum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  for (int width = 8; width > 0; width /= 2)
    for (int i = 0; i < width; ++i) t[i] += t[i + width];
  return t[0];
}

// A micro-tile's start: its accumulators zeroed and C's tile asked for (it
// is read and written only after the k loop, and at large sizes its rows
// are misses to L3 or memory).
template <int MR, int NV>
inline void start_tile(__m512 (&acc)[MR][NV], const float* c, std::int64_t ldc) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + v * 16), _MM_HINT_T0);
      acc[r][v] = _mm512_setzero_ps();
    }
  }
}

// A micro-tile's store: C = alpha * acc + beta * C (beta == 0 ignores C's
// old contents), the last vector of each row under `mask`.
template <int MR, int NV>
inline void store_tile(const __m512 (&acc)[MR][NV], __mmask16 mask, float* c, std::int64_t ldc, float alpha,
                       float beta) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* row = c + r * ldc;
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mk = v == NV - 1 ? mask : __mmask16(0xFFFF);
      __m512 x = _mm512_mul_ps(acc[r][v], va);
      if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk, row + v * 16), x);
      _mm512_mask_storeu_ps(row + v * 16, mk, x);
    }
  }
}

// In-register transpose of eight 8-float rows.
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// dst[p * ld + q] = src[q * stride + p] for an 8x8 block of 32-bit
// elements (f32, or bf16 pairs); strides in elements of T.
template <typename T>
inline void transpose8_block(const T* src, std::int64_t stride, T* dst, std::int64_t ld) {
  static_assert(sizeof(T) == 4);
  __m256 r[8];
  for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + q * stride));
  transpose8(r);
  for (int p = 0; p < 8; ++p) _mm256_storeu_ps(reinterpret_cast<float*>(dst + p * ld), r[p]);
}

}  // namespace forge::cpu::gemm_blocks

#endif
