// f32 GEMM for AVX-512 cores.
//
// Policy:
// - Four shapes of work, chosen by m, the operands' layouts and sizes:
//   * packed (the general case, BLIS's loop nest): B is packed a [kc, nc]
//     block at a time into panels of kNR columns (held in L2), A a [mc, kc]
//     block at a time into panels of kMR rows; each A panel stays in L1
//     while the micro-kernel sweeps it across every B panel of the block.
//   * direct (m <= kDirectRows, B row-major): B is read in place, each kNR
//     column strip once from memory for every row panel of A (the first
//     panel prefetching the next strip's rows); packing B would cost as
//     much memory traffic as the product itself.
//   * rows (m <= kRowsMaxM, B row-major, k >= kRowsMinK and this call's
//     B at least kRowsMinB elements: gemm.cpp splits C's columns over the
//     threads first, so that is each thread's slice): C's rows (in L2)
//     take kRowsG rows of B at a time, each B row read from start to end,
//     so that B streams at the read rate (Note [flat products along B's
//     rows]).
//   * dot (m <= kDirectRows, A row-major and B column-major: x W^T with W
//     [n, k] as a linear layer stores it): each output is a dot product of
//     two contiguous rows, kDotJ rows of W at a time against kDotI rows of A,
//     W read once from memory. This is the decoding step's product.
// - The micro-kernel keeps an [kMR, kNR] = [8, 48] tile of C in 24 zmm
//   registers: per k it loads three vectors of B, broadcasts eight values of
//   A and issues 24 FMAs (12 cycles on two FMA pipes, 11 loads). Edge tiles
//   run narrower instantiations (fewer rows, fewer vectors, a lane mask on
//   the last vector); nothing is computed into a temporary tile. A last
//   column panel of at most kNarrowCols columns runs narrow_tile instead,
//   vectorized down its 8 rows (each column of C written back lane by
//   lane from a small buffer).
// - sgemm_fill_b runs the packed loop nest with B's panels written by its
//   caller and A optionally packed once for many calls (conv2d's path);
//   sgemm_prepacked runs it over one block of both operands packed whole
//   by the caller (conv_winograd.cpp's 16 products per chunk of tiles).
// - Packing transposes 8x8 blocks in registers for the two layouts that need
//   a transpose (A row-major, B column-major); other layouts copy vectors or
//   fall back to scalar loops.
// - beta and alpha are applied when a tile is written, on the first k block
//   only for beta: C is read and written once per k block, never scaled in a
//   separate pass. The rows mode is the exception: it scales (or zeroes) C
//   once up front and folds alpha into A's broadcasts, since it reads and
//   writes C once per kRowsG rows of B anyway.
// - What the measurements chose (gemm_compare, Zen 5): k blocks of kKC = 512
//   rather than 256 (C's tile is loaded and stored half as often: +5-8 %);
//   prefetching the tile of C when a micro-kernel starts (its rows are
//   misses to L3 or memory at large sizes: +10 % at 2048^3 on two threads);
//   walking a column-major A step by step across all its panels when
//   packing (one line per step rather than one per step and panel: the dW
//   product of an MLP layer went from 0.76x to 1.9x OpenBLAS).
// - Without AVX-512 this file compiles to `sgemm_available() == false` and
//   gemm.cpp uses Eigen (the FORGE_NATIVE=OFF build, x86-64-v3).

#include "backend/cpu/sgemm.h"

#include <algorithm>

#include "backend/cpu/gemm_blocks.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <array>
#include <utility>
#endif

namespace forge::cpu {

#if defined(__AVX512F__)

namespace {

using namespace gemm_blocks;

constexpr int kMR = 8;
constexpr int kNV = 3;  // zmm vectors across a micro-tile
constexpr int kNR = kNV * 16;
static_assert(kNR == kSgemmPanelCols, "sgemm.h publishes the panel width");
constexpr std::int64_t kKC = 512;
constexpr std::int64_t kMC = 64;   // multiple of kMR
constexpr std::int64_t kNC = 768;  // multiple of kNR
static_assert(kKC == kSgemmMaxKc && kNC == kSgemmMaxNc, "sgemm.h publishes the block limits");
constexpr std::int64_t kDirectRows = 16;
constexpr int kDotI = 4, kDotJ = 6;
constexpr std::int64_t kDotK = 256;
constexpr std::int64_t kDotPrefetch = 512;
// B read in place is walked kDirectKC rows at a time: fewer rows per tile
// means fewer pages and streams in flight at once (the direct mode's rate
// at m <= 16 rose from about 0.55x to 0.65x of read bandwidth).
constexpr std::int64_t kDirectKC = 64;

// Rows of B per pass over C (each pass loads and stores C once), rows of C
// the mode takes, the fewest elements of B it takes (below, B is read from
// cache and direct's register tiles win: 1x64x1024 ran 20 % slower rows mode),
// and the widest block of C (kRowsMaxM x 8192 floats, 128 KB, in L2).
constexpr int kRowsG = 4;
constexpr std::int64_t kRowsMaxM = 4;
constexpr std::int64_t kRowsMinB = std::int64_t{1} << 20;
// With fewer rows of B the direct mode's strips are short, and the rows
// mode would load and store C k / kRowsG times (a depthwise conv's k = 9).
constexpr std::int64_t kRowsMinK = 64;
constexpr std::int64_t kRowsCols = 8192;

enum class Mode { packed, direct, dot, rows };

Mode mode_of(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t a_cs, std::int64_t b_rs, std::int64_t b_cs) {
  if (m > kDirectRows) return Mode::packed;
  if (a_cs == 1 && b_rs == 1 && b_cs != 1 && k >= 64) return Mode::dot;
  if (b_cs == 1) return m <= kRowsMaxM && k >= kRowsMinK && n * k >= kRowsMinB ? Mode::rows : Mode::direct;
  return Mode::packed;
}

// ---- micro-kernels ----

// C[MR, NV*16 (last vector masked by `mask`)] = alpha * A B + beta * C over
// kc steps. a: packed, MR values per step. b: NV vectors per step, `ldb`
// floats apart; MaskB loads B's last vector under `mask` (B read in place).
// Ahead (the direct mode's first row panel) prefetches each step's row of
// the next kNR-column strip: B is read in place down strips 16 KB a row
// apart in x W, too many streams for the prefetchers (16 x 4096 x 4096 NN
// went from 6.3-7.0 to 5.5-5.9 ms on Zen 4; two strips ahead was slower).
template <int MR, int NV, bool MaskB, bool Ahead = false>
void micro_tile(std::int64_t kc, const float* __restrict a, const float* __restrict b, std::int64_t ldb, __mmask16 mask,
                float* __restrict c, std::int64_t ldc, float alpha, float beta) {
  __m512 acc[MR][NV];
  start_tile(acc, c, ldc);
  for (std::int64_t p = 0; p < kc; ++p) {
    if constexpr (Ahead)
#pragma GCC unroll 3
      for (int v = 0; v < kNV; ++v) _mm_prefetch(reinterpret_cast<const char*>(b + kNR + v * 16), _MM_HINT_T0);
    __m512 bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v)
      bv[v] = (MaskB && v == NV - 1) ? _mm512_maskz_loadu_ps(mask, b + v * 16) : _mm512_loadu_ps(b + v * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += MR;
    b += ldb;
  }
  store_tile(acc, mask, c, ldc, alpha, beta);
}

using TileFn = void (*)(std::int64_t, const float*, const float*, std::int64_t, __mmask16, float*, std::int64_t, float,
                        float);

template <bool MaskB, std::size_t... I>
constexpr std::array<TileFn, kMR * kNV> tile_table(std::index_sequence<I...>) {
  return {&micro_tile<static_cast<int>(I / kNV) + 1, static_cast<int>(I % kNV) + 1, MaskB>...};
}
constexpr auto kTiles = tile_table<false>(std::make_index_sequence<kMR * kNV>{});
constexpr auto kRaggedTiles = tile_table<true>(std::make_index_sequence<kMR * kNV>{});
template <std::size_t... I>
constexpr std::array<TileFn, kMR> ahead_table(std::index_sequence<I...>) {
  return {&micro_tile<static_cast<int>(I) + 1, kNV, false, true>...};
}
constexpr auto kAheadTiles = ahead_table(std::make_index_sequence<kMR>{});

// The kernel for a tile of `rows` x `vectors` vectors; `ragged` when B is
// read in place and its last vector is partial.
TileFn tile_fn(std::int64_t rows, std::int64_t vectors, bool ragged) {
  const std::size_t i = static_cast<std::size_t>((rows - 1) * kNV + (vectors - 1));
  return ragged ? kRaggedTiles[i] : kTiles[i];
}

// A block's last column panel when it is at most kNarrowCols wide (a 14x14
// image's 196 positions leave 4, a 7x7 image's 49 leave 1): the 8x48 tile
// would run it as one masked zmm per row, 8 FMAs per step for 8 x 4 useful
// products. This tile vectorizes down the panel's 8 rows instead: one ymm
// of A per step against NC broadcast columns of B, NC FMAs per step, each
// column of C written back lane by lane.
constexpr int kNarrowCols = 6;
// B's panel row of each step is a new line from L2, and a step has too few
// FMAs to cover its latency: it is asked for this many steps early
// (without, the tile ran at a quarter of its FMA rate).
constexpr std::int64_t kNarrowAhead = 16;

template <int NC>
void narrow_tile(std::int64_t kc, const float* __restrict a, const float* __restrict b, std::int64_t ldb,
                 float* __restrict c, std::int64_t ldc, float alpha, float beta) {
  __m256 acc[NC];
#pragma GCC unroll 6
  for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t p = 0; p < kc; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(b + (p + kNarrowAhead) * ldb), _MM_HINT_T0);
    const __m256 av = _mm256_loadu_ps(a + p * kMR);
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) acc[j] = _mm256_fmadd_ps(av, _mm256_broadcast_ss(b + p * ldb + j), acc[j]);
  }
  // Unrolled, as every loop over acc: an index GCC cannot resolve at
  // compile time keeps the whole array on the stack, in the k loop too.
  alignas(32) float col[kMR];
#pragma GCC unroll 6
  for (int j = 0; j < NC; ++j) {
    _mm256_store_ps(col, acc[j]);
    for (int r = 0; r < kMR; ++r) {
      float& out = c[r * ldc + j];
      out = beta == 0.0f ? alpha * col[r] : alpha * col[r] + beta * out;
    }
  }
}

using NarrowFn = void (*)(std::int64_t, const float*, const float*, std::int64_t, float*, std::int64_t, float, float);

template <std::size_t... I>
constexpr std::array<NarrowFn, kNarrowCols> narrow_table(std::index_sequence<I...>) {
  return {&narrow_tile<static_cast<int>(I) + 1>...};
}
constexpr auto kNarrowTiles = narrow_table(std::make_index_sequence<kNarrowCols>{});

// Partial sums of a [MI, NJ] block of A W^T over steps [p0, p0 + kn): rows
// of A (lda apart) against rows of W (ldw apart), both contiguous along k.
// `part` holds MI * NJ vectors (64-byte aligned) of lane-wise sums, started at zero when
// `first`; the caller reduces them once k is done.
template <int MI, int NJ>
void dot_chunk(std::int64_t p0, std::int64_t kn, std::int64_t k, const float* __restrict a, std::int64_t lda,
               const float* __restrict w, std::int64_t ldw, float* __restrict part, bool first) {
  __m512 acc[MI][NJ];
#pragma GCC unroll 4
  for (int i = 0; i < MI; ++i)
#pragma GCC unroll 6
    for (int j = 0; j < NJ; ++j) acc[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(part + (i * NJ + j) * 16);
  const auto step = [&](std::int64_t p, __mmask16 mask) {
    __m512 wv[NJ];
#pragma GCC unroll 6
    for (int j = 0; j < NJ; ++j) {
      // W streams from memory at one line per row per step: asking
      // kDotPrefetch floats ahead keeps enough lines in flight to reach the
      // machine's read bandwidth (about 0.75x of it without).
      _mm_prefetch(reinterpret_cast<const char*>(w + j * ldw + p + kDotPrefetch), _MM_HINT_T0);
      wv[j] = _mm512_maskz_loadu_ps(mask, w + j * ldw + p);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MI; ++i) {
      const __m512 av = _mm512_maskz_loadu_ps(mask, a + i * lda + p);
#pragma GCC unroll 6
      for (int j = 0; j < NJ; ++j) acc[i][j] = _mm512_fmadd_ps(av, wv[j], acc[i][j]);
    }
  };
  const std::int64_t end = p0 + kn;
  std::int64_t p = p0;
  for (; p + 16 <= end; p += 16) step(p, __mmask16(0xFFFF));
  if (p < end) step(p, lanes16(std::min(end, k) - p));
#pragma GCC unroll 4
  for (int i = 0; i < MI; ++i)
#pragma GCC unroll 6
    for (int j = 0; j < NJ; ++j) _mm512_store_ps(part + (i * NJ + j) * 16, acc[i][j]);
}

using DotFn = void (*)(std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, const float*, std::int64_t,
                       float*, bool);

template <std::size_t... I>
constexpr std::array<DotFn, kDotI * kDotJ> dot_table(std::index_sequence<I...>) {
  return {&dot_chunk<static_cast<int>(I / kDotJ) + 1, static_cast<int>(I % kDotJ) + 1>...};
}
constexpr auto kDots = dot_table(std::make_index_sequence<kDotI * kDotJ>{});

// ---- rows mode ----

// Note [flat products along B's rows]
// x W with W [k, n] row-major and x a few rows (a decode step through a
// weight stored [in, out], or dX = dY W in a small batch's backward) is
// bound by reading W. The direct mode keeps C's tile in registers for all
// of k and so walks W down 48-column strips: 64 rows in flight, each a
// new 16 KB stride, and the prefetchers lose track (0.58-0.75x of the read
// rate of the same 64 MiB, 1 x 4096 x 4096 on Zen 4). Reading W's rows
// whole instead (the thread's column range of them) costs one load and one
// store of C per kRowsG rows of W, which sits in L1 or L2 and is cheap next
// to a memory-bound stream: one thread read W at 0.84-1.04x of its read
// rate this way, against 0.6x with C's columns cut into L1-sized blocks
// (2-3 KB pieces of each row). With B in cache, the register tiles win, and
// with more rows of C (8, 16) the product is bound by C's traffic instead
// (16 x 4096 x 4096 ran 0.17-0.26x against direct's 0.42-0.46x): both keep
// the direct mode.

// C[M, nb] += A[M, G] B[G, nb], alpha folded into A's broadcasts: G rows of
// B read once each, contiguously, and each vector of C loaded and stored
// once per pass.
template <int M, int G>
void rows_pass(std::int64_t nb, const float* a, std::int64_t a_rs, std::int64_t a_cs, float alpha,
               const float* __restrict b, std::int64_t b_rs, float* __restrict c, std::int64_t c_rs) {
  __m512 av[M][G];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) av[i][g] = _mm512_set1_ps(alpha * a[i * a_rs + g * a_cs]);
  const auto step = [&](std::int64_t v, __mmask16 mask) {
    __m512 bv[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) bv[g] = _mm512_maskz_loadu_ps(mask, b + g * b_rs + v);
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      __m512 acc = _mm512_maskz_loadu_ps(mask, c + i * c_rs + v);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc = _mm512_fmadd_ps(av[i][g], bv[g], acc);
      _mm512_mask_storeu_ps(c + i * c_rs + v, mask, acc);
    }
  };
  std::int64_t v = 0;
  for (; v + 16 <= nb; v += 16) step(v, __mmask16(0xFFFF));
  if (v < nb) step(v, lanes16(nb - v));
}

using RowsFn = void (*)(std::int64_t, const float*, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                        float*, std::int64_t);

template <int G, std::size_t... I>
constexpr std::array<RowsFn, kRowsMaxM> rows_table(std::index_sequence<I...>) {
  return {&rows_pass<static_cast<int>(I) + 1, G>...};
}
constexpr auto kRowsPasses = rows_table<kRowsG>(std::make_index_sequence<kRowsMaxM>{});
constexpr auto kRowsSingles = rows_table<1>(std::make_index_sequence<kRowsMaxM>{});

// ---- packing ----

// A [mc, kc] into panels of kMR rows (the last one `mc % kMR` rows), each
// stored step by step: panel[p * rows + r] = A[r, p].
void pack_a(std::int64_t mc, std::int64_t kc, const float* a, std::int64_t rs, std::int64_t cs, float* dst) {
  if (rs == 1 && mc % kMR == 0) {
    // Column-major A (A^T stored, as dW = dY^T X reads it): step by step,
    // each step's mc contiguous values to every panel, so that the source
    // is read line by line rather than one line per step and panel.
    for (std::int64_t p = 0; p < kc; ++p)
      for (std::int64_t i0 = 0; i0 < mc; i0 += kMR)
        _mm256_storeu_ps(dst + i0 * kc + p * kMR, _mm256_loadu_ps(a + p * cs + i0));
    return;
  }
  for (std::int64_t i0 = 0; i0 < mc; i0 += kMR) {
    const std::int64_t rows = std::min<std::int64_t>(kMR, mc - i0);
    const float* src = a + i0 * rs;
    std::int64_t p = 0;
    if (rows == kMR && cs == 1)
      for (; p + 8 <= kc; p += 8) transpose8_block(src + p, rs, dst + p * kMR, kMR);
    if (rs == 1 && rows == kMR) {
      for (; p < kc; ++p) _mm256_storeu_ps(dst + p * kMR, _mm256_loadu_ps(src + p * cs));
    }
    for (; p < kc; ++p)
      for (std::int64_t r = 0; r < rows; ++r) dst[p * rows + r] = src[r * rs + p * cs];
    dst += rows * kc;
  }
}

// B [kc, nc] into panels of kNR columns (the last one narrower), each step
// of a panel padded with zeros to whole vectors: panel[p * width + j].
void pack_b(std::int64_t kc, std::int64_t nc, const float* b, std::int64_t rs, std::int64_t cs, float* dst) {
  for (std::int64_t j0 = 0; j0 < nc; j0 += kNR) {
    const std::int64_t cols = std::min<std::int64_t>(kNR, nc - j0);
    const std::int64_t width = round_up(cols, 16);
    const float* src = b + j0 * cs;
    if (cs == 1) {
      for (std::int64_t p = 0; p < kc; ++p)
        for (std::int64_t v = 0; v < width; v += 16)
          _mm512_storeu_ps(dst + p * width + v, _mm512_maskz_loadu_ps(lanes16(cols - v), src + p * rs + v));
    } else {
      std::int64_t j = 0;
      if (rs == 1) {
        for (; j + 8 <= cols; j += 8) {
          std::int64_t p = 0;
          for (; p + 8 <= kc; p += 8) transpose8_block(src + j * cs + p, cs, dst + p * width + j, width);
          for (; p < kc; ++p)
            for (std::int64_t q = 0; q < 8; ++q) dst[p * width + j + q] = src[(j + q) * cs + p];
        }
      }
      for (std::int64_t p = 0; p < kc; ++p) {
        for (std::int64_t q = j; q < cols; ++q) dst[p * width + q] = src[p * rs + q * cs];
        for (std::int64_t q = cols; q < width; ++q) dst[p * width + q] = 0.0f;
      }
    }
    dst += width * kc;
  }
}

// ---- drivers ----

// The packed loop nest over B's blocks as fill_b(pc, kc, jc, nc, panels)
// writes them, with A packed already (a.packed) or packed a block at a time
// into the scratch after B's panels.
template <typename FillB>
void run_blocks(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const SgemmA& a, FillB&& fill_b,
                std::int64_t nc_cap, float beta, float* c, std::int64_t c_rs, float* scratch) {
  const std::int64_t kc_step = balanced_step(k, kKC, 8), nc_step = balanced_step(n, nc_cap, kNR);
  float* const panels = scratch;
  float* const abuf = scratch + kc_step * round_up(nc_step, kNR);
  const float* a_block = nullptr;
  for_packed_blocks<kMR, kNR, kMC>(
      m, n, k, kc_step, nc_step,
      [&](std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc) { fill_b(pc, kc, jc, nc, panels); },
      [&](std::int64_t ic, std::int64_t mc, std::int64_t pc, std::int64_t kc) {
        if (a.packed) {
          a_block = a.packed + m * pc + ic * kc;  // sgemm_pack_a's layout
        } else {
          pack_a(mc, kc, a.data + ic * a.rs + pc * a.cs, a.rs, a.cs, abuf);
          a_block = abuf;
        }
      },
      [&](std::int64_t ic, std::int64_t ir, std::int64_t rows, std::int64_t jc, std::int64_t jr, std::int64_t cols,
          std::int64_t kc, bool first) {
        const float beta_k = first ? beta : 1.0f;
        if (cols <= kNarrowCols && rows == kMR) {
          kNarrowTiles[static_cast<std::size_t>(cols - 1)](kc, a_block + ir * kc, panels + jr * kc, 16,
                                                           c + (ic + ir) * c_rs + jc + jr, c_rs, alpha, beta_k);
          return;
        }
        const std::int64_t vectors = (cols + 15) / 16;
        tile_fn(rows, vectors, false)(kc, a_block + ir * kc, panels + jr * kc, vectors * 16,
                                      lanes16(cols - (vectors - 1) * 16), c + (ic + ir) * c_rs + jc + jr, c_rs, alpha,
                                      beta_k);
      });
}

void run_packed(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a, std::int64_t a_rs,
                std::int64_t a_cs, const float* b, std::int64_t b_rs, std::int64_t b_cs, float beta, float* c,
                std::int64_t c_rs, float* scratch) {
  run_blocks(
      m, n, k, alpha, SgemmA{nullptr, a, a_rs, a_cs},
      [&](std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc, float* panels) {
        pack_b(kc, nc, b + pc * b_rs + jc * b_cs, b_rs, b_cs, panels);
      },
      kNC, beta, c, c_rs, scratch);
}

void run_direct(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a, std::int64_t a_rs,
                std::int64_t a_cs, const float* b, std::int64_t b_rs, float beta, float* c, std::int64_t c_rs,
                float* abuf) {
  const std::int64_t kc_step = balanced_step(k, kDirectKC, 8);
  for (std::int64_t pc = 0; pc < k; pc += kc_step) {
    const std::int64_t kc = std::min(kc_step, k - pc);
    const float beta_k = pc == 0 ? beta : 1.0f;
    pack_a(m, kc, a + pc * a_cs, a_rs, a_cs, abuf);
    for (std::int64_t jr = 0; jr < n; jr += kNR) {
      const std::int64_t cols = std::min<std::int64_t>(kNR, n - jr);
      const std::int64_t vectors = (cols + 15) / 16;
      const bool ragged = cols % 16 != 0;
      for (std::int64_t ir = 0; ir < m; ir += kMR) {
        const std::int64_t rows = std::min<std::int64_t>(kMR, m - ir);
        const bool ahead = ir == 0 && jr + kNR < n;
        (ahead ? kAheadTiles[static_cast<std::size_t>(rows - 1)] : tile_fn(rows, vectors, ragged))(
            kc, abuf + ir * kc, b + pc * b_rs + jr, b_rs, lanes16(cols - (vectors - 1) * 16), c + ir * c_rs + jr, c_rs,
            alpha, beta_k);
      }
    }
  }
}

// m <= kRowsMaxM with a large row-major B (x W, and dX = dY W in a linear
// layer's backward): B's rows stream through a block of C kRowsG at a
// time, each read contiguously from start to end (Note [flat products
// along B's rows]).
void run_rows(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a, std::int64_t a_rs,
              std::int64_t a_cs, const float* b, std::int64_t b_rs, float beta, float* c, std::int64_t c_rs) {
  const RowsFn pass = kRowsPasses[static_cast<std::size_t>(m - 1)];
  const RowsFn single = kRowsSingles[static_cast<std::size_t>(m - 1)];
  for (std::int64_t j0 = 0; j0 < n; j0 += kRowsCols) {
    const std::int64_t cols = std::min(kRowsCols, n - j0);
    for (std::int64_t i = 0; i < m; ++i) {
      float* row = c + i * c_rs + j0;
      if (beta == 0.0f)
        std::fill(row, row + cols, 0.0f);
      else if (beta != 1.0f)
        for (std::int64_t j = 0; j < cols; ++j) row[j] *= beta;
    }
    std::int64_t p = 0;
    for (; p + kRowsG <= k; p += kRowsG)
      pass(cols, a + p * a_cs, a_rs, a_cs, alpha, b + p * b_rs + j0, b_rs, c + j0, c_rs);
    for (; p < k; ++p) single(cols, a + p * a_cs, a_rs, a_cs, alpha, b + p * b_rs + j0, b_rs, c + j0, c_rs);
  }
}

// With more than one group of rows, k runs in chunks of kDotK, so that a chunk of every row of A (up to
// kDirectRows of them) and of kDotJ rows of W sit in L1 together: W comes
// from memory once and A from L1, not both from L2 once per group of rows.
void run_dot(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a, std::int64_t a_rs,
             const float* w, std::int64_t w_rs, float beta, float* c, std::int64_t c_rs) {
  constexpr std::int64_t kGroups = kDirectRows / kDotI;
  alignas(64) float part[kGroups][kDotI * kDotJ * 16];
  // One group of rows of A reads each row of W once whatever the chunk.
  const std::int64_t chunk = m <= kDotI ? k : kDotK;
  for (std::int64_t j0 = 0; j0 < n; j0 += kDotJ) {
    const std::int64_t nj = std::min<std::int64_t>(kDotJ, n - j0);
    for (std::int64_t p0 = 0; p0 < k; p0 += chunk) {
      const std::int64_t kn = std::min(chunk, k - p0);
      for (std::int64_t i0 = 0; i0 < m; i0 += kDotI) {
        const std::int64_t mi = std::min<std::int64_t>(kDotI, m - i0);
        kDots[static_cast<std::size_t>((mi - 1) * kDotJ + (nj - 1))](p0, kn, k, a + i0 * a_rs, a_rs, w + j0 * w_rs,
                                                                     w_rs, part[i0 / kDotI], p0 == 0);
      }
    }
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < nj; ++j) {
        const float s = alpha * horizontal_sum(_mm512_load_ps(&part[i / kDotI][((i % kDotI) * nj + j) * 16]));
        float& out = c[i * c_rs + j0 + j];
        out = beta == 0.0f ? s : beta * out + s;
      }
  }
}

// A stride along a dimension of size 1 is never used to step; normalizing it
// lets the layout tests below see the operand's real shape.
void normalize(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t& a_rs, std::int64_t& a_cs,
               std::int64_t& b_rs, std::int64_t& b_cs) {
  if (k == 1) a_cs = b_rs = 1;
  if (n == 1) b_cs = 1;
  if (m == 1) a_rs = 1;
}

}  // namespace

bool sgemm_available() noexcept { return true; }

std::size_t sgemm_scratch_floats(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t a_rs, std::int64_t a_cs,
                                 std::int64_t b_rs, std::int64_t b_cs) noexcept {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  normalize(m, n, k, a_rs, a_cs, b_rs, b_cs);
  const Mode mode = mode_of(m, n, k, a_cs, b_rs, b_cs);
  if (mode == Mode::dot || mode == Mode::rows) return 0;
  if (mode == Mode::direct) return static_cast<std::size_t>(round_up(m * balanced_step(k, kDirectKC, 8), 16));
  return sgemm_fill_scratch_floats(m, n, k, kNC, false);
}

void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a, std::int64_t a_rs,
           std::int64_t a_cs, const float* b, std::int64_t b_rs, std::int64_t b_cs, float beta, float* c,
           std::int64_t c_rs, float* scratch) noexcept {
  normalize(m, n, k, a_rs, a_cs, b_rs, b_cs);
  switch (mode_of(m, n, k, a_cs, b_rs, b_cs)) {
    case Mode::dot:
      run_dot(m, n, k, alpha, a, a_rs, b, b_cs, beta, c, c_rs);
      return;
    case Mode::direct:
      run_direct(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, beta, c, c_rs, scratch);
      return;
    case Mode::rows:
      run_rows(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, beta, c, c_rs);
      return;
    case Mode::packed:
      run_packed(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, c_rs, scratch);
      return;
  }
}

void sgemm_pack_a(std::int64_t m, std::int64_t k, const float* a, std::int64_t a_rs, std::int64_t a_cs, float* dst,
                  std::int64_t r0, std::int64_t r1) noexcept {
  const std::int64_t kc_step = balanced_step(k, kKC, 8);
  for (std::int64_t pc = 0; pc < k; pc += kc_step) {
    const std::int64_t kc = std::min(kc_step, k - pc);
    pack_a(r1 - r0, kc, a + r0 * a_rs + pc * a_cs, a_rs, a_cs, dst + m * pc + r0 * kc);
  }
}

std::size_t sgemm_fill_scratch_floats(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t nc_cap,
                                      bool a_packed) noexcept {
  // The B block of any n' <= n: balanced_step is not monotonic in n (816
  // columns run as 2 x 432, 688 as one block of 720).
  const std::int64_t kc = balanced_step(k, kKC, 8);
  const std::int64_t a_floats = a_packed ? 0 : std::min(m, kMC) * kc;
  return static_cast<std::size_t>(kc * std::min(nc_cap, round_up(n, kNR)) + a_floats);
}

void sgemm_fill_b(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const SgemmA& a,
                  const SgemmFillB& fill_b, std::int64_t nc_cap, float beta, float* c, std::int64_t c_rs,
                  float* scratch) {
  run_blocks(m, n, k, alpha, a, fill_b, nc_cap, beta, c, c_rs, scratch);
}

std::int64_t sgemm_k_step(std::int64_t k) noexcept { return balanced_step(k, kKC, 8); }

std::int64_t sgemm_packed_a_index(std::int64_t m, std::int64_t k, std::int64_t r, std::int64_t p) noexcept {
  // sgemm_pack_a's k block pc starts at m * pc, its panel of rows r0 at
  // r0 * kc; pack_a stores the panel step by step, `rows` values a step.
  const std::int64_t step = sgemm_k_step(k), pc = p / step * step, kc = std::min(step, k - pc);
  const std::int64_t r0 = r / kMR * kMR, rows = std::min<std::int64_t>(kMR, m - r0);
  return m * pc + r0 * kc + (p - pc) * rows + (r - r0);
}

void sgemm_prepacked(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a_packed,
                     const float* b_panels, float beta, float* c, std::int64_t c_rs) noexcept {
  // One block (k <= kKC, n <= kNC): the fill writes nothing, and run_blocks
  // only reads its panels, which are the caller's.
  run_blocks(
      m, n, k, alpha, SgemmA{a_packed}, [](std::int64_t, std::int64_t, std::int64_t, std::int64_t, float*) {},
      round_up(n, kNR), beta, c, c_rs, const_cast<float*>(b_panels));
}

#else  // no AVX-512: gemm.cpp keeps Eigen

bool sgemm_available() noexcept { return false; }
std::size_t sgemm_scratch_floats(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 std::int64_t) noexcept {
  return 0;
}
void sgemm(std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, std::int64_t, const float*,
           std::int64_t, std::int64_t, float, float*, std::int64_t, float*) noexcept {}
void sgemm_pack_a(std::int64_t, std::int64_t, const float*, std::int64_t, std::int64_t, float*, std::int64_t,
                  std::int64_t) noexcept {}
std::size_t sgemm_fill_scratch_floats(std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool) noexcept {
  return 0;
}
void sgemm_fill_b(std::int64_t, std::int64_t, std::int64_t, float, const SgemmA&, const SgemmFillB&, std::int64_t,
                  float, float*, std::int64_t, float*) {}
std::int64_t sgemm_k_step(std::int64_t k) noexcept { return k; }
std::int64_t sgemm_packed_a_index(std::int64_t, std::int64_t, std::int64_t, std::int64_t) noexcept { return 0; }
void sgemm_prepacked(std::int64_t, std::int64_t, std::int64_t, float, const float*, const float*, float, float*,
                     std::int64_t) noexcept {}

#endif

}  // namespace forge::cpu
