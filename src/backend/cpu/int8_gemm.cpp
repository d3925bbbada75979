// int8 GEMM with i32 accumulation, for cores with AVX512_VNNI.
//
// Policy:
// - VPDPBUSD multiplies four unsigned bytes by four signed bytes and adds the
//   four products to an i32 lane: 64 multiply-adds per instruction where an
//   f32 FMA does 16. So k runs in quads, and both packed operands keep a
//   quad in 32 bits: A's panels [kMR rows] hold A[r, 4q .. 4q + 3] per quad
//   step q, B's panels [kNR columns] B[4q .. 4q + 3, j]. A k that is not a
//   multiple of four pads its last quad with zeros.
// - B is s8; A is u8, or s8 packed as u8 by flipping its sign bit (a + 128).
//   Then sum (a + 128) b = sum a b + 128 sum b, so each packed B panel
//   carries 128 times its columns' sums (taken with VPDPBUSD against bytes
//   of 128), and a tile subtracts them when it is written. The products and
//   sums wrap modulo 2^32, so the result is exact whenever the true sum fits
//   in i32 (for any k up to 131072 with s8 A, 65793 with u8 A), and wraps as
//   two's complement beyond, as any i32 accumulation does.
// - The blocking and the 8 x 48 tile are sgemm.cpp's, with k blocks four
//   times as long (the same bytes of B per block). C is i32, row-major,
//   written or accumulated into. Only the packed mode exists.
// - Packing: the layouts whose quads are contiguous (A row-major, B column-
//   major, the x W^T of a linear layer) move them as 32-bit words with
//   sgemm's 8x8 transpose; a row-major B interleaves four rows with byte
//   and word unpacks; other layouts use scalar loops.
// - Without AVX512_VNNI this file holds a portable loop nest (i32 multiply-
//   adds the compiler vectorizes where B's rows are contiguous).

#include <algorithm>
#include <cstring>

#include "backend/cpu/sgemm.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define FORGE_INT8_VNNI 1
#include <immintrin.h>

#include <array>
#include <utility>

#include "backend/cpu/gemm_blocks.h"
#endif

namespace forge::cpu {

#if defined(FORGE_INT8_VNNI)

namespace {

using namespace gemm_blocks;

constexpr int kMR = 8;
constexpr int kNV = 3;
constexpr int kNR = kNV * 16;
constexpr std::int64_t kKC = 2048;  // values of k per block: 512 quads
constexpr std::int64_t kMC = 64;
constexpr std::int64_t kNC = 768;
constexpr std::uint32_t kSignBits = 0x80808080u;

// The tile's vectors as GCC's (and clang's) own 16 x i32 type: held in
// __m512i arrays, GCC 12 kept the 24 accumulators of an 8 x 48 tile on the
// stack across the k loop (183 against 393 GOP/s on one thread).
using Lanes = __v16si;

Lanes dpbusd(Lanes acc, Lanes u8, Lanes s8) {
  return reinterpret_cast<Lanes>(_mm512_dpbusd_epi32(reinterpret_cast<__m512i>(acc), reinterpret_cast<__m512i>(u8),
                                                     reinterpret_cast<__m512i>(s8)));
}

std::int64_t quads_of(std::int64_t kc) { return (kc + 3) / 4; }

// A B panel of `width` columns: `quads` steps of words, then its columns'
// 128-times sums.
std::int64_t panel_words(std::int64_t quads, std::int64_t width) { return (quads + 1) * width; }

// A micro-tile's store: C = acc - comp (=, or += when `accumulate`), the
// last vector of each row under `mask`; comp null subtracts nothing.
template <int MR, int NV>
void store_tile(const Lanes (&acc)[MR][NV], const std::int32_t* comp, __mmask16 mask, std::int32_t* c, std::int64_t ldc,
                bool accumulate) {
  __m512i sub[NV];
#pragma GCC unroll 3
  for (int v = 0; v < NV; ++v) sub[v] = comp ? _mm512_loadu_si512(comp + v * 16) : _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    std::int32_t* row = c + r * ldc;
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mk = v == NV - 1 ? mask : __mmask16(0xFFFF);
      __m512i x = _mm512_sub_epi32(reinterpret_cast<__m512i>(acc[r][v]), sub[v]);
      if (accumulate) x = _mm512_add_epi32(x, _mm512_maskz_loadu_epi32(mk, row + v * 16));
      _mm512_mask_storeu_epi32(row + v * 16, mk, x);
    }
  }
}

// C[MR, NV*16 (last vector masked)] (=, or += when `accumulate`) A B over
// `quads` steps of packed A (MR words per step) and B (NV vectors per step),
// less `comp` (the panel's column sums) when A was packed from s8.
template <int MR, int NV>
void int8_tile(std::int64_t quads, const std::uint32_t* __restrict a, const std::uint32_t* __restrict b,
               const std::int32_t* comp, __mmask16 mask, std::int32_t* __restrict c, std::int64_t ldc,
               bool accumulate) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + v * 16), _MM_HINT_T0);
  }
  Lanes acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[r][v] = Lanes{};
  }
  for (std::int64_t q = 0; q < quads; ++q) {
    Lanes bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) bv[v] = reinterpret_cast<Lanes>(_mm512_loadu_si512(b + v * 16));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const auto av = reinterpret_cast<Lanes>(_mm512_set1_epi32(static_cast<int>(a[r])));
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = dpbusd(acc[r][v], av, bv[v]);
    }
    a += MR;
    b += NV * 16;
  }
  store_tile(acc, comp, mask, c, ldc, accumulate);
}

using TileFn = void (*)(std::int64_t, const std::uint32_t*, const std::uint32_t*, const std::int32_t*, __mmask16,
                        std::int32_t*, std::int64_t, bool);

template <std::size_t... I>
constexpr std::array<TileFn, kMR * kNV> tile_table(std::index_sequence<I...>) {
  return {&int8_tile<static_cast<int>(I / kNV) + 1, static_cast<int>(I % kNV) + 1>...};
}
constexpr auto kTiles = tile_table(std::make_index_sequence<kMR * kNV>{});

// The quad of bytes x[0], x[s], x[2s], x[3s], zeros past `valid` of them.
std::uint32_t quad(const std::uint8_t* x, std::int64_t s, std::int64_t valid) {
  std::uint32_t w = 0;
  for (std::int64_t t = 0; t < std::min<std::int64_t>(valid, 4); ++t)
    w |= static_cast<std::uint32_t>(x[t * s]) << (8 * t);
  return w;
}

// A [mc, kc] into panels of kMR rows: panel[q * rows + r] = quad q of row r,
// sign bits flipped when A is s8.
void pack_a(std::int64_t mc, std::int64_t kc, const std::uint8_t* a, std::int64_t rs, std::int64_t cs, bool flip,
            std::uint32_t* dst) {
  const std::int64_t quads = quads_of(kc);
  std::uint32_t* const start = dst;
  for (std::int64_t i0 = 0; i0 < mc; i0 += kMR) {
    const std::int64_t rows = std::min<std::int64_t>(kMR, mc - i0);
    const std::uint8_t* src = a + i0 * rs;
    std::int64_t q = 0;
    if (rows == kMR && cs == 1 && rs % 4 == 0) {
      // Each row's quads are contiguous 32-bit words.
      for (; 4 * (q + 8) <= kc; q += 8)
        transpose8_block(reinterpret_cast<const std::uint32_t*>(src + 4 * q), rs / 4, dst + q * kMR, kMR);
    }
    for (; q < quads; ++q)
      for (std::int64_t r = 0; r < rows; ++r) dst[q * rows + r] = quad(src + r * rs + 4 * q * cs, cs, kc - 4 * q);
    dst += rows * quads;
  }
  if (!flip) return;
  const std::int64_t words = dst - start;
  std::int64_t w = 0;
  for (; w + 16 <= words; w += 16)
    _mm512_storeu_si512(start + w, _mm512_xor_si512(_mm512_loadu_si512(start + w), _mm512_set1_epi32(kSignBits)));
  for (; w < words; ++w) start[w] ^= kSignBits;
}

// Four rows of 16 bytes (row t null past k: zeros) interleaved into 16 quads.
__m512i quads16(const std::uint8_t* const (&rows)[4], __mmask16 mask) {
  __m128i x[4];
  for (int t = 0; t < 4; ++t) x[t] = rows[t] ? _mm_maskz_loadu_epi8(mask, rows[t]) : _mm_setzero_si128();
  const __m128i lo01 = _mm_unpacklo_epi8(x[0], x[1]), hi01 = _mm_unpackhi_epi8(x[0], x[1]);
  const __m128i lo23 = _mm_unpacklo_epi8(x[2], x[3]), hi23 = _mm_unpackhi_epi8(x[2], x[3]);
  __m512i out = _mm512_castsi128_si512(_mm_unpacklo_epi16(lo01, lo23));
  out = _mm512_inserti32x4(out, _mm_unpackhi_epi16(lo01, lo23), 1);
  out = _mm512_inserti32x4(out, _mm_unpacklo_epi16(hi01, hi23), 2);
  return _mm512_inserti32x4(out, _mm_unpackhi_epi16(hi01, hi23), 3);
}

// B [kc, nc] into panels of kNR columns, each quad step padded with zeros to
// whole vectors (panel[q * width + j] = B[4q .. 4q + 3, j]), each followed by
// 128 times its columns' sums when A is s8.
void pack_b(std::int64_t kc, std::int64_t nc, const std::int8_t* b, std::int64_t rs, std::int64_t cs, bool sums,
            std::uint32_t* dst) {
  const std::int64_t quads = quads_of(kc);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(b);
  for (std::int64_t j0 = 0; j0 < nc; j0 += kNR) {
    const std::int64_t cols = std::min<std::int64_t>(kNR, nc - j0);
    const std::int64_t width = round_up(cols, 16);
    const std::uint8_t* src = bytes + j0 * cs;
    if (cs == 1) {
      for (std::int64_t q = 0; q < quads; ++q) {
        const std::uint8_t* const rows[4] = {src + 4 * q * rs, 4 * q + 1 < kc ? src + (4 * q + 1) * rs : nullptr,
                                             4 * q + 2 < kc ? src + (4 * q + 2) * rs : nullptr,
                                             4 * q + 3 < kc ? src + (4 * q + 3) * rs : nullptr};
        for (std::int64_t v = 0; v < width; v += 16) {
          const std::uint8_t* const at[4] = {rows[0] + v, rows[1] ? rows[1] + v : nullptr,
                                             rows[2] ? rows[2] + v : nullptr, rows[3] ? rows[3] + v : nullptr};
          _mm512_storeu_si512(dst + q * width + v, quads16(at, lanes16(cols - v)));
        }
      }
    } else {
      std::int64_t j = 0, full = 0;
      if (rs == 1 && cs % 4 == 0) {
        // Each column's quads are contiguous 32-bit words.
        full = kc / 32 * 8;  // quad steps covered by whole 8x8 blocks
        for (; j + 8 <= cols; j += 8)
          for (std::int64_t q = 0; q < full; q += 8)
            transpose8_block(reinterpret_cast<const std::uint32_t*>(src + j * cs + 4 * q), cs / 4, dst + q * width + j,
                             width);
      }
      for (std::int64_t q = 0; q < quads; ++q) {
        for (std::int64_t jj = q < full ? j : 0; jj < cols; ++jj)
          dst[q * width + jj] = quad(src + jj * cs + 4 * q * rs, rs, kc - 4 * q);
        for (std::int64_t jj = cols; jj < width; ++jj) dst[q * width + jj] = 0;
      }
    }
    if (sums) {
      const __m512i bias = _mm512_set1_epi32(static_cast<int>(kSignBits));
      for (std::int64_t v = 0; v < width; v += 16) {
        __m512i s = _mm512_setzero_si512();
        for (std::int64_t q = 0; q < quads; ++q)
          s = _mm512_dpbusd_epi32(s, bias, _mm512_loadu_si512(dst + q * width + v));
        _mm512_storeu_si512(dst + quads * width + v, s);
      }
    }
    dst += panel_words(quads, width);
  }
}

}  // namespace

bool int8_gemm_available() noexcept { return true; }

std::size_t int8_gemm_scratch_bytes(std::int64_t m, std::int64_t n, std::int64_t k) noexcept {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const std::int64_t quads = quads_of(balanced_step(k, kKC, 64));
  const std::int64_t a_words = round_up(std::min(m, kMC) * quads, 16);
  return static_cast<std::size_t>(a_words + panel_words(quads, round_up(balanced_step(n, kNC, kNR), kNR))) * 4;
}

void int8_gemm(std::int64_t m, std::int64_t n, std::int64_t k, bool a_signed, const std::uint8_t* a, std::int64_t a_rs,
               std::int64_t a_cs, const std::int8_t* b, std::int64_t b_rs, std::int64_t b_cs, bool accumulate,
               std::int32_t* c, std::int64_t c_rs, void* scratch) noexcept {
  if (k == 1) a_cs = b_rs = 1;
  if (n == 1) b_cs = 1;
  if (m == 1) a_rs = 1;
  const std::int64_t kc_step = balanced_step(k, kKC, 64);
  const std::int64_t nc_step = balanced_step(n, kNC, kNR);
  auto* const abuf = static_cast<std::uint32_t*>(scratch);
  std::uint32_t* const bbuf = abuf + round_up(std::min(m, kMC) * quads_of(kc_step), 16);
  for_packed_blocks<kMR, kNR, kMC>(
      m, n, k, kc_step, nc_step,
      [&](std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc) {
        pack_b(kc, nc, b + pc * b_rs + jc * b_cs, b_rs, b_cs, a_signed, bbuf);
      },
      [&](std::int64_t ic, std::int64_t mc, std::int64_t pc, std::int64_t kc) {
        pack_a(mc, kc, a + ic * a_rs + pc * a_cs, a_rs, a_cs, a_signed, abuf);
      },
      [&](std::int64_t ic, std::int64_t ir, std::int64_t rows, std::int64_t jc, std::int64_t jr, std::int64_t cols,
          std::int64_t kc, bool first) {
        const std::int64_t quads = quads_of(kc);
        const std::int64_t vectors = (cols + 15) / 16;
        const std::uint32_t* panel = bbuf + (jr / kNR) * panel_words(quads, kNR);
        const auto* sums = a_signed ? reinterpret_cast<const std::int32_t*>(panel + quads * vectors * 16) : nullptr;
        kTiles[static_cast<std::size_t>((rows - 1) * kNV + (vectors - 1))](
            quads, abuf + ir * quads, panel, sums, lanes16(cols - (vectors - 1) * 16), c + (ic + ir) * c_rs + jc + jr,
            c_rs, first ? accumulate : true);
      });
}

#else  // no AVX512_VNNI: a portable loop nest

bool int8_gemm_available() noexcept { return false; }
std::size_t int8_gemm_scratch_bytes(std::int64_t, std::int64_t, std::int64_t) noexcept { return 0; }

void int8_gemm(std::int64_t m, std::int64_t n, std::int64_t k, bool a_signed, const std::uint8_t* a, std::int64_t a_rs,
               std::int64_t a_cs, const std::int8_t* b, std::int64_t b_rs, std::int64_t b_cs, bool accumulate,
               std::int32_t* c, std::int64_t c_rs, void*) noexcept {
  for (std::int64_t i = 0; i < m; ++i) {
    std::int32_t* row = c + i * c_rs;
    if (!accumulate) std::fill(row, row + n, 0);
    for (std::int64_t p = 0; p < k; ++p) {
      const std::uint8_t raw = a[i * a_rs + p * a_cs];
      const std::int32_t av = a_signed ? static_cast<std::int8_t>(raw) : raw;
      const std::int8_t* brow = b + p * b_rs;
      // Unsigned sums: i32 accumulation wraps as VPDPBUSD's does.
      const auto add = [&](std::int64_t j, std::int8_t bv) {
        row[j] = static_cast<std::int32_t>(static_cast<std::uint32_t>(row[j]) + static_cast<std::uint32_t>(av * bv));
      };
      if (b_cs == 1) {
        for (std::int64_t j = 0; j < n; ++j) add(j, brow[j]);
      } else {
        for (std::int64_t j = 0; j < n; ++j) add(j, brow[j * b_cs]);
      }
    }
  }
}

#endif

}  // namespace forge::cpu
