// bf16 GEMM with f32 accumulation, for cores with AVX512_BF16.
//
// Policy:
// - VDPBF16PS multiplies pairs of bf16 along k and adds both products to an
//   f32 lane: 32 multiply-adds per instruction where an f32 FMA does 16. So
//   k runs in pairs, and both packed operands keep a pair in 32 bits: A's
//   panels [kMR rows] hold (A[r, 2q], A[r, 2q + 1]) per pair step q, B's
//   panels [kNR columns] (B[2q, j], B[2q + 1, j]). An odd k pads its last
//   pair with a zero.
// - The blocking and the 8 x 48 tile are sgemm.cpp's, with k blocks twice
//   as long (the same bytes of B per block); C is f32, written with alpha and
//   beta as sgemm does. Only the packed mode exists: a flat bf16 product packs
//   B too.
// - Packing widens 16-bit halves into 32-bit pairs with vector shifts; the
//   two layouts whose pairs are contiguous in memory (A row-major, B column-
//   major) move them with sgemm's 8x8 transpose, as 32-bit elements.
// - The instruction treats subnormal inputs as zero and flushes subnormal
//   results (Intel's definition of VDPBF16PS); the widening f32 path that
//   builds without AVX512_BF16 use keeps them.

#include <algorithm>
#include <cstring>

#include "backend/cpu/sgemm.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>

#include <array>
#include <utility>

#include "backend/cpu/gemm_blocks.h"
#endif

namespace forge::cpu {

#if defined(__AVX512BF16__)

namespace {

using namespace gemm_blocks;

constexpr int kMR = 8;
constexpr int kNV = 3;
constexpr int kNR = kNV * 16;
constexpr std::int64_t kKC = 1024;  // bf16 values of k per block: 512 pairs
constexpr std::int64_t kMC = 64;
constexpr std::int64_t kNC = 768;

std::uint32_t pair(std::uint16_t lo, std::uint16_t hi) { return lo | static_cast<std::uint32_t>(hi) << 16; }

// C[MR, NV*16 (last vector masked)] = alpha * A B + beta * C over `pairs`
// pair steps of packed A (MR pairs per step) and B (NV vectors per step).
template <int MR, int NV>
void bf16_tile(std::int64_t pairs, const std::uint32_t* __restrict a, const std::uint32_t* __restrict b, __mmask16 mask,
               float* __restrict c, std::int64_t ldc, float alpha, float beta) {
  __m512 acc[MR][NV];
  start_tile(acc, c, ldc);
  for (std::int64_t q = 0; q < pairs; ++q) {
    __m512bh bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + v * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
    a += MR;
    b += NV * 16;
  }
  store_tile(acc, mask, c, ldc, alpha, beta);
}

using TileFn = void (*)(std::int64_t, const std::uint32_t*, const std::uint32_t*, __mmask16, float*, std::int64_t,
                        float, float);

template <std::size_t... I>
constexpr std::array<TileFn, kMR * kNV> tile_table(std::index_sequence<I...>) {
  return {&bf16_tile<static_cast<int>(I / kNV) + 1, static_cast<int>(I % kNV) + 1>...};
}
constexpr auto kTiles = tile_table(std::make_index_sequence<kMR * kNV>{});

// 16 pairs from two runs of 16 bf16 (hi may be null: zeros), under `mask`.
// (The maskz forms: GCC 12's plain ones trip -Wmaybe-uninitialized.)
__m512i pairs16(const std::uint16_t* lo, const std::uint16_t* hi, __mmask16 mask) {
  const __m512i l = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(mask, lo));
  if (!hi) return l;
  const __m512i h = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(mask, hi));
  return _mm512_or_si512(l, _mm512_maskz_slli_epi32(0xFFFF, h, 16));
}

// A [mc, kc] into panels of kMR rows: panel[q * rows + r] = pair q of row r.
void pack_a(std::int64_t mc, std::int64_t kc, const std::uint16_t* a, std::int64_t rs, std::int64_t cs,
            std::uint32_t* dst) {
  const std::int64_t pairs = (kc + 1) / 2;
  for (std::int64_t i0 = 0; i0 < mc; i0 += kMR) {
    const std::int64_t rows = std::min<std::int64_t>(kMR, mc - i0);
    const std::uint16_t* src = a + i0 * rs;
    std::int64_t q = 0;
    if (rows == kMR && cs == 1 && rs % 2 == 0) {
      // Each row's pairs are contiguous 32-bit words.
      for (; 2 * (q + 8) <= kc; q += 8)
        transpose8_block(reinterpret_cast<const std::uint32_t*>(src + 2 * q), rs / 2, dst + q * kMR, kMR);
    } else if (rows == kMR && rs == 1) {
      for (; 2 * q + 1 < kc; ++q)
        _mm512_mask_storeu_epi32(dst + q * kMR, 0xFF, pairs16(src + 2 * q * cs, src + (2 * q + 1) * cs, 0xFF));
    }
    for (; q < pairs; ++q)
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::uint16_t lo = src[r * rs + 2 * q * cs];
        const std::uint16_t hi = 2 * q + 1 < kc ? src[r * rs + (2 * q + 1) * cs] : 0;
        dst[q * rows + r] = pair(lo, hi);
      }
    dst += rows * pairs;
  }
}

// B [kc, nc] into panels of kNR columns, each pair step padded with zeros to
// whole vectors: panel[q * width + j] = (B[2q, j], B[2q + 1, j]).
void pack_b(std::int64_t kc, std::int64_t nc, const std::uint16_t* b, std::int64_t rs, std::int64_t cs,
            std::uint32_t* dst) {
  const std::int64_t pairs = (kc + 1) / 2;
  for (std::int64_t j0 = 0; j0 < nc; j0 += kNR) {
    const std::int64_t cols = std::min<std::int64_t>(kNR, nc - j0);
    const std::int64_t width = round_up(cols, 16);
    const std::uint16_t* src = b + j0 * cs;
    if (cs == 1) {
      for (std::int64_t q = 0; q < pairs; ++q) {
        const std::uint16_t* lo = src + 2 * q * rs;
        const std::uint16_t* hi = 2 * q + 1 < kc ? lo + rs : nullptr;
        for (std::int64_t v = 0; v < width; v += 16)
          _mm512_storeu_si512(dst + q * width + v, pairs16(lo + v, hi ? hi + v : nullptr, lanes16(cols - v)));
      }
    } else {
      std::int64_t j = 0, full = 0;
      if (rs == 1 && cs % 2 == 0) {
        // Each column's pairs are contiguous 32-bit words.
        full = kc / 16 * 8;  // pair steps covered by whole 8x8 blocks
        for (; j + 8 <= cols; j += 8)
          for (std::int64_t q = 0; q < full; q += 8)
            transpose8_block(reinterpret_cast<const std::uint32_t*>(src + j * cs + 2 * q), cs / 2, dst + q * width + j,
                             width);
      }
      for (std::int64_t q = 0; q < pairs; ++q) {
        for (std::int64_t jj = q < full ? j : 0; jj < cols; ++jj) {
          const std::uint16_t lo = src[2 * q * rs + jj * cs];
          const std::uint16_t hi = 2 * q + 1 < kc ? src[(2 * q + 1) * rs + jj * cs] : 0;
          dst[q * width + jj] = pair(lo, hi);
        }
        for (std::int64_t jj = cols; jj < width; ++jj) dst[q * width + jj] = 0;
      }
    }
    dst += width * pairs;
  }
}

}  // namespace

bool bf16_gemm_available() noexcept { return true; }

std::size_t bf16_gemm_scratch_floats(std::int64_t m, std::int64_t n, std::int64_t k) noexcept {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const std::int64_t pairs = (balanced_step(k, kKC, 16) + 1) / 2;
  const std::int64_t a_words = round_up(std::min(m, kMC) * pairs, 16);
  return static_cast<std::size_t>(a_words + pairs * round_up(balanced_step(n, kNC, kNR), kNR));
}

void bf16_gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a, std::int64_t a_rs,
               std::int64_t a_cs, const std::uint16_t* b, std::int64_t b_rs, std::int64_t b_cs, float beta, float* c,
               std::int64_t c_rs, float* scratch) noexcept {
  if (k == 1) a_cs = b_rs = 1;
  if (n == 1) b_cs = 1;
  if (m == 1) a_rs = 1;
  const std::int64_t kc_step = balanced_step(k, kKC, 16);
  const std::int64_t nc_step = balanced_step(n, kNC, kNR);
  auto* const abuf = reinterpret_cast<std::uint32_t*>(scratch);
  std::uint32_t* const bbuf = abuf + round_up(std::min(m, kMC) * ((kc_step + 1) / 2), 16);
  for_packed_blocks<kMR, kNR, kMC>(
      m, n, k, kc_step, nc_step,
      [&](std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc) {
        pack_b(kc, nc, b + pc * b_rs + jc * b_cs, b_rs, b_cs, bbuf);
      },
      [&](std::int64_t ic, std::int64_t mc, std::int64_t pc, std::int64_t kc) {
        pack_a(mc, kc, a + ic * a_rs + pc * a_cs, a_rs, a_cs, abuf);
      },
      [&](std::int64_t ic, std::int64_t ir, std::int64_t rows, std::int64_t jc, std::int64_t jr, std::int64_t cols,
          std::int64_t kc, bool first) {
        const std::int64_t pairs = (kc + 1) / 2;
        const std::int64_t vectors = (cols + 15) / 16;
        kTiles[static_cast<std::size_t>((rows - 1) * kNV + (vectors - 1))](
            pairs, abuf + ir * pairs, bbuf + jr * pairs, lanes16(cols - (vectors - 1) * 16),
            c + (ic + ir) * c_rs + jc + jr, c_rs, alpha, first ? beta : 1.0f);
      });
}

#else  // no AVX512_BF16: gemm.cpp widens bf16 to f32

bool bf16_gemm_available() noexcept { return false; }
std::size_t bf16_gemm_scratch_floats(std::int64_t, std::int64_t, std::int64_t) noexcept { return 0; }
void bf16_gemm(std::int64_t, std::int64_t, std::int64_t, float, const std::uint16_t*, std::int64_t, std::int64_t,
               const std::uint16_t*, std::int64_t, std::int64_t, float, float*, std::int64_t, float*) noexcept {}

#endif

}  // namespace forge::cpu
