// 2x2, stride-2 max pool rows with AVX-512 (pool2x2.h).
//
// Policy: a step reads 32 inputs of each of the two rows (two vectors each),
// takes the column maxima, then splits even and odd columns with a two-
// source permute and takes their maxima: 16 outputs. The gradient splits the
// four corners of 16 windows the same way, picks each window's first
// maximum with mask arithmetic, and interleaves the four gradient vectors
// back into the two rows. Row tails run the same code under lane masks.

#include "backend/cpu/pool2x2.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "backend/cpu/simd_lanes.h"
#endif

namespace forge::cpu {

#if defined(__AVX512F__)

namespace {

// VMAXPS (the maskz form: GCC 12's plain one trips -Wmaybe-uninitialized).
__m512 max16(__m512 a, __m512 b) { return _mm512_maskz_max_ps(0xFFFF, a, b); }

// max(a, b) where a NaN in either wins: VMAXPS returns b when either is NaN.
__m512 nan_max(__m512 a, __m512 b) {
  return _mm512_mask_mov_ps(max16(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}

// 32 inputs from `row` starting at column 2 * ow, split into even and odd
// columns; lanes past the row's 2 * out_w inputs read as zero.
void load_pairs(const float* row, std::int64_t ow, std::int64_t out_w, __m512& even, __m512& odd) {
  const std::int64_t valid = 2 * (out_w - ow);
  const __m512 lo = _mm512_maskz_loadu_ps(lanes16(valid), row + 2 * ow);
  const __m512 hi = _mm512_maskz_loadu_ps(lanes16(valid - 16), row + 2 * ow + 16);
  const __m512i even_index = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_index = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  even = _mm512_permutex2var_ps(lo, even_index, hi);
  odd = _mm512_permutex2var_ps(lo, odd_index, hi);
}

// Writes the interleave of `even` and `odd` at row[2 * ow ...].
void store_pairs(float* row, std::int64_t ow, std::int64_t out_w, __m512 even, __m512 odd) {
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const std::int64_t valid = 2 * (out_w - ow);
  _mm512_mask_storeu_ps(row + 2 * ow, lanes16(valid), _mm512_permutex2var_ps(even, low, odd));
  _mm512_mask_storeu_ps(row + 2 * ow + 16, lanes16(valid - 16), _mm512_permutex2var_ps(even, high, odd));
}

}  // namespace

bool pool2x2_available() noexcept { return true; }

void max_pool_2x2_row(std::int64_t out_w, const float* r0, const float* r1, float* dst) noexcept {
  for (std::int64_t ow = 0; ow < out_w; ow += 16) {
    __m512 a, b, c, e;
    load_pairs(r0, ow, out_w, a, b);
    load_pairs(r1, ow, out_w, c, e);
    _mm512_mask_storeu_ps(dst + ow, lanes16(out_w - ow), nan_max(nan_max(a, b), nan_max(c, e)));
  }
}

bool max_pool_2x2_grad_row(std::int64_t out_w, const float* r0, const float* r1, const float* g, float* d0,
                           float* d1) noexcept {
  for (std::int64_t ow = 0; ow < out_w; ow += 16) {
    __m512 a, b, c, e;
    load_pairs(r0, ow, out_w, a, b);
    load_pairs(r1, ow, out_w, c, e);
    const __mmask16 nan = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, e, _CMP_UNORD_Q);
    if (nan) return false;
    const __m512 m = max16(max16(a, b), max16(c, e));
    const __mmask16 ta = _mm512_cmp_ps_mask(a, m, _CMP_EQ_OQ);
    const __mmask16 tb = _mm512_cmp_ps_mask(b, m, _CMP_EQ_OQ) & ~ta;
    const __mmask16 tc = _mm512_cmp_ps_mask(c, m, _CMP_EQ_OQ) & ~(ta | tb);
    const __mmask16 te = ~(ta | tb | tc);
    const __m512 gv = _mm512_maskz_loadu_ps(lanes16(out_w - ow), g + ow);
    store_pairs(d0, ow, out_w, _mm512_maskz_mov_ps(ta, gv), _mm512_maskz_mov_ps(tb, gv));
    store_pairs(d1, ow, out_w, _mm512_maskz_mov_ps(tc, gv), _mm512_maskz_mov_ps(te, gv));
  }
  return true;
}

#else

bool pool2x2_available() noexcept { return false; }
void max_pool_2x2_row(std::int64_t, const float*, const float*, float*) noexcept {}
bool max_pool_2x2_grad_row(std::int64_t, const float*, const float*, const float*, float*, float*) noexcept {
  return false;
}

#endif

}  // namespace forge::cpu
