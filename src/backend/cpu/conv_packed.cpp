// conv2d's f32 forward on AVX-512 cores: im2col written straight into the
// packed GEMM's B panels, against weights packed once per call.
//
// Policy:
// - The weights are packed into sgemm's A layout once per call (per group),
//   not once per column tile: at 256 channels a [256, 2304] weight matrix
//   is 2.4 MB, and repacking it for every ~100-column tile of a 14x14 image
//   cost as much time as packing the columns (perf: 7.5 % of the layer in
//   the transposes alone). With fewer than kPrepackUses items per row of
//   weights (a batch of one), packing as the GEMM goes costs less.
// - The column matrix is never stored whole: sgemm_fill_b asks for one
//   [kc, nc] block at a time, and im2col writes that block into B's panels
//   directly (Note [im2col into panels]). The copy sgemm's packing made of
//   every column (7 % of a [32, 64, 56, 56] layer) is gone, and a block is
//   built in L2 just before the micro-kernels read it.
// - Work items are (image, group, chunk of positions, block of output
//   channels). A chunk is a whole image when there are enough images to
//   share out, and otherwise a multiple of 48 positions, so that only an
//   image's last panel is ragged (a 98-column tile ran one 2-column panel
//   per 96 columns). Small images with few items (a batch of one at 7x7)
//   are cut by output channels instead: the old path's self-splitting GEMM
//   did that, and one item per image left a thread idle.
// - Items split statically over one slot per thread (each slot's panels
//   leased up front, as Note [Worker scratch] asks).
// - Output widths under 4 (unless pointwise), layers with no input
//   channels, and builds without AVX-512 keep conv_kernels.cpp's path
//   (im2col into a tile, then gemm).

#include "backend/cpu/conv_packed.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_blocks.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/simd_lanes.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

using gemm_blocks::round_up;

// The widest B block one fill writes (sgemm's own packed path uses 768).
constexpr std::int64_t kNcCap = 768;
// Items are cut no finer than this many positions, or output channels.
constexpr std::int64_t kMinChunk = 192, kMinRows = 32;
// The weights are packed up front when this many items share each row.
constexpr std::int64_t kPrepackUses = 4;
// Output widths from this up keep a block's pieces within kMaxPieces.
constexpr std::int64_t kMinOutW = 4;

// The row pitch of the panel starting at column j0 of a block nc wide:
// 48, or the last panel's columns rounded up to whole vectors.
inline std::int64_t panel_width(std::int64_t nc, std::int64_t j0) {
  return std::min(kSgemmPanelCols, round_up(nc - j0, 16));
}

// Where position q of row p of a block [kc, nc] goes in sgemm's panels.
inline std::int64_t panel_offset(std::int64_t kc, std::int64_t nc, std::int64_t p, std::int64_t q) {
  const std::int64_t j0 = q / kSgemmPanelCols * kSgemmPanelCols;
  return j0 * kc + p * panel_width(nc, j0) + (q - j0);
}

// Note [im2col into panels]
// A block of the column matrix is stored panel by panel, 48 positions to a
// panel row. Its positions are cut into pieces: at most 16 of them, in one
// output row and one panel. A piece of column-matrix row (c, kh, kw) reads
// input row ih = oh * stride_h + kh * dilation_h - pad_h; at unit stride it
// is a shifted copy of that row, one masked load (zero where the window
// hangs over the edge) and one masked store; at stride 2 two loads and a
// permute keep the even columns. The pieces, and for each kw the lanes
// that fall inside the image, depend only on the positions, so a block's
// are listed once and serve its kc rows. (Gathering each 16-lane vector
// from the rows it crosses instead chained two or three merging loads per
// vector, and cost a third of a 14x14 layer.)
struct Piece {
  std::int64_t dst;    // where row 0 of the piece goes in the panels
  std::int64_t width;  // its panel's row pitch
  std::int64_t oh_s;   // oh * stride_h of its output row
  std::int64_t ow;     // the output column of its first lane
  __mmask16 lanes;     // the lanes it holds
};

constexpr std::int64_t kMaxPieces = kNcCap / kSgemmPanelCols + kNcCap / kMinOutW + kNcCap / 16 + 2;
constexpr std::int64_t kMaskedKw = 7;  // kernel widths whose masks are listed up front

// Pieces of positions [q0, q0 + nc) of a block [kc, nc]; returns their count.
std::int64_t list_pieces(const Window2d& w, std::int64_t kc, std::int64_t q0, std::int64_t nc, Piece* pieces) {
  std::int64_t count = 0, oh = q0 / w.out_w, ow = q0 % w.out_w;
  for (std::int64_t q = 0; q < nc;) {
    const std::int64_t j0 = q / kSgemmPanelCols * kSgemmPanelCols;
    const std::int64_t len = std::min({nc - q, w.out_w - ow, j0 + kSgemmPanelCols - q, std::int64_t{16}});
    pieces[count++] = {panel_offset(kc, nc, 0, q), panel_width(nc, j0), oh * w.stride_h, ow, lanes16(len)};
    q += len;
    ow += len;
    if (ow == w.out_w) {
      ow = 0;
      ++oh;
    }
  }
  return count;
}

// Output columns [lo, hi) whose input column ow * stride_w + dw is inside.
inline void inside_columns(const Window2d& w, std::int64_t dw, std::int64_t& lo, std::int64_t& hi) {
  lo = dw >= 0 ? 0 : (-dw + w.stride_w - 1) / w.stride_w;
  hi = w.w - dw <= 0 ? 0 : std::min(w.out_w, (w.w - dw + w.stride_w - 1) / w.stride_w);
}

inline __mmask16 inside_lanes(std::int64_t ow, std::int64_t lo, std::int64_t hi) {
  return lanes16(hi - ow) & ~lanes16(lo - ow);
}

// The piece's values from input row `row` (its column 0): lane i is input
// column (ow + i) * stride + dw, read at element stride xs3; lanes outside
// `valid` are zero and not read.
inline __m512 read_piece(const float* row, std::int64_t ow, std::int64_t dw, std::int64_t stride, std::int64_t xs3,
                         __mmask16 valid) {
  if (xs3 == 1 && stride == 1) return _mm512_maskz_loadu_ps(valid, row + ow + dw);
#if defined(__BMI2__)
  if (xs3 == 1 && stride == 2) {
    // Lane i is element 2i of the 32 from 2 * ow + dw.
    const float* src = row + 2 * ow + dw;
    const __m512 v0 = _mm512_maskz_loadu_ps(__mmask16(_pdep_u32(valid & 0xFFu, 0x5555u)), src);
    const __m512 v1 = _mm512_maskz_loadu_ps(__mmask16(_pdep_u32(valid >> 8, 0x5555u)), src + 16);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(v0, even, v1);
  }
#endif
  alignas(64) float lanes[16] = {};
  for (int i = 0; i < 16; ++i)
    if (valid >> i & 1) lanes[i] = row[((ow + i) * stride + dw) * xs3];
  return _mm512_load_ps(lanes);
}

// Rows [r0, r0 + kc) of one image-group's column matrix, positions
// [q0, q0 + nc), into panels; x points at the group's first channel. The
// rows come in groups, one per (c, kh): the kW rows of a group read the
// same input row, so each piece's row and bounds are worked out once for
// the group (per row, that bookkeeping was most of im2col's time on 14- and
// 28-wide images).
void im2col_panels(const Window2d& w, const float* x, const Strides& xs, std::int64_t r0, std::int64_t kc,
                   std::int64_t q0, std::int64_t nc, float* panels) {
  Piece pieces[kMaxPieces];
  const std::int64_t count = list_pieces(w, kc, q0, nc, pieces);
  // The lanes of each piece inside the image, per kw (kernel widths up to kMaskedKw).
  __mmask16 inside[kMaskedKw][kMaxPieces];
  const bool listed = w.kernel_w <= kMaskedKw;
  if (listed) {
    for (std::int64_t kw = 0; kw < w.kernel_w; ++kw) {
      std::int64_t lo, hi;
      inside_columns(w, kw * w.dilation_w - w.pad_w, lo, hi);
      for (std::int64_t i = 0; i < count; ++i) inside[kw][i] = inside_lanes(pieces[i].ow, lo, hi) & pieces[i].lanes;
    }
  }
  // The last panel's lanes past nc, up to its whole vectors, stay zero.
  const std::int64_t padded = round_up(nc, 16);
  if (padded > nc)
    for (std::int64_t p = 0; p < kc; ++p)
      _mm512_mask_storeu_ps(panels + panel_offset(kc, nc, p, nc), lanes16(padded - nc), _mm512_setzero_ps());
  const std::int64_t taps = w.kernel_h * w.kernel_w;
  const bool unit = listed && w.stride_w == 1 && xs[3] == 1;  // rows are shifted copies, masks listed
  for (std::int64_t p = 0; p < kc;) {
    const std::int64_t r = r0 + p, c = r / taps, kh = r % taps / w.kernel_w, kw0 = r % w.kernel_w;
    const std::int64_t group = std::min(w.kernel_w - kw0, kc - p);  // rows (c, kh, kw0 ...) in this block
    const float* plane = x + c * xs[1];
    const std::int64_t dh = kh * w.dilation_h - w.pad_h;
    for (std::int64_t i = 0; i < count; ++i) {
      const Piece& g = pieces[i];
      const std::int64_t ih = g.oh_s + dh;
      float* d = panels + g.dst + p * g.width;
      if (ih < 0 || ih >= w.h) {
        for (std::int64_t k = 0; k < group; ++k) _mm512_mask_storeu_ps(d + k * g.width, g.lanes, _mm512_setzero_ps());
      } else if (unit) {  // row kw is the input row from column g.ow + kw * dilation - pad_w
        const float* src = plane + ih * xs[2] + g.ow + kw0 * w.dilation_w - w.pad_w;
        for (std::int64_t k = 0; k < group; ++k)
          _mm512_mask_storeu_ps(d + k * g.width, g.lanes,
                                _mm512_maskz_loadu_ps(inside[kw0 + k][i], src + k * w.dilation_w));
      } else {
        for (std::int64_t k = 0; k < group; ++k) {
          const std::int64_t kw = kw0 + k, dw = kw * w.dilation_w - w.pad_w;
          std::int64_t lo = 0, hi = 0;
          if (!listed) inside_columns(w, dw, lo, hi);
          const __mmask16 valid = listed ? inside[kw][i] : inside_lanes(g.ow, lo, hi) & g.lanes;
          _mm512_mask_storeu_ps(d + k * g.width, g.lanes,
                                read_piece(plane + ih * xs[2], g.ow, dw, w.stride_w, xs[3], valid));
        }
      }
    }
    p += group;
  }
}

// The pointwise case (1x1, stride 1, unpadded, flat planes): row c of the
// column matrix is channel c's plane itself.
void copy_panels(const float* x, std::int64_t channel_stride, std::int64_t r0, std::int64_t kc, std::int64_t q0,
                 std::int64_t nc, float* panels) {
  // Panel by panel, as sgemm's pack_b: each panel is written in order.
  for (std::int64_t j0 = 0; j0 < nc; j0 += kSgemmPanelCols) {
    const std::int64_t cols = std::min(kSgemmPanelCols, nc - j0), width = panel_width(nc, j0);
    const float* src = x + r0 * channel_stride + q0 + j0;
    float* dst = panels + j0 * kc;
    for (std::int64_t p = 0; p < kc; ++p, src += channel_stride, dst += width)
      for (std::int64_t v = 0; v < width; v += 16)
        _mm512_storeu_ps(dst + v, _mm512_maskz_loadu_ps(lanes16(cols - v), src + v));
  }
}

}  // namespace

bool conv2d_packed_f32(detail::DeviceRuntime& rt, const Conv2dProblem& p, const float* weight, std::int64_t w_rs) {
  const Window2d& w = p.win;
  const std::int64_t G = p.groups, Cg = w.c / G, Og = p.out_channels / G;
  const std::int64_t K = Cg * w.kernel_h * w.kernel_w, P = w.out_h * w.out_w;
  const Strides &xs = p.x_strides, &os = p.out_strides;
  const bool pointwise = unit_window(w) && spatial_is_flat(w.h, w.w, xs);
  // K == 0 (no input channels) leaves the output to the tiled path's
  // bias-or-zero fill: a GEMM with k = 0 here would write nothing.
  if (!sgemm_available() || K == 0 || (w.out_w < kMinOutW && !pointwise)) return false;

  // Items: (image, group, chunk of positions, block of output channels),
  // enough of them for every thread to get a few. Positions are cut first,
  // into multiples of 48 of at least kMinChunk; a small image with many
  // channels (a batch of one at 7x7) is cut by channels, 8 rows at a time,
  // into no more blocks than threads.
  const int threads = rt.threads();
  const std::int64_t images = w.n * G, wanted = 4 * static_cast<std::int64_t>(threads);
  const std::int64_t by_positions =
      std::clamp<std::int64_t>((wanted + images - 1) / images, 1, std::max<std::int64_t>(1, P / kMinChunk));
  const std::int64_t chunk = std::min(P, round_up((P + by_positions - 1) / by_positions, kSgemmPanelCols));
  const std::int64_t chunks = (P + chunk - 1) / chunk;
  // Every block of rows builds the same columns again: one block per thread.
  const std::int64_t by_rows = std::clamp<std::int64_t>((threads + images * chunks - 1) / (images * chunks), 1,
                                                        std::max<std::int64_t>(1, Og / kMinRows));
  const std::int64_t rows = std::min(Og, round_up((Og + by_rows - 1) / by_rows, 8));
  const std::int64_t row_blocks = (Og + rows - 1) / rows, items = images * chunks * row_blocks;

  // The weights are packed once when enough items share them (each block
  // of rows as its own A: sgemm_pack_a's layout is per row count), in
  // parallel, 8 rows at a time. Otherwise each item packs its block of A
  // as it goes: at a batch of one and 512 channels of 3x3, packing 9.4 MB
  // up front and reading it back cost more than the rest of the layer.
  const bool prepack = images * chunks >= kPrepackUses;
  ScratchLease<float> a_packed;
  if (prepack) {
    a_packed = rt.pool().scratch<float>(static_cast<std::size_t>(G * Og * K));
    const std::int64_t row_panels = (Og + 7) / 8;
    rt.parallel_for(G * row_panels, std::max<std::int64_t>(1, kGrainElements / (8 * K)),
                    [&](std::int64_t u0, std::int64_t u1) {
                      for (std::int64_t u = u0; u < u1; ++u) {
                        const std::int64_t g = u / row_panels, r = u % row_panels * 8;       // row r of group g
                        const std::int64_t o = r / rows * rows, m = std::min(rows, Og - o);  // its block
                        sgemm_pack_a(m, K, weight + (g * Og + o) * w_rs, w_rs, 1, a_packed.data() + (g * Og + o) * K,
                                     r - o, std::min(r - o + 8, m));
                      }
                    });
  }

  const double flops =
      static_cast<double>(Og) * static_cast<double>(K) * static_cast<double>(P) * static_cast<double>(images);
  const bool parallel = threads > 1 && items > 1 && flops >= static_cast<double>(kParallelGemmFlops);
  const std::int64_t slots = parallel ? std::min<std::int64_t>(threads, items) : 1;
  // Whole cache lines per slot, so that every slot's panels start 64-byte aligned.
  const std::size_t slot_floats = static_cast<std::size_t>(
      round_up(static_cast<std::int64_t>(sgemm_fill_scratch_floats(rows, chunk, K, kNcCap, prepack)), 16));
  ScratchLease<float> panels = rt.pool().scratch<float>(static_cast<std::size_t>(slots) * slot_floats);

  const float* x = reinterpret_cast<const float*>(p.x);
  const float* bias = reinterpret_cast<const float*>(p.bias);
  float* out = reinterpret_cast<float*>(p.out);
  auto run_item = [&](std::int64_t item, std::int64_t slot) {
    const std::int64_t b = item % row_blocks, t = item / row_blocks % chunks;
    const std::int64_t g = item / (row_blocks * chunks) % G, n = item / (row_blocks * chunks * G);
    const std::int64_t q0 = t * chunk, nq = std::min(P, q0 + chunk) - q0;
    const std::int64_t o0 = g * Og + b * rows, m = std::min(rows, Og - b * rows);  // output channels [o0, o0 + m)
    const float* xg = x + n * xs[0] + g * Cg * xs[1];
    float* c = out + n * os[0] + o0 * os[1] + q0;
    float beta = 0;
    if (bias) {
      for (std::int64_t o = 0; o < m; ++o) std::fill_n(c + o * os[1], nq, bias[(o0 + o) * p.bias_stride]);
      beta = 1;
    }
    const auto fill = [&](std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc, float* dst) {
      if (pointwise)
        copy_panels(xg, xs[1], pc, kc, q0 + jc, nc, dst);
      else
        im2col_panels(w, xg, xs, pc, kc, q0 + jc, nc, dst);
    };
    SgemmA a;
    if (prepack)
      a.packed = a_packed.data() + o0 * K;
    else
      a = {nullptr, weight + o0 * w_rs, w_rs, 1};
    sgemm_fill_b(m, nq, K, 1.0f, a, sgemm_fill_ref(fill), kNcCap, beta, c, os[1],
                 panels.data() + static_cast<std::size_t>(slot) * slot_floats);
  };
  run_by_slot(rt, items, slots, run_item);
  return true;
}

}  // namespace forge::cpu

#else

namespace forge::cpu {
bool conv2d_packed_f32(detail::DeviceRuntime&, const Conv2dProblem&, const float*, std::int64_t) { return false; }
}  // namespace forge::cpu

#endif
