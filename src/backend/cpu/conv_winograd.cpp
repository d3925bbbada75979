// conv2d's f32 forward for 3x3 windows at stride 1 as Winograd F(2x2, 3x3),
// on AVX-512 cores.
//
// Policy:
// - The layers this takes: 3x3 at stride 1, undilated and ungrouped, padding
//   up to 2, at least 16 input and 16 output channels (ResNet's stride-1
//   layers, the Fashion-MNIST example's second layer, and the input
//   gradients of all of them, which Note [conv2d input gradient as a
//   forward] runs as such a forward). Each 2x2 block of outputs costs 16
//   multiplies per channel pair instead of 36 (Note [Winograd F(2x2, 3x3)]).
//   The im2col path (conv_packed.cpp) runs these layers at the GEMM's own
//   rate, so fewer multiplies is the only way past it: on a Zen 4 machine
//   the 128-channel 28x28 forward went from 0.82-1.03x oneDNN's to
//   1.64-1.72x, and its forward + backward from 0.86-0.92x to 1.44-1.88x.
// - Work items are (chunk of at most kChunk tiles, block of output
//   channels); the chunks are evened out so that each thread gets the same
//   number, and a layer with fewer chunks than threads is cut by output
//   channels as well (each block then transforms the chunk's inputs again).
// - Per item and block of input channels (sgemm_k_step's), the 16
//   transformed inputs are built together, since every input vector feeds
//   all of them, straight into sgemm's B panels; the 16 products then run
//   through sgemm_prepacked against the transformed weights, which are
//   computed once per call straight into sgemm's A layout (one A per block
//   of output channels, as conv_packed.cpp packs them). The output transform
//   reads the 16 products' columns for 16 tiles at a time and writes the
//   2x2 blocks with the bias added.
// - Everything an item touches (its transformed inputs, 16 x kc x 96
//   floats, and its 16 products) is in one slot of pooled scratch per
//   thread, leased up front (Note [Worker scratch]); the weight gradient's
//   slots also hold their 16 [O, C] sums.

#include "backend/cpu/conv_winograd.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/simd_lanes.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

// Note [Winograd F(2x2, 3x3)]
// With d a 4x4 block of one input channel (rows from 2 ty - pad_h, columns
// from 2 tx - pad_w, zero outside the image) and g a 3x3 filter, the 2x2
// outputs of tile (ty, tx) are
//   Y = A^T [(G g G^T) * (B^T d B)] A      (* elementwise)
// with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
//      G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
//      A^T = [1 1 1 0; 0 1 -1 -1].
// Summed over input channels, each of the 16 points xi of the elementwise
// product is a GEMM: M_xi[o, t] = sum_c U_xi[o, c] V_xi[c, t] with
// U = G g G^T, V = B^T d B and t running over tiles. That is 16 C x O
// multiply-adds per tile of 4 outputs where the direct sum takes 36, for
// transforms that only add, subtract and halve. The rounding error grows by
// a small factor over the direct sum's (each V adds 4 inputs, each output
// 9 products): the tests hold this path to the same bound, relative to the
// sum of the terms' magnitudes, as the im2col path.
//
// Vectors run along a tile row: lane l is tile tx0 + l, whose column s of d
// is input column 2 (tx0 + l) - pad_w + s. For s = 0 and 1 those are the
// even and odd lanes of the 32 columns from 2 tx0 - pad_w (two loads, two
// permutes); for s = 2 and 3, of the 32 columns two further on.

constexpr std::int64_t kPoints = 16;
constexpr std::int64_t kMinChannels = 16;
constexpr std::int64_t kMinOut = 4;
constexpr std::int64_t kMaxPad = 2;
// Tiles per item, at most: two panels of B. An item's 16 transformed
// inputs and 16 products ([kc, 96] and [rows, 96] each) then stay in L2 at
// 64 channels; at 128 and 256 channels 48, 96 and 192 ran within the
// noise of each other, and 96 ran the 32-channel layer 5-10 % faster than 192.
constexpr std::int64_t kChunk = 2 * kSgemmPanelCols;
// Tiles per chunk of the weight gradient's sum (its GEMMs' k): at most
// kGradChunk, at least kMinGradChunk, and otherwise as many as keep a
// chunk's transformed tiles within kGradTileFloats (4 MB).
constexpr std::int64_t kGradChunk = 256, kMinGradChunk = 64;
constexpr std::int64_t kGradTileFloats = std::int64_t{1} << 20;
// Blocks of output channels are no narrower than this.
constexpr std::int64_t kMinRows = 32;

inline std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// The row pitch of the panel starting at column j0 of a block nc wide, as
// sgemm_fill_b lays B out: 48, or the last panel's columns in whole vectors.
inline std::int64_t panel_width(std::int64_t nc, std::int64_t j0) {
  return std::min(kSgemmPanelCols, round_up(nc - j0, 16));
}

// At most 16 tiles of one tile row, in one panel of B: lane l is tile
// (n, ty, tx0 + l), column q + l of the item's chunk. Or, `paired` (Note
// [paired tile rows]), two whole tile rows of len <= 8 tiles each: lane l
// < 8 is tile (n, ty, l) and lane 8 + l tile (n, ty + 1, l), columns q + l
// and q + len + l. Input row r of its tiles is read in four vectors from
// a channel's plane: `offset[r][0]` (image and row included) and
// `offset[r][1]` (16 columns on, or the paired row's), and the same two 2
// columns on, under `mask[r]`: no lanes for a row outside the image, whose
// offset is then never read.
struct Piece {
  std::int64_t n, ty, tx0, q, len;
  std::int64_t j0, width;  // its panel's first column and row pitch
  bool paired;
  std::int64_t offset[4][2];
  __mmask16 mask[4][4];
};

// Note [paired tile rows]
// A 14-wide output has 7 tiles a row, and one row to a vector would leave
// 9 of 16 lanes idle in every transform (they were half of a 32-channel
// 14x14 layer's time). Two rows to a vector fill 14: the even/odd permute
// that splits 32 columns of one input row into 16 tiles' columns takes 16
// columns of each of two rows just as well, so the loads and arithmetic
// are the same, and only the stores (and the products' loads) permute the
// lanes between [0, len) + [8, 8 + len) and [0, 2 len).
constexpr std::int64_t kPairedTiles = 8;

// The lanes [0, len) and [8, 8 + len) of a paired vector, moved to [0, 2 len)
// (`pack`), and back (`unpack`); lanes past them are don't-cares.
inline __m512i pair_pack(std::int64_t len) {
  alignas(64) std::int32_t idx[16];
  for (int l = 0; l < 16; ++l) idx[l] = static_cast<std::int32_t>(l < len ? l : l < 2 * len ? 8 + l - len : 0);
  return _mm512_load_si512(idx);
}
inline __m512i pair_unpack(std::int64_t len) {
  alignas(64) std::int32_t idx[16];
  for (int l = 0; l < 16; ++l) idx[l] = static_cast<std::int32_t>(l < 8 ? std::min<std::int64_t>(l, 15) : len + l - 8);
  return _mm512_load_si512(idx);
}

// The tiles per row of the paired pieces (all alike: whole tile rows), or 8.
inline std::int64_t paired_len(const Piece* pieces, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    if (pieces[i].paired) return pieces[i].len;
  return kPairedTiles;
}

// The pieces of tiles [t0, t0 + nt) (tiles numbered image by image, row by
// row), for B's panels, or with `plain` > 0 for a plain layout, tile q of
// row p at p * plain + q; returns their count, at most nt.
std::int64_t list_pieces(const Window2d& w, const Strides& xs, std::int64_t th, std::int64_t tw, std::int64_t t0,
                         std::int64_t nt, std::int64_t plain, Piece* pieces) {
  // Bit b of `inside`: input column cb + b is in the image.
  auto inside_bits = [&](std::int64_t cb) {
    const std::int64_t lo = std::max<std::int64_t>(0, -cb), hi = std::min<std::int64_t>(64, w.w - cb);
    const std::uint64_t below_hi = hi >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << hi) - 1;
    return hi <= lo ? std::uint64_t{0} : below_hi & ~((std::uint64_t{1} << lo) - 1);
  };
  std::int64_t count = 0, n = t0 / (th * tw), ty = t0 / tw % th, tx = t0 % tw;
  for (std::int64_t q = 0; q < nt;) {
    const std::int64_t j0 = plain ? 0 : q / kSgemmPanelCols * kSgemmPanelCols;
    const std::int64_t panel_end = plain ? nt : j0 + kSgemmPanelCols;
    const bool paired = tw <= kPairedTiles && tx == 0 && ty + 1 < th && q + 2 * tw <= std::min(nt, panel_end);
    const std::int64_t len = paired ? tw : std::min({nt - q, tw - tx, panel_end - q, std::int64_t{16}});
    Piece& g = pieces[count++];
    g = {n, ty, tx, q, len, j0, plain ? plain : panel_width(nt, j0), paired, {}, {}};
    const std::int64_t cb = 2 * tx - w.pad_w;
    const std::uint64_t inside = inside_bits(cb);
    for (int r = 0; r < 4; ++r) {
      const std::int64_t ih = 2 * ty - w.pad_h + r, ih2 = ih + 2;  // the paired row's
      const bool in = ih >= 0 && ih < w.h, in2 = paired ? ih2 >= 0 && ih2 < w.h : in;
      g.offset[r][0] = in ? n * xs[0] + ih * xs[2] + cb : 0;
      g.offset[r][1] = paired ? (in2 ? n * xs[0] + ih2 * xs[2] + cb : 0) : g.offset[r][0] + 16;
      const int second = paired ? 0 : 16;  // the second vector's first column
      g.mask[r][0] = in ? __mmask16(inside) : __mmask16(0);
      g.mask[r][1] = in2 ? __mmask16(inside >> second) : __mmask16(0);
      g.mask[r][2] = in ? __mmask16(inside >> 2) : __mmask16(0);
      g.mask[r][3] = in2 ? __mmask16(inside >> (second + 2)) : __mmask16(0);
    }
    q += paired ? 2 * tw : len;
    tx += len;
    if (tx == tw) {
      tx = 0;
      ty += paired ? 2 : 1;
      if (ty == th) {
        ty = 0;
        ++n;
      }
    }
  }
  return count;
}

// U_xi = G g G^T for every output channel in [o0, o1), into sgemm's A
// layout: point xi's [O, C] matrix at u + xi * O * C, each block of `rows`
// output channels packed as its own A. Within one of sgemm's k blocks a
// row's steps are equally far apart, so the layout's index is worked out
// twice per block, not per element (per element, its divisions took 3 %
// of a 128-channel layer's forward and backward).
void transform_weights(const float* weight, std::int64_t w_rs, std::int64_t O, std::int64_t C, std::int64_t rows,
                       std::int64_t o0, std::int64_t o1, float* u) {
  const std::int64_t step = sgemm_k_step(C);
  for (std::int64_t o = o0; o < o1; ++o) {
    const std::int64_t ob = o / rows * rows, mb = std::min(rows, O - ob);
    float* block = u + ob * C;
    for (std::int64_t pc = 0; pc < C; pc += step) {
      const std::int64_t end = std::min(C, pc + step), at = sgemm_packed_a_index(mb, C, o - ob, pc);
      const std::int64_t pitch = end - pc > 1 ? sgemm_packed_a_index(mb, C, o - ob, pc + 1) - at : 0;
      for (std::int64_t c = pc; c < end; ++c) {
        const float* g = weight + o * w_rs + c * 9;
        float gg[4][3];  // G g
        for (int j = 0; j < 3; ++j) {
          gg[0][j] = g[j];
          gg[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
          gg[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
          gg[3][j] = g[6 + j];
        }
        float* dst = block + at + (c - pc) * pitch;
        for (int i = 0; i < 4; ++i) {
          const float v[4] = {gg[i][0], 0.5f * (gg[i][0] + gg[i][1] + gg[i][2]),
                              0.5f * (gg[i][0] - gg[i][1] + gg[i][2]), gg[i][2]};
          for (int j = 0; j < 4; ++j) dst[(4 * i + j) * O * C] = v[j];
        }
      }
    }
  }
}

// Row r of (B^T d) B from row r of B^T d, its four points `vsize` apart,
// the lanes moved by `pack` first when a piece is paired.
inline void store_row(const __m512 (&t)[4], float* out, std::int64_t vsize, __mmask16 lanes, const __m512i* pack) {
  __m512 v[4] = {_mm512_sub_ps(t[0], t[2]), _mm512_add_ps(t[1], t[2]), _mm512_sub_ps(t[2], t[1]),
                 _mm512_sub_ps(t[1], t[3])};
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    if (pack) v[j] = _mm512_permutex2var_ps(v[j], *pack, v[j]);
    _mm512_mask_storeu_ps(out + j * vsize, lanes, v[j]);
  }
}

// V_xi = B^T d B for input channels [c0, c0 + kc) of the pieces' tiles, into
// B's panels for a block [kc, nt] (or the pieces' plain layout): point xi's
// at v + xi * vsize.
void transform_inputs(const float* x, const Strides& xs, std::int64_t c0, std::int64_t kc, std::int64_t nt, bool plain,
                      const Piece* pieces, std::int64_t count, float* v, std::int64_t vsize) {
  // The last panel's lanes past nt, up to its whole vectors, stay zero.
  const std::int64_t padded = round_up(nt, 16);
  if (!plain && padded > nt) {
    const std::int64_t j0 = nt / kSgemmPanelCols * kSgemmPanelCols, width = panel_width(nt, j0);
    for (std::int64_t xi = 0; xi < kPoints; ++xi)
      for (std::int64_t p = 0; p < kc; ++p)
        _mm512_mask_storeu_ps(v + xi * vsize + j0 * kc + p * width + (nt - j0), lanes16(padded - nt),
                              _mm512_setzero_ps());
  }
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i pack = pair_pack(paired_len(pieces, count));
  // Channel by channel, each plane read row by row and each row of the
  // panels written in order.
  for (std::int64_t c = c0; c < c0 + kc; ++c) {
    const float* plane = x + c * xs[1];
    for (std::int64_t i = 0; i < count; ++i) {
      const Piece& g = pieces[i];
      __m512 d[4][4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const float *first = plane + g.offset[r][0], *second = plane + g.offset[r][1];
        const __m512 a = _mm512_maskz_loadu_ps(g.mask[r][0], first), b = _mm512_maskz_loadu_ps(g.mask[r][1], second);
        const __m512 a2 = _mm512_maskz_loadu_ps(g.mask[r][2], first + 2),
                     b2 = _mm512_maskz_loadu_ps(g.mask[r][3], second + 2);
        d[r][0] = _mm512_permutex2var_ps(a, even, b);
        d[r][1] = _mm512_permutex2var_ps(a, odd, b);
        d[r][2] = _mm512_permutex2var_ps(a2, even, b2);
        d[r][3] = _mm512_permutex2var_ps(a2, odd, b2);
      }
      __m512 t[4][4];  // B^T d
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        t[0][s] = _mm512_sub_ps(d[0][s], d[2][s]);
        t[1][s] = _mm512_add_ps(d[1][s], d[2][s]);
        t[2][s] = _mm512_sub_ps(d[2][s], d[1][s]);
        t[3][s] = _mm512_sub_ps(d[1][s], d[3][s]);
      }
      float* dst = v + g.j0 * kc + (c - c0) * g.width + (g.q - g.j0);
      if (g.paired) {
        const __mmask16 lanes = lanes16(2 * g.len);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) store_row(t[r], dst + 4 * r * vsize, vsize, lanes, &pack);
      } else {
        const __mmask16 lanes = lanes16(g.len);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) store_row(t[r], dst + 4 * r * vsize, vsize, lanes, nullptr);
      }
    }
  }
}

// out[n, o0 + o, 2 ty + a, 2 tx + b] = (A^T M A)[a, b] + bias for the
// item's `rows` output channels, M_xi's row o at m + xi * msize + o * ldm.
void transform_outputs(const Window2d& w, const float* m, std::int64_t msize, std::int64_t ldm, std::int64_t o0,
                       std::int64_t rows, const float* bias, std::int64_t bias_stride, float* out, const Strides& os,
                       const Piece* pieces, std::int64_t count) {
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i unpack = pair_unpack(paired_len(pieces, count));
  // Channel by channel: the 16 products' rows o are read in order.
  for (std::int64_t o = 0; o < rows; ++o) {
    const float* src = m + o * ldm;
    const __m512 beta = bias ? _mm512_set1_ps(bias[(o0 + o) * bias_stride]) : _mm512_setzero_ps();
    float* plane = out + (o0 + o) * os[1];
    for (std::int64_t i = 0; i < count; ++i) {
      const Piece& g = pieces[i];
      const __mmask16 lanes = lanes16(g.paired ? 2 * g.len : g.len);
      __m512 a[4], b[4];  // rows of A^T M
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        __m512 mv[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          mv[k] = _mm512_maskz_loadu_ps(lanes, src + g.q + (4 * k + j) * msize);
          if (g.paired) mv[k] = _mm512_permutex2var_ps(mv[k], unpack, mv[k]);
        }
        a[j] = _mm512_add_ps(_mm512_add_ps(mv[0], mv[1]), mv[2]);
        b[j] = _mm512_sub_ps(_mm512_sub_ps(mv[1], mv[2]), mv[3]);
      }
      // A row's first 16 columns, and its next 16 or (paired) the first 16
      // of the output row two on; whether each one's lower row exists.
      const std::int64_t cols = std::min(2 * g.len, w.out_w - 2 * g.tx0);
      const __mmask16 lo = lanes16(cols), hi = g.paired ? lo : lanes16(cols - 16);
      const std::int64_t hi_at = g.paired ? 2 * os[2] : 16;
      const bool lower = 2 * g.ty + 1 < w.out_h, hi_lower = g.paired ? 2 * g.ty + 3 < w.out_h : lower;
      float* dst = plane + g.n * os[0] + 2 * g.ty * os[2] + 2 * g.tx0;
      const __m512 y00 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), a[2]), beta);
      const __m512 y01 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(a[1], a[2]), a[3]), beta);
      _mm512_mask_storeu_ps(dst, lo, _mm512_permutex2var_ps(y00, first, y01));
      _mm512_mask_storeu_ps(dst + hi_at, hi, _mm512_permutex2var_ps(y00, second, y01));
      if (!lower) continue;  // the last row of an odd height
      const __m512 y10 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(b[0], b[1]), b[2]), beta);
      const __m512 y11 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(b[1], b[2]), b[3]), beta);
      _mm512_mask_storeu_ps(dst + os[2], lo, _mm512_permutex2var_ps(y10, first, y11));
      _mm512_mask_storeu_ps(dst + os[2] + hi_at, hi_lower ? hi : __mmask16(0),
                            _mm512_permutex2var_ps(y10, second, y11));
    }
  }
}

// Whether the layer is one this file takes (the header's list, less the
// operands' layouts).
bool takes(const Window2d& w, std::int64_t groups, std::int64_t out_channels) {
  return sgemm_available() && groups == 1 && w.kernel_h == 3 && w.kernel_w == 3 && w.stride_h == 1 && w.stride_w == 1 &&
         w.dilation_h == 1 && w.dilation_w == 1 && w.pad_h <= kMaxPad && w.pad_w <= kMaxPad && w.c >= kMinChannels &&
         out_channels >= kMinChannels && w.out_h >= kMinOut && w.out_w >= kMinOut;
}

// Cuts T tiles into chunks of at most `most` (a multiple of 16), as many
// chunks as a multiple of the thread count while there are few; returns
// the chunk's tiles and sets `chunks`.
std::int64_t chunk_tiles(std::int64_t T, std::int64_t most, int threads, std::int64_t& chunks) {
  chunks = (T + most - 1) / most;
  if (chunks < 8 * threads) chunks = round_up(chunks, threads);
  const std::int64_t chunk = round_up((T + chunks - 1) / chunks, 16);
  chunks = (T + chunk - 1) / chunk;
  return chunk;
}

// Yhat_xi = A dY A^T for the pieces' tiles and every output channel, in the
// pieces' plain layout (row o at o * plain): point xi's at y + xi * ysize.
// A tile's outputs past the edge of an odd height or width count as zeros.
void transform_grads(const Window2d& w, const float* dy, const Strides& gs, std::int64_t O, const Piece* pieces,
                     std::int64_t count, std::int64_t plain, float* y, std::int64_t ysize) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 zero = _mm512_setzero_ps();
  const __m512i pack = pair_pack(paired_len(pieces, count));
  for (std::int64_t o = 0; o < O; ++o) {
    const float* plane = dy + o * gs[1];
    for (std::int64_t i = 0; i < count; ++i) {
      const Piece& g = pieces[i];
      // dY's rows 2 ty and 2 ty + 1: 32 columns of each, or (paired) 16
      // of each and 16 of rows 2 ty + 2 and 2 ty + 3.
      const std::int64_t cols = std::min(2 * g.len, w.out_w - 2 * g.tx0);
      const __mmask16 lo = lanes16(cols), hi = g.paired ? lo : lanes16(cols - 16);
      const std::int64_t hi_at = g.paired ? 2 * gs[2] : 16;
      const bool lower = 2 * g.ty + 1 < w.out_h, hi_lower = g.paired ? 2 * g.ty + 3 < w.out_h : lower;
      const float* row = plane + g.n * gs[0] + 2 * g.ty * gs[2] + 2 * g.tx0;
      __m512 r[4][2];  // rows of A dY: columns 0 and 1 of each tile
      for (int k = 0; k < 2; ++k) {
        const __mmask16 m0 = k == 0 || lower ? lo : __mmask16(0), m1 = k == 0 || hi_lower ? hi : __mmask16(0);
        const float* src = row + k * gs[2];
        const __m512 a = _mm512_maskz_loadu_ps(m0, src), b = _mm512_maskz_loadu_ps(m1, src + hi_at);
        r[k][0] = _mm512_permutex2var_ps(a, even, b);
        r[k][1] = _mm512_permutex2var_ps(a, odd, b);
      }
      for (int k = 0; k < 2; ++k) {  // rows 0 and 1 are y0 and y1: make y0 + y1, y0 - y1, -y1
        const __m512 y0 = r[0][k], y1 = r[1][k];
        r[3][k] = _mm512_sub_ps(zero, y1);
        r[2][k] = _mm512_sub_ps(y0, y1);
        r[1][k] = _mm512_add_ps(y0, y1);
      }
      const __mmask16 lanes = lanes16(g.paired ? 2 * g.len : g.len);
      float* dst = y + o * plain + g.q;
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {  // (A dY) A^T, row k
        __m512 v[4] = {r[k][0], _mm512_add_ps(r[k][0], r[k][1]), _mm512_sub_ps(r[k][0], r[k][1]),
                       _mm512_sub_ps(zero, r[k][1])};
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          if (g.paired) v[j] = _mm512_permutex2var_ps(v[j], pack, v[j]);
          _mm512_mask_storeu_ps(dst + (4 * k + j) * ysize, lanes, v[j]);
        }
      }
    }
  }
}

// dW[o, c] = G^T M[o, c] G for output channels [o0, o1), M_xi's [O, C]
// matrix at m + xi * O * C: dW is [O, C, 3, 3], contiguous.
void transform_weight_grads(const float* m, std::int64_t O, std::int64_t C, std::int64_t o0, std::int64_t o1,
                            float* gw) {
  for (std::int64_t o = o0; o < o1; ++o)
    for (std::int64_t c = 0; c < C; ++c) {
      float t[4][3];  // M G, row by row
      for (int i = 0; i < 4; ++i) {
        const float* row = m + 4 * i * O * C + o * C + c;
        const float m0 = row[0], m1 = row[O * C], m2 = row[2 * O * C], m3 = row[3 * O * C];
        t[i][0] = m0 + 0.5f * (m1 + m2);
        t[i][1] = 0.5f * (m1 - m2);
        t[i][2] = 0.5f * (m1 + m2) + m3;
      }
      float* dst = gw + (o * C + c) * 9;
      for (int j = 0; j < 3; ++j) {
        dst[j] = t[0][j] + 0.5f * (t[1][j] + t[2][j]);
        dst[3 + j] = 0.5f * (t[1][j] - t[2][j]);
        dst[6 + j] = 0.5f * (t[1][j] + t[2][j]) + t[3][j];
      }
    }
}

}  // namespace

bool conv2d_winograd_f32(detail::DeviceRuntime& rt, const Conv2dProblem& p, const float* weight, std::int64_t w_rs) {
  const Window2d& w = p.win;
  const Strides &xs = p.x_strides, &os = p.out_strides;
  const std::int64_t C = w.c, O = p.out_channels;
  if (!takes(w, p.groups, O) || xs[3] != 1 || os[3] != 1) return false;

  const int threads = rt.threads();
  const std::int64_t th = (w.out_h + 1) / 2, tw = (w.out_w + 1) / 2, T = w.n * th * tw;
  std::int64_t chunks = 0;
  const std::int64_t chunk = chunk_tiles(T, kChunk, threads, chunks);
  // Fewer chunks than threads: blocks of output channels as well.
  const std::int64_t by_rows =
      std::clamp<std::int64_t>((threads + chunks - 1) / chunks, 1, std::max<std::int64_t>(1, O / kMinRows));
  const std::int64_t rows = std::min(O, round_up((O + by_rows - 1) / by_rows, 8));
  const std::int64_t row_blocks = (O + rows - 1) / rows, items = chunks * row_blocks;

  ScratchLease<float> u = rt.pool().scratch<float>(static_cast<std::size_t>(kPoints * O * C));
  rt.parallel_for(O, std::max<std::int64_t>(1, kGrainElements / (kPoints * C)), [&](std::int64_t o0, std::int64_t o1) {
    transform_weights(weight, w_rs, O, C, rows, o0, o1, u.data());
  });

  const double flops = 2.0 * kPoints * static_cast<double>(O) * static_cast<double>(C) * static_cast<double>(T);
  const bool parallel = threads > 1 && items > 1 && flops >= static_cast<double>(kParallelGemmFlops);
  const std::int64_t slots = parallel ? std::min<std::int64_t>(threads, items) : 1;
  const std::int64_t k_step = sgemm_k_step(C), ldm = round_up(chunk, 16);
  const std::int64_t v_floats = kPoints * k_step * ldm, m_floats = kPoints * rows * ldm;
  const std::int64_t slot_floats = v_floats + m_floats;  // both multiples of 16: every block 64-byte aligned
  ScratchLease<float> scratch = rt.pool().scratch<float>(static_cast<std::size_t>(slots * slot_floats));

  const float* x = reinterpret_cast<const float*>(p.x);
  const float* bias = reinterpret_cast<const float*>(p.bias);
  float* out = reinterpret_cast<float*>(p.out);
  auto run_item = [&](std::int64_t item, std::int64_t slot) {
    const std::int64_t b = item % row_blocks, t0 = item / row_blocks * chunk, nt = std::min(T, t0 + chunk) - t0;
    const std::int64_t o0 = b * rows, mb = std::min(rows, O - o0);
    float* v = scratch.data() + slot * slot_floats;
    float* m = v + v_floats;
    const std::int64_t msize = mb * ldm;
    Piece pieces[kChunk];
    const std::int64_t count = list_pieces(w, xs, th, tw, t0, nt, 0, pieces);
    for (std::int64_t pc = 0; pc < C; pc += k_step) {
      const std::int64_t kc = std::min(k_step, C - pc), vsize = kc * round_up(nt, 16);
      transform_inputs(x, xs, pc, kc, nt, false, pieces, count, v, vsize);
      for (std::int64_t xi = 0; xi < kPoints; ++xi)
        sgemm_prepacked(mb, nt, kc, 1.0f, u.data() + xi * O * C + o0 * C + mb * pc, v + xi * vsize,
                        pc == 0 ? 0.0f : 1.0f, m + xi * msize, ldm);
    }
    transform_outputs(w, m, msize, ldm, o0, mb, bias, p.bias_stride, out, os, pieces, count);
  };
  run_by_slot(rt, items, slots, run_item);
  return true;
}

bool conv2d_winograd_weight_grad_f32(detail::DeviceRuntime& rt, const Conv2dBackwardProblem& p) {
  const Window2d& w = p.win;
  const Strides &xs = p.x_strides, &gs = p.grad_out_strides;
  const std::int64_t C = w.c, O = p.out_channels;
  if (!p.grad_weight || !takes(w, p.groups, O) || xs[3] != 1 || gs[3] != 1) return false;

  // Note [Winograd weight gradients]
  // The forward's Y = A^T [U * V] A is linear in U = G g G^T, so for an
  // output gradient dY the weight gradient of one tile is
  //   dW = G^T [(A dY A^T) * (B^T d B)] G,
  // and summed over tiles each of the 16 points is again a GEMM, now with
  // the tiles as k: M_xi[o, c] = sum_t Yhat_xi[o, t] V_xi[c, t]. Each
  // slot sums its chunks of tiles into its own M (sgemm packs both
  // operands from plain [rows, tiles] layouts: Yhat row-major, V^T column-
  // major); the slots' Ms are added, then G^T M G gives dW's 3x3 windows.
  const int threads = rt.threads();
  const std::int64_t th = (w.out_h + 1) / 2, tw = (w.out_w + 1) / 2, T = w.n * th * tw;
  // Chunks whose transformed tiles (16 x (O + C) x chunk floats) stay
  // near kGradTileFloats: 256 tiles up to 128 channels, 64 at 512.
  const std::int64_t most =
      std::clamp<std::int64_t>(kGradTileFloats / (kPoints * (O + C)) / 16 * 16, kMinGradChunk, kGradChunk);
  std::int64_t chunks = 0;
  const std::int64_t chunk = chunk_tiles(T, most, threads, chunks);
  const double flops = 2.0 * kPoints * static_cast<double>(O) * static_cast<double>(C) * static_cast<double>(T);
  const bool parallel = threads > 1 && chunks > 1 && flops >= static_cast<double>(kParallelGemmFlops);
  // Every slot takes at least one chunk (its first sets its M: beta 0).
  const std::int64_t slots = parallel ? std::min<std::int64_t>(threads, chunks) : 1;
  const std::int64_t m_floats = kPoints * O * C, y_floats = kPoints * O * chunk, v_floats = kPoints * C * chunk;
  // sgemm's scratch for both k = chunk and the last chunk's k: its mode
  // (and so its packing) depends on k (at O = 16, k >= 64 takes the dot
  // mode, which packs nothing, and a shorter last chunk the packed one).
  std::int64_t g_floats = 0;
  for (const std::int64_t k : {chunk, T - (chunks - 1) * chunk})
    g_floats = std::max(g_floats, static_cast<std::int64_t>(sgemm_scratch_floats(O, C, k, chunk, 1, 1, chunk)));
  const std::int64_t slot_floats = round_up(m_floats, 16) + y_floats + v_floats + round_up(g_floats, 16);
  ScratchLease<float> scratch = rt.pool().scratch<float>(static_cast<std::size_t>(slots * slot_floats));

  const float* x = reinterpret_cast<const float*>(p.x);
  const float* dy = reinterpret_cast<const float*>(p.grad_out);
  run_by_slot(rt, chunks, slots, [&](std::int64_t item, std::int64_t slot) {
    const std::int64_t t0 = item * chunk, nt = std::min(T, t0 + chunk) - t0;
    float* m = scratch.data() + slot * slot_floats;
    float* y = m + round_up(m_floats, 16);
    float* v = y + y_floats;
    float* gemm_scratch = v + v_floats;
    Piece pieces[kGradChunk];
    const std::int64_t count = list_pieces(w, xs, th, tw, t0, nt, chunk, pieces);
    transform_grads(w, dy, gs, O, pieces, count, chunk, y, O * chunk);
    transform_inputs(x, xs, 0, C, nt, true, pieces, count, v, C * chunk);
    const float beta = item == chunks * slot / slots ? 0.0f : 1.0f;  // the slot's first chunk
    for (std::int64_t xi = 0; xi < kPoints; ++xi)
      sgemm(O, C, nt, 1.0f, y + xi * O * chunk, chunk, 1, v + xi * C * chunk, 1, chunk, beta, m + xi * O * C, C,
            gemm_scratch);
  });

  float* m = scratch.data();
  if (slots > 1)
    rt.parallel_for(m_floats, kGrainElements / slots, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t s = 1; s < slots; ++s) {
        const float* other = scratch.data() + s * slot_floats;
        for (std::int64_t i = i0; i < i1; ++i) m[i] += other[i];
      }
    });
  float* gw = reinterpret_cast<float*>(p.grad_weight);
  rt.parallel_for(O, std::max<std::int64_t>(1, kGrainElements / (kPoints * C)),
                  [&](std::int64_t o0, std::int64_t o1) { transform_weight_grads(m, O, C, o0, o1, gw); });
  return true;
}

}  // namespace forge::cpu

#else

namespace forge::cpu {
bool conv2d_winograd_f32(detail::DeviceRuntime&, const Conv2dProblem&, const float*, std::int64_t) { return false; }
bool conv2d_winograd_weight_grad_f32(detail::DeviceRuntime&, const Conv2dBackwardProblem&) { return false; }
}  // namespace forge::cpu

#endif
