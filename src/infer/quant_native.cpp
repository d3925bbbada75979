// The native linear kernels: AVX-512, compiled where the build's -march has
// the instructions (FORGE_NATIVE: -march=native). Each format needs its own:
//   f32  AVX512F                  FMA on 16 lanes
//   bf16 AVX512BF16 + BW          _mm512_dpbf16_ps on pairs of bf16
//   q8_0 / q4_0 AVX512VNNI + BW + DQ  _mm512_dpbusd_epi32 (u8 x s8 -> s32)
// elsewhere available() is false for it and linear runs the portable kernel.
//
// Shape of the work: a call covers rows [n0, n1) of W (a task's share); it
// walks them a few at a time (kRows) and, for each group, every tile of up to
// kTileM rows of x, so that a group of weight rows is read from memory once
// and from L1 for the other tiles. Accumulators stay in registers: kRows x
// kTileM vectors, reduced once per output.
//
// q8_0 / q4_0: dpbusd multiplies unsigned bytes by signed ones, 4 to a lane.
//   q8_0: the weights stay signed and the activations become unsigned
//   (q + 128, Note [Activation rounding] in quant_kernels.cpp); each sum
//   starts at -128 * sum(w), computed once per weight block (one dpbusd
//   against ones) and shared by every row of x.
//   q4_0: the nibbles stay unsigned (0..15, value + 8) and the activations
//   signed; each sum starts at -8 * sum(x), computed once per call.
// Two blocks fill a 512-bit register; each lane's int32 sum is scaled by its
// block's d_w * d_x and accumulated in f32.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "infer/quant_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
// GCC 12 reports its own AVX-512 intrinsics as reading uninitialised lanes
// (their _mm512_undefined_* pass-through operands: false positives, as in
// src/backend/cpu/eigen.h); the warnings are off in this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define FORGE_QUANT_AVX512 1
#if defined(__AVX512VNNI__) && defined(__F16C__)
#define FORGE_QUANT_VNNI 1
#endif
#if defined(__AVX512BF16__)
#define FORGE_QUANT_BF16 1
#endif
#endif

namespace forge::infer::detail::native {

#ifdef FORGE_QUANT_AVX512
namespace {

// Horizontal sum and max of 16 lanes.
inline __m512 fold(__m512 v, __m512 (*op)(__m512, __m512)) noexcept {
  v = op(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = op(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = op(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
  return op(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
}
inline float sum16(__m512 v) noexcept {
  return _mm512_cvtss_f32(fold(v, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); }));
}
inline float max16(__m512 v) noexcept {
  return _mm512_cvtss_f32(fold(v, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); }));
}

// Rows [n, n + NR) of y for rows [m0, m0 + MT) of x, from per-(row, m) accumulators.
template <int MT, int NR>
inline void store(const LinearProblem& p, std::int64_t n, std::int64_t m0, __m512 (&acc)[NR][MT]) noexcept {
  for (int r = 0; r < NR; ++r) {
    const float b = p.bias ? p.bias[n + r] : 0.0f;
    for (int i = 0; i < MT; ++i) p.y[(m0 + i) * p.n + n + r] = sum16(acc[r][i]) + b;
  }
}

// Rows [m0, m0 + mt) of x against rows [n, n + NR) of W: the tile<MT, NR>
// of K with MT = mt (1 <= mt <= K::kTileM).
template <class K, int NR, int... I>
void tile_of_height(const K& k, const LinearProblem& p, std::int64_t n, std::int64_t m0, std::int64_t mt,
                    std::integer_sequence<int, I...>) noexcept {
  (void)((mt == I + 1 && (k.template tile<I + 1, NR>(p, n, m0), true)) || ...);
}

// Walks rows [n0, n1) of W in groups of K::kRows (then one at a time) and,
// for each group, every tile of up to K::kTileM rows of x.
template <class K>
void drive(const K& k, const LinearProblem& p, std::int64_t n0, std::int64_t n1) noexcept {
  auto group = [&]<int NR>(std::integral_constant<int, NR>, std::int64_t n) {
    for (std::int64_t m0 = 0; m0 < p.m; m0 += K::kTileM)
      tile_of_height<K, NR>(k, p, n, m0, std::min<std::int64_t>(K::kTileM, p.m - m0),
                            std::make_integer_sequence<int, K::kTileM>{});
  };
  std::int64_t n = n0;
  for (; n + K::kRows <= n1; n += K::kRows) group(std::integral_constant<int, K::kRows>{}, n);
  for (; n < n1; ++n) group(std::integral_constant<int, 1>{}, n);
}

// ---- f32: y = x . w over 16 lanes, the tail masked ----
struct F32Kernel {
  static constexpr int kRows = 4, kTileM = 4;
  template <int MT, int NR>
  void tile(const LinearProblem& p, std::int64_t n, std::int64_t m0) const noexcept {
    __m512 acc[NR][MT];
    for (auto& row : acc)
      for (auto& a : row) a = _mm512_setzero_ps();
    const float* w[NR];
    for (int r = 0; r < NR; ++r) w[r] = reinterpret_cast<const float*>(p.w + (n + r) * p.w_row_bytes);
    const float* x = p.x + m0 * p.k;
    for (std::int64_t j = 0; j < p.k; j += 16) {
      const __mmask16 mask = p.k - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (p.k - j)) - 1);
      __m512 wv[NR];
      for (int r = 0; r < NR; ++r) wv[r] = _mm512_maskz_loadu_ps(mask, w[r] + j);
      for (int i = 0; i < MT; ++i) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * p.k + j);
        for (int r = 0; r < NR; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
      }
    }
    store(p, n, m0, acc);
  }
};

#ifdef FORGE_QUANT_BF16
// ---- bf16: x rounded to bf16 (scratch rows padded to 32 with zeros) ----
std::int64_t bf16_stride(std::int64_t k) noexcept { return (k + 31) / 32 * 32; }

struct Bf16Kernel {
  static constexpr int kRows = 4, kTileM = 4;
  const std::uint16_t* xb;
  template <int MT, int NR>
  void tile(const LinearProblem& p, std::int64_t n, std::int64_t m0) const noexcept {
    __m512 acc[NR][MT];
    for (auto& row : acc)
      for (auto& a : row) a = _mm512_setzero_ps();
    const std::int64_t stride = bf16_stride(p.k);
    const std::uint16_t* w[NR];
    for (int r = 0; r < NR; ++r) w[r] = reinterpret_cast<const std::uint16_t*>(p.w + (n + r) * p.w_row_bytes);
    const std::uint16_t* x = xb + m0 * stride;
    for (std::int64_t j = 0; j < p.k; j += 32) {
      const __mmask32 mask = p.k - j >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << (p.k - j)) - 1);
      __m512i wv[NR];
      for (int r = 0; r < NR; ++r) wv[r] = _mm512_maskz_loadu_epi16(mask, w[r] + j);
      for (int i = 0; i < MT; ++i) {
        const __m512i xv = _mm512_load_si512(x + i * stride + j);
        for (int r = 0; r < NR; ++r) acc[r][i] = _mm512_dpbf16_ps(acc[r][i], (__m512bh)xv, (__m512bh)wv[r]);
      }
    }
    store(p, n, m0, acc);
  }
};

void prepare_bf16(const LinearProblem& p, std::byte* scratch) noexcept {
  const std::int64_t stride = bf16_stride(p.k);
  for (std::int64_t i = 0; i < p.m; ++i) {
    const float* x = p.x + i * p.k;
    auto* out = reinterpret_cast<std::uint16_t*>(scratch) + i * stride;
    for (std::int64_t j = 0; j < stride; j += 32) {
      const std::int64_t left = std::max<std::int64_t>(0, p.k - j);
      const __mmask16 lo = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
      const __mmask16 hi = left >= 32 ? __mmask16(0xffff) : left <= 16 ? 0 : __mmask16((1u << (left - 16)) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(lo, x + j), b = _mm512_maskz_loadu_ps(hi, x + j + 16);
      // Nearest even, as BFloat16::from_float: the pair (b, a) packs a into the low half.
      _mm512_store_si512(out + j, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
  }
}
#endif  // FORGE_QUANT_BF16

#ifdef FORGE_QUANT_VNNI
// ---- q8_0 / q4_0 ----
// Scratch, per pair of blocks and row of x (an odd last block is paired with
// zeros, which contribute 0): 64 bytes of rounded x, 16 lanes of d_x, and
// for q4_0 16 int32 lanes of -8 * sum(x). Pair-major, so that a tile's
// vectors for one pair lie side by side (one pointer for all its rows).
//   q8_0: x as u8 (q + 128) in order; lanes 0-7 hold block 0's d_x, 8-15 block 1's.
//   q4_0: x as s8 in the order the nibbles unpack to ([0:16] of both blocks,
//   then [16:32] of both); lanes 0-3 and 8-11 block 0's d_x, 4-7 and 12-15 block 1's.
// q4_0 leaves the nibbles unsigned (0..15) and takes 8 * sum(x) off instead.
std::int64_t block_pairs(std::int64_t k) noexcept { return (k / kBlockValues + 1) / 2; }

struct BlockScratch {
  std::uint8_t* xq;
  float* xd;
  std::int32_t* xc;
};

BlockScratch block_scratch(const LinearProblem& p, const std::byte* scratch) noexcept {
  const auto vectors = static_cast<std::size_t>(p.m * block_pairs(p.k));
  auto* base = const_cast<std::byte*>(scratch);
  return {reinterpret_cast<std::uint8_t*>(base), reinterpret_cast<float*>(base + vectors * 64),
          reinterpret_cast<std::int32_t*>(base + vectors * 128)};
}

template <bool Q4>
struct BlockKernel {
  static constexpr int kRows = 2, kTileM = 8;
  BlockScratch x;

  static float scale(const std::byte* row, std::int64_t b) noexcept {
    constexpr std::size_t bytes = Q4 ? sizeof(BlockQ4) : sizeof(BlockQ8);
    return _cvtsh_ss(reinterpret_cast<const BlockScale*>(row + b * bytes)->d());
  }

  // Blocks 2 bp and 2 bp + 1 of `row` (the second zero past the end): the
  // bytes (q8_0: signed; q4_0: nibbles), each lane's d_w, and for q8_0 the
  // start of each sum, -128 * its lane's 4 weights.
  static void load(const std::byte* row, std::int64_t nb, std::int64_t bp, __m512i& w, __m512& dw,
                   __m512i& start) noexcept {
    const std::int64_t b = 2 * bp;
    const bool pair = b + 1 < nb;
    const float d0 = scale(row, b), d1 = pair ? scale(row, b + 1) : 0.0f;
    if constexpr (Q4) {
      const auto* blk = reinterpret_cast<const BlockQ4*>(row) + b;
      const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[0].qs));
      const __m128i v1 = pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[1].qs)) : _mm_setzero_si128();
      const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v0), v1, 1);
      const __m256i low = _mm256_set1_epi8(0x0f);
      const __m256i lo = _mm256_and_si256(both, low), hi = _mm256_and_si256(_mm256_srli_epi16(both, 4), low);
      w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      dw = _mm512_broadcast_f32x8(_mm256_insertf128_ps(_mm256_set1_ps(d0), _mm_set1_ps(d1), 1));
    } else {
      const auto* blk = reinterpret_cast<const BlockQ8*>(row) + b;
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
      const __m256i v1 =
          pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs)) : _mm256_setzero_si256();
      w = _mm512_inserti64x4(_mm512_castsi256_si512(v0), v1, 1);
      dw = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
      const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), w);
      start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
    }
  }

  template <int MT, int NR>
  void tile(const LinearProblem& p, std::int64_t n, std::int64_t m0) const noexcept {
    __m512 acc[NR][MT];
    for (auto& row : acc)
      for (auto& a : row) a = _mm512_setzero_ps();
    const std::int64_t nb = p.k / kBlockValues, pairs = block_pairs(p.k);
    for (std::int64_t bp = 0; bp < pairs; ++bp) {
      __m512i w[NR], start[NR];
      __m512 dw[NR];
      for (int r = 0; r < NR; ++r) load(p.w + (n + r) * p.w_row_bytes, nb, bp, w[r], dw[r], start[r]);
      // This pair's vectors for rows m0.. of x, side by side.
      const std::uint8_t* xq = x.xq + (bp * p.m + m0) * 64;
      const float* xd = x.xd + (bp * p.m + m0) * 16;
      const std::int32_t* xc = x.xc + (bp * p.m + m0) * 16;
      for (int i = 0; i < MT; ++i) {
        const __m512i xv = _mm512_load_si512(xq + i * 64);
        const __m512 dx = _mm512_load_ps(xd + i * 16);
        for (int r = 0; r < NR; ++r) {
          const __m512i s = Q4 ? _mm512_dpbusd_epi32(_mm512_load_si512(xc + i * 16), w[r], xv)
                               : _mm512_dpbusd_epi32(start[r], xv, w[r]);
          acc[r][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[r], dx), acc[r][i]);
        }
      }
    }
    store(p, n, m0, acc);
  }
};

// One block of 32 activations: the same d and q as quantize_activation_block.
float round_block(const float* x, __m128i& q_lo, __m128i& q_hi) noexcept {
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  constexpr int kNanOrInf = 0x01 | 0x08 | 0x10 | 0x80;
  const bool finite = (_mm512_fpclass_ps_mask(a, kNanOrInf) | _mm512_fpclass_ps_mask(b, kNanOrInf)) == 0;
  const float amax = max16(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float d = amax / 127.0f;
  if (!finite || !(d >= FLT_MIN)) {
    q_lo = q_hi = _mm_setzero_si128();
    return finite ? 0.0f : NAN;
  }
  const __m512 id = _mm512_set1_ps(1.0f / d);
  q_lo = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, id)));
  q_hi = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, id)));
  return d;
}

void prepare_blocks(const LinearProblem& p, std::byte* scratch) noexcept {
  const bool q4 = p.format == WeightFormat::q4_0;
  const std::int64_t nb = p.k / kBlockValues, pairs = block_pairs(p.k);
  const BlockScratch x = block_scratch(p, scratch);
  const __m128i bias128 = _mm_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t bp = 0; bp < pairs; ++bp) {
      const std::int64_t v = bp * p.m + i;
      std::uint8_t* q = x.xq + v * 64;
      float* d = x.xd + v * 16;
      for (int h = 0; h < 2; ++h) {  // the pair's two blocks
        const std::int64_t b = 2 * bp + h;
        __m128i lo = _mm_setzero_si128(), hi = _mm_setzero_si128();
        const float db = b < nb ? round_block(p.x + i * p.k + b * kBlockValues, lo, hi) : 0.0f;
        if (q4) {
          _mm_store_si128(reinterpret_cast<__m128i*>(q + 16 * h), lo);
          _mm_store_si128(reinterpret_cast<__m128i*>(q + 32 + 16 * h), hi);
          std::fill_n(d + 4 * h, 4, db);
          std::fill_n(d + 8 + 4 * h, 4, db);
        } else {
          _mm_store_si128(reinterpret_cast<__m128i*>(q + 32 * h), _mm_xor_si128(lo, bias128));
          _mm_store_si128(reinterpret_cast<__m128i*>(q + 32 * h + 16), _mm_xor_si128(hi, bias128));
          std::fill_n(d + 8 * h, 8, db);
        }
      }
      if (q4) {
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_load_si512(q));
        _mm512_store_si512(x.xc + v * 16, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3)));
      }
    }
  }
}
#endif  // FORGE_QUANT_VNNI

}  // namespace
#endif  // FORGE_QUANT_AVX512

bool available([[maybe_unused]] WeightFormat format) noexcept {
  switch (format) {
#ifdef FORGE_QUANT_AVX512
    case WeightFormat::f32:
      return true;
#endif
#ifdef FORGE_QUANT_BF16
    case WeightFormat::bf16:
      return true;
#endif
#ifdef FORGE_QUANT_VNNI
    case WeightFormat::q8_0:
    case WeightFormat::q4_0:
      return true;
#endif
    default:
      return false;
  }
}

std::size_t scratch_bytes([[maybe_unused]] const LinearProblem& p) noexcept {
#ifdef FORGE_QUANT_BF16
  if (p.format == WeightFormat::bf16) return static_cast<std::size_t>(p.m * bf16_stride(p.k)) * 2;
#endif
#ifdef FORGE_QUANT_VNNI
  if (p.format == WeightFormat::q8_0 || p.format == WeightFormat::q4_0) {
    return static_cast<std::size_t>(p.m * block_pairs(p.k)) * 192;  // 64 bytes each of xq, xd, xc
  }
#endif
  return 0;
}

void prepare_activations([[maybe_unused]] const LinearProblem& p, [[maybe_unused]] std::byte* scratch) noexcept {
#ifdef FORGE_QUANT_BF16
  if (p.format == WeightFormat::bf16) prepare_bf16(p, scratch);
#endif
#ifdef FORGE_QUANT_VNNI
  if (p.format == WeightFormat::q8_0 || p.format == WeightFormat::q4_0) prepare_blocks(p, scratch);
#endif
}

void compute_rows([[maybe_unused]] const LinearProblem& p, [[maybe_unused]] const std::byte* scratch,
                  [[maybe_unused]] std::int64_t n0, [[maybe_unused]] std::int64_t n1) noexcept {
  switch (p.format) {
#ifdef FORGE_QUANT_AVX512
    case WeightFormat::f32:
      drive(F32Kernel{}, p, n0, n1);
      return;
#endif
#ifdef FORGE_QUANT_BF16
    case WeightFormat::bf16:
      drive(Bf16Kernel{reinterpret_cast<const std::uint16_t*>(scratch)}, p, n0, n1);
      return;
#endif
#ifdef FORGE_QUANT_VNNI
    case WeightFormat::q8_0:
      drive(BlockKernel<false>{block_scratch(p, scratch)}, p, n0, n1);
      return;
    case WeightFormat::q4_0:
      drive(BlockKernel<true>{block_scratch(p, scratch)}, p, n0, n1);
      return;
#endif
    default:
      return;  // unreachable: linear asks only for what available() offers
  }
}

}  // namespace forge::infer::detail::native
