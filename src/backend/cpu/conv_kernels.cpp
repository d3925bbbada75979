// conv2d as im2col + GEMM. The f32 forward on AVX-512 cores goes through
// conv_winograd.cpp for 3x3 windows at stride 1 (Winograd F(2x2, 3x3)),
// and otherwise through conv_packed.cpp, which writes the column matrix
// straight into the GEMM's packed panels. Elsewhere (f64, builds without
// AVX-512, outputs under 4 columns wide) the output's spatial positions
// are cut into tiles whose column matrix ([C/groups * kH * kW, tile])
// stays in L2; each (image, group, tile) item is one GEMM of the group's
// weights [O/groups, K] with the tile's columns, written straight into the
// output with the bias already in place. Items go to threads (one pooled scratch slot per
// thread) when there are enough of them; otherwise each GEMM splits itself.
// A pointwise (1x1, stride 1, unpadded) convolution reads its columns from
// x directly. The backward runs the same column tiles the other way (Note
// [conv2d backward]), except that at stride 1 the input gradient is a
// forward convolution of the output gradient (Note [conv2d input gradient
// as a forward]). Pools and their gradients are direct loops, parallel over
// the N * C planes.

#include "backend/cpu/conv_kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "backend/cpu/simd_lanes.h"
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/conv_packed.h"
#include "backend/cpu/conv_winograd.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/pool2x2.h"
#include "core/convert.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

// A tile's column matrix aims at this many bytes (about L2; measured on a
// [32, 64, 56, 56] x [64, 64, 3, 3] layer, 192 to 768 columns all come
// within a few percent, whole images lose ~20%).
constexpr std::int64_t kTileBytes = 1024 * 1024;

// Rows [(c * kH + kh) * kW + kw] of the column matrix for output positions
// [p0, p1) of one image-group; x points at the group's first channel.
// The borders are a few elements per row: GCC would turn their loops into
// memset calls, which cost more than the stores.
#if defined(__GNUC__) && !defined(__clang__)
#define FORGE_NO_MEMSET_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define FORGE_NO_MEMSET_CALLS
#endif

template <typename T>
FORGE_NO_MEMSET_CALLS void zero(T* d, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) d[i] = T(0);
}

#if defined(__AVX512F__)
// im2col for f32 at unit column stride and step (stride_w == 1, dilation_w
// == 1, xs[3] == 1), 16 positions per masked load and store: a row of the
// column matrix is runs of out_w positions, each a shifted input row with
// zeros where the window hangs over the edge, and at small images (14 or
// 28 wide) the general loop's per-run bookkeeping cost more than the copy.
void im2col_unit_f32(const Window2d& w, std::int64_t channels, const float* x, const Strides& xs, std::int64_t p0,
                     std::int64_t p1, float* col) {
  const std::int64_t cols = p1 - p0;
  // The kW rows of one (c, kh) copy the same input row at kW shifts, so each
  // output row's bounds are worked out once for all of them (per row, that
  // bookkeeping was a fifth of the weight gradient's im2col at 14x14).
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* plane = x + c * xs[1];
    for (std::int64_t kh = 0; kh < w.kernel_h; ++kh) {
      float* d = col + (c * w.kernel_h + kh) * w.kernel_w * cols - p0;  // d[p] is position p of row (c, kh, 0)
      std::int64_t oh = p0 / w.out_w, ow0 = p0 % w.out_w;
      for (std::int64_t p = p0; p < p1; ++oh, ow0 = 0) {
        const std::int64_t ow1 = std::min(w.out_w, ow0 + (p1 - p));
        const std::int64_t ih = oh * w.stride_h - w.pad_h + kh * w.dilation_h;
        const bool inside = ih >= 0 && ih < w.h;
        const float* s = plane + ih * xs[2] - w.pad_w;  // s[ow + kw] is input column ow + kw - pad_w
        float* row = d + p - ow0;                       // row[kw * cols + ow] is position (oh, ow) of row (c, kh, kw)
        for (std::int64_t ow = ow0; ow < ow1; ow += 16) {
          const __mmask16 store = lanes16(ow1 - ow);
          for (std::int64_t kw = 0; kw < w.kernel_w; ++kw) {
            // Input columns ow + kw - pad_w inside [0, w.w).
            const std::int64_t lo = w.pad_w - kw, hi = w.w + w.pad_w - kw;
            const __mmask16 valid = inside ? __mmask16(lanes16(hi - ow) & ~lanes16(lo - ow)) : __mmask16(0);
            _mm512_mask_storeu_ps(row + kw * cols + ow, store, _mm512_maskz_loadu_ps(valid, s + ow + kw));
          }
        }
        p += ow1 - ow0;
      }
    }
  }
}

// col2im's adjoint of im2col_unit_f32: adds each run back onto its input row.
void col2im_unit_f32(const Window2d& w, std::int64_t channels, const float* col, std::int64_t p0, std::int64_t p1,
                     float* x) {
  const std::int64_t cols = p1 - p0;
  for (std::int64_t c = 0; c < channels; ++c) {
    float* plane = x + c * w.h * w.w;
    for (std::int64_t kh = 0; kh < w.kernel_h; ++kh) {
      for (std::int64_t kw = 0; kw < w.kernel_w; ++kw) {
        const float* src = col + ((c * w.kernel_h + kh) * w.kernel_w + kw) * cols - p0;  // src[p] is position p
        const std::int64_t off_w = kw - w.pad_w;
        const std::int64_t lo = std::max<std::int64_t>(0, -off_w), hi = std::min(w.out_w, w.w - off_w);
        std::int64_t oh = p0 / w.out_w, ow0 = p0 % w.out_w;
        for (std::int64_t p = p0; p < p1; ++oh, ow0 = 0) {
          const std::int64_t ow1 = std::min(w.out_w, ow0 + (p1 - p));
          const std::int64_t ih = oh * w.stride_h - w.pad_h + kh * w.dilation_h;
          if (ih >= 0 && ih < w.h) {
            float* d = plane + ih * w.w + off_w;  // d[ow] is input column ow + off_w
            const float* row = src + p - ow0;     // row[ow] is position (oh, ow)
            for (std::int64_t ow = ow0; ow < ow1; ow += 16) {
              const __mmask16 valid = lanes16(std::min(hi, ow1) - ow) & ~lanes16(lo - ow);
              _mm512_mask_storeu_ps(
                  d + ow, valid,
                  _mm512_add_ps(_mm512_maskz_loadu_ps(valid, d + ow), _mm512_maskz_loadu_ps(valid, row + ow)));
            }
          }
          p += ow1 - ow0;
        }
      }
    }
  }
}
#endif

template <typename T>
FORGE_NO_MEMSET_CALLS void im2col(const Window2d& w, std::int64_t channels, const T* x, const Strides& xs,
                                  std::int64_t p0, std::int64_t p1, T* col) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (w.stride_w == 1 && w.dilation_w == 1 && xs[3] == 1) {
      im2col_unit_f32(w, channels, x, xs, p0, p1, col);
      return;
    }
  }
#endif
  const std::int64_t cols = p1 - p0;
  for (std::int64_t c = 0; c < channels; ++c) {
    const T* plane = x + c * xs[1];
    for (std::int64_t kh = 0; kh < w.kernel_h; ++kh) {
      for (std::int64_t kw = 0; kw < w.kernel_w; ++kw) {
        T* dst = col + ((c * w.kernel_h + kh) * w.kernel_w + kw) * cols;
        const std::int64_t off_w = kw * w.dilation_w - w.pad_w;
        // ow with 0 <= ow * stride_w + off_w < w.w
        const std::int64_t ow_lo = off_w >= 0 ? 0 : (-off_w + w.stride_w - 1) / w.stride_w;
        const std::int64_t ow_hi =
            w.w - off_w <= 0 ? 0 : std::min(w.out_w, (w.w - off_w + w.stride_w - 1) / w.stride_w);
        std::int64_t p = p0;
        while (p < p1) {
          const std::int64_t oh = p / w.out_w, ow0 = p % w.out_w;
          const std::int64_t ow1 = std::min(w.out_w, ow0 + (p1 - p));
          T* d = dst + (p - p0) - ow0;  // d[ow] is position (oh, ow)
          const std::int64_t ih = oh * w.stride_h - w.pad_h + kh * w.dilation_h;
          if (ih < 0 || ih >= w.h) {
            zero(d, ow0, ow1);
          } else {
            const T* row = plane + ih * xs[2];
            const std::int64_t lo = std::clamp(ow_lo, ow0, ow1), hi = std::clamp(ow_hi, lo, ow1);
            zero(d, ow0, lo);
            if (w.stride_w == 1 && xs[3] == 1) {
              const T* s = row + off_w;
              for (std::int64_t ow = lo; ow < hi; ++ow) d[ow] = s[ow];
            } else {
              for (std::int64_t ow = lo; ow < hi; ++ow) d[ow] = row[(ow * w.stride_w + off_w) * xs[3]];
            }
            zero(d, hi, ow1);
          }
          p += ow1 - ow0;
        }
      }
    }
  }
}

// The adjoint of im2col: adds row [(c * kH + kh) * kW + kw] of the column
// matrix for positions [p0, p1) back onto the taps they were read from, in a
// contiguous [channels, H, W] block (overlapping windows accumulate).
template <typename T>
void col2im(const Window2d& w, std::int64_t channels, const T* col, std::int64_t p0, std::int64_t p1, T* x) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (w.stride_w == 1 && w.dilation_w == 1) {
      col2im_unit_f32(w, channels, col, p0, p1, x);
      return;
    }
  }
#endif
  const std::int64_t cols = p1 - p0;
  for (std::int64_t c = 0; c < channels; ++c) {
    T* plane = x + c * w.h * w.w;
    for (std::int64_t kh = 0; kh < w.kernel_h; ++kh) {
      for (std::int64_t kw = 0; kw < w.kernel_w; ++kw) {
        const T* src = col + ((c * w.kernel_h + kh) * w.kernel_w + kw) * cols;
        const std::int64_t off_w = kw * w.dilation_w - w.pad_w;
        const std::int64_t ow_lo = off_w >= 0 ? 0 : (-off_w + w.stride_w - 1) / w.stride_w;
        const std::int64_t ow_hi =
            w.w - off_w <= 0 ? 0 : std::min(w.out_w, (w.w - off_w + w.stride_w - 1) / w.stride_w);
        std::int64_t p = p0;
        while (p < p1) {
          const std::int64_t oh = p / w.out_w, ow0 = p % w.out_w;
          const std::int64_t ow1 = std::min(w.out_w, ow0 + (p1 - p));
          const T* s = src + (p - p0) - ow0;  // s[ow] is position (oh, ow)
          const std::int64_t ih = oh * w.stride_h - w.pad_h + kh * w.dilation_h;
          if (ih >= 0 && ih < w.h) {
            T* row = plane + ih * w.w;
            const std::int64_t lo = std::clamp(ow_lo, ow0, ow1), hi = std::clamp(ow_hi, lo, ow1);
            if (w.stride_w == 1) {
              T* d = row + off_w;
              for (std::int64_t ow = lo; ow < hi; ++ow) d[ow] += s[ow];
            } else {
              for (std::int64_t ow = lo; ow < hi; ++ow) row[ow * w.stride_w + off_w] += s[ow];
            }
          }
          p += ow1 - ow0;
        }
      }
    }
  }
}

// The tile of output positions whose [K, tile] column matrix stays near kTileBytes.
template <typename T>
std::int64_t column_tile(std::int64_t K, std::int64_t P) {
  std::int64_t tile =
      std::max<std::int64_t>(64, kTileBytes / static_cast<std::int64_t>(sizeof(T)) / std::max<std::int64_t>(K, 1));
  tile = std::min(P, tile / 16 * 16);
  const std::int64_t tiles = (P + tile - 1) / tile;
  return (P + tiles - 1) / tiles;  // even tiles
}

// The weights [O, Cg, kH, kW] as an [O, K] matrix with unit column stride
// (row stride in rs): in place when their layout allows, else packed into `packed`.
template <typename T>
const T* flat_weights(detail::DeviceRuntime& rt, const Window2d& w, std::int64_t out_channels, std::int64_t Cg,
                      const std::byte* data, const Strides& ws, ScratchLease<T>& packed, std::int64_t& rs) {
  const T* weight = reinterpret_cast<const T*>(data);
  const std::int64_t K = Cg * w.kernel_h * w.kernel_w;
  const bool flat = (w.kernel_w == 1 || ws[3] == 1) && (w.kernel_h == 1 || ws[2] == w.kernel_w) &&
                    (Cg == 1 || ws[1] == w.kernel_h * w.kernel_w);
  rs = ws[0];
  if (flat) return weight;
  packed = rt.pool().scratch<T>(static_cast<std::size_t>(out_channels * K));
  for (std::int64_t o = 0; o < out_channels; ++o)
    for (std::int64_t c = 0; c < Cg; ++c)
      for (std::int64_t kh = 0; kh < w.kernel_h; ++kh)
        for (std::int64_t kw = 0; kw < w.kernel_w; ++kw)
          packed[static_cast<std::size_t>(((o * Cg + c) * w.kernel_h + kh) * w.kernel_w + kw)] =
              weight[o * ws[0] + c * ws[1] + kh * ws[2] + kw * ws[3]];
  rs = K;
  return packed.data();
}

template <typename T>
void conv2d_typed(detail::DeviceRuntime& rt, const Conv2dProblem& p) {
  const Window2d& w = p.win;
  const std::int64_t G = p.groups, Cg = w.c / G, Og = p.out_channels / G;
  const std::int64_t K = Cg * w.kernel_h * w.kernel_w, P = w.out_h * w.out_w;
  if (w.n == 0 || p.out_channels == 0 || P == 0) return;
  const T* x = reinterpret_cast<const T*>(p.x);
  const T* bias = reinterpret_cast<const T*>(p.bias);
  T* out = reinterpret_cast<T*>(p.out);
  const Strides& xs = p.x_strides;
  const Strides& os = p.out_strides;

  std::int64_t w_rs = 0;
  ScratchLease<T> packed_w;
  const T* weight = flat_weights<T>(rt, w, p.out_channels, Cg, p.weight, p.weight_strides, packed_w, w_rs);
  if constexpr (std::is_same_v<T, float>) {
    if (conv2d_winograd_f32(rt, p, weight, w_rs) || conv2d_packed_f32(rt, p, weight, w_rs)) return;
  }

  const bool pointwise = unit_window(w) && spatial_is_flat(w.h, w.w, xs);
  const std::int64_t tile = pointwise ? P : column_tile<T>(K, P);
  const std::int64_t tiles = (P + tile - 1) / tile;
  const std::int64_t items = w.n * G * tiles;
  const double flops = static_cast<double>(Og) * static_cast<double>(K) * static_cast<double>(tile);
  const int threads = rt.threads();
  const bool by_item = threads > 1 && items >= 2 * threads &&
                       flops * static_cast<double>(items) >= static_cast<double>(kParallelGemmFlops);
  const std::int64_t slots = by_item ? threads : 1;
  ScratchLease<T> cols;
  if (!pointwise) cols = rt.pool().scratch<T>(static_cast<std::size_t>(slots * K * tile));

  auto run_item = [&](std::int64_t item, std::int64_t slot) {
    const std::int64_t t = item % tiles, g = (item / tiles) % G, n = item / (tiles * G);
    const std::int64_t p0 = t * tile, p1 = std::min(P, p0 + tile);
    const T* xg = x + n * xs[0] + g * Cg * xs[1];
    const T* col;
    std::int64_t col_rs;
    if (pointwise) {
      col = xg + p0;
      col_rs = xs[1];
    } else {
      T* buf = cols.data() + slot * K * tile;
      im2col(w, Cg, xg, xs, p0, p1, buf);
      col = buf;
      col_rs = p1 - p0;
    }
    T* c = out + n * os[0] + g * Og * os[1] + p0;
    T beta = 0;
    if (bias) {
      for (std::int64_t o = 0; o < Og; ++o)
        std::fill(c + o * os[1], c + o * os[1] + (p1 - p0), bias[(g * Og + o) * p.bias_stride]);
      beta = 1;
    }
    gemm(rt, !by_item, Og, p1 - p0, K, T(1), weight + g * Og * w_rs, w_rs, 1, col, col_rs, 1, beta, c, os[1], 1);
  };
  if (!by_item) {
    for (std::int64_t i = 0; i < items; ++i) run_item(i, 0);
    return;
  }
  const WorkerScratch gemm_scratch(rt, slots, gemm_scratch_bytes(dtype_of<T>::value, Og, std::min(tile, P), K));
  rt.parallel_for(slots, 1, [&](std::int64_t s0, std::int64_t s1) {
    for (std::int64_t s = s0; s < s1; ++s) {
      const WorkerScratch::Lend lend = gemm_scratch.lend(s);
      for (std::int64_t i = items * s / slots; i < items * (s + 1) / slots; ++i) run_item(i, s);
    }
  });
}

// Note [conv2d input gradient as a forward]
// At stride 1 the input gradient is itself a convolution: grad_x =
// conv2d(grad_out, W') with W'[g*Cg + c, o, kh, kw] = W[g*Og + o, c, kH-1-kh,
// kW-1-kw] (each group's weights transposed and flipped), the same
// dilation, and padding (k - 1) * dilation - pad on each axis. Run that way
// it takes the forward's path (its columns written straight into the GEMM's
// panels) instead of a GEMM with k = O / groups into a column buffer that
// col2im then scatters back; wider padding than (k - 1) * dilation, and
// strides, keep the column path, as do layers with few input channels per
// group: the forward's GEMM would have that many rows (the Fashion-MNIST
// example's first layer, one channel, ran 2.8x slower that way; at 32 and
// 64 channels it is 4-6 % faster, at 128 and 256 about 7 %).
constexpr std::int64_t kMinForwardChannels = 16;

bool input_grad_is_a_forward(const Window2d& w, std::int64_t groups) {
  return w.stride_h == 1 && w.stride_w == 1 && w.pad_h <= (w.kernel_h - 1) * w.dilation_h &&
         w.pad_w <= (w.kernel_w - 1) * w.dilation_w && w.c / groups >= kMinForwardChannels;
}

template <typename T>
void input_grad_as_forward(detail::DeviceRuntime& rt, const Conv2dBackwardProblem& p) {
  const Window2d& w = p.win;
  const std::int64_t G = p.groups, Cg = w.c / G, Og = p.out_channels / G, taps = w.kernel_h * w.kernel_w;
  const T* weight = reinterpret_cast<const T*>(p.weight);
  const Strides& ws = p.weight_strides;
  ScratchLease<T> flipped = rt.pool().scratch<T>(static_cast<std::size_t>(w.c * Og * taps));
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < Cg; ++c)
      for (std::int64_t o = 0; o < Og; ++o)
        for (std::int64_t kh = 0; kh < w.kernel_h; ++kh)
          for (std::int64_t kw = 0; kw < w.kernel_w; ++kw)
            flipped[static_cast<std::size_t>(((g * Cg + c) * Og + o) * taps + kh * w.kernel_w + kw)] =
                weight[(g * Og + o) * ws[0] + c * ws[1] + (w.kernel_h - 1 - kh) * ws[2] +
                       (w.kernel_w - 1 - kw) * ws[3]];
  Conv2dProblem q;
  q.dtype = p.dtype;
  q.win = w;
  q.win.c = p.out_channels;
  q.win.h = w.out_h;
  q.win.w = w.out_w;
  q.win.out_h = w.h;
  q.win.out_w = w.w;
  q.win.pad_h = (w.kernel_h - 1) * w.dilation_h - w.pad_h;
  q.win.pad_w = (w.kernel_w - 1) * w.dilation_w - w.pad_w;
  q.out_channels = w.c;
  q.groups = G;
  q.x = p.grad_out;
  q.x_strides = p.grad_out_strides;
  q.weight = reinterpret_cast<const std::byte*>(flipped.data());
  q.weight_strides = Strides{Og * taps, taps, w.kernel_w, 1};
  q.out = p.grad_x;
  q.out_strides = Strides{w.c * w.h * w.w, w.h * w.w, w.w, 1};
  conv2d_typed<T>(rt, q);
}

// The weight gradient of a layer with at most this many rows in its column
// matrix runs transposed (Note [thin weight gradients]).
constexpr std::int64_t kThinK = 16;

// Note [conv2d backward]: one item per (image, group), its tiles in order on
// one thread, so col2im's overlapping windows never race. Per tile:
//   grad_weight[g] += dY[:, tile] · im2col(x)[:, tile]^T   (a GEMM into the slot's accumulator)
//   grad_x[n, g]   += col2im(W[g]^T · dY[:, tile])         (a GEMM into the slot's column buffer)
// Slot 0 accumulates straight into grad_weight, the others into pooled
// scratch summed at the end. A pointwise convolution skips both column
// passes; where Note [conv2d input gradient as a forward] applies, grad_x is
// computed first that way and the tiles compute grad_weight alone.
template <typename T>
void conv2d_backward_typed(detail::DeviceRuntime& rt, const Conv2dBackwardProblem& p) {
  const Window2d& w = p.win;
  const std::int64_t G = p.groups, Cg = w.c / G, Og = p.out_channels / G;
  const std::int64_t K = Cg * w.kernel_h * w.kernel_w, P = w.out_h * w.out_w, plane = w.h * w.w;
  const std::int64_t OK = p.out_channels * K;
  T* gx = reinterpret_cast<T*>(p.grad_x);
  T* gw = reinterpret_cast<T*>(p.grad_weight);
  if (gw) std::fill_n(gw, OK, T(0));
  if (w.n == 0 || Og == 0 || P == 0) {
    if (gx) std::fill_n(gx, w.n * w.c * plane, T(0));
    return;
  }
  const bool unit = unit_window(w);  // positions are pixels: grad_x needs no col2im
  if (gx && !unit && input_grad_is_a_forward(w, p.groups)) {
    input_grad_as_forward<T>(rt, p);
    gx = nullptr;  // what follows computes grad_weight alone
    if (!gw) return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (!gx && conv2d_winograd_weight_grad_f32(rt, p)) return;
  }
  const T* x = reinterpret_cast<const T*>(p.x);
  const T* dy = reinterpret_cast<const T*>(p.grad_out);
  const Strides &xs = p.x_strides, &gs = p.grad_out_strides;

  std::int64_t w_rs = 0;
  ScratchLease<T> packed_w;
  const T* weight =
      gx ? flat_weights<T>(rt, w, p.out_channels, Cg, p.weight, p.weight_strides, packed_w, w_rs) : nullptr;

  const bool x_direct = unit && spatial_is_flat(w.h, w.w, xs);
  const bool need_cols = (gx && !unit) || (gw && !x_direct);
  const std::int64_t tile = need_cols ? column_tile<T>(K, P) : P;
  const std::int64_t tiles = (P + tile - 1) / tile;
  const std::int64_t items = w.n * G;
  const double flops = static_cast<double>(Og) * static_cast<double>(K) * static_cast<double>(P) *
                       static_cast<double>(items) * ((gx ? 1 : 0) + (gw ? 1 : 0));
  const int threads = rt.threads();
  const bool by_item = threads > 1 && items >= threads && flops >= static_cast<double>(kParallelGemmFlops);
  const std::int64_t slots = by_item ? threads : 1;
  // Note [thin weight gradients]: with K <= kThinK (a first layer: one
  // input channel, 3x3), dW = dY col^T has only K columns, a sliver of one
  // 48-wide panel run at K / 16 of the micro-kernel's lanes. It runs as
  // dW^T = col dY^T instead, whose K rows take sgemm's dot mode (each
  // output the dot product of two contiguous rows), into transposed
  // accumulators, one per slot, folded into grad_weight at the end.
  const bool thin = gw && K <= kThinK;
  ScratchLease<T> cols, acc;
  if (need_cols) cols = rt.pool().scratch<T>(static_cast<std::size_t>(slots * K * tile));
  const std::int64_t acc_slots = thin ? slots : slots - 1;  // slot 0 adds into gw directly unless thin
  if (gw && acc_slots > 0) {
    acc = rt.pool().scratch<T>(static_cast<std::size_t>(acc_slots * OK));
    std::fill_n(acc.data(), acc_slots * OK, T(0));
  }

  auto run_item = [&](std::int64_t item, std::int64_t slot) {
    const std::int64_t g = item % G, n = item / G;
    const T* xg = x + n * xs[0] + g * Cg * xs[1];
    const T* dyg = dy + n * gs[0] + g * Og * gs[1];
    T* gxg = gx ? gx + (n * w.c + g * Cg) * plane : nullptr;
    T* gwg = !gw    ? nullptr
             : thin ? acc.data() + slot * OK + g * Og * K
                    : (slot == 0 ? gw : acc.data() + (slot - 1) * OK) + g * Og * K;
    T* buf = need_cols ? cols.data() + slot * K * tile : nullptr;
    if (gx && !unit) std::fill_n(gxg, Cg * plane, T(0));  // here, where col2im will want it in cache
    for (std::int64_t t = 0; t < tiles; ++t) {
      const std::int64_t p0 = t * tile, p1 = std::min(P, p0 + tile), np = p1 - p0;
      if (gw) {
        const T* col = xg + p0;
        std::int64_t col_rs = xs[1];
        if (!x_direct) {
          im2col(w, Cg, xg, xs, p0, p1, buf);
          col = buf;
          col_rs = np;
        }
        if (thin)
          gemm(rt, !by_item, K, Og, np, T(1), col, col_rs, 1, dyg + p0, 1, gs[1], T(1), gwg, Og, 1);
        else
          gemm(rt, !by_item, Og, K, np, T(1), dyg + p0, gs[1], 1, col, 1, col_rs, T(1), gwg, K, 1);
      }
      if (gx && unit) {
        gemm(rt, !by_item, Cg, np, Og, T(1), weight + g * Og * w_rs, 1, w_rs, dyg + p0, gs[1], 1, T(0), gxg + p0, plane,
             1);
      } else if (gx) {
        gemm(rt, !by_item, K, np, Og, T(1), weight + g * Og * w_rs, 1, w_rs, dyg + p0, gs[1], 1, T(0), buf, np, 1);
        col2im(w, Cg, buf, p0, p1, gxg);
      }
    }
  };
  if (!by_item) {
    for (std::int64_t i = 0; i < items; ++i) run_item(i, 0);
  } else {
    // Sized for both tile widths: the GEMMs' blocking is not monotonic in
    // their size, and the last, narrower tile can need more scratch.
    const DType dtype = dtype_of<T>::value;
    std::size_t bytes = 0;
    for (const std::int64_t np : {std::min(tile, P), P - (tiles - 1) * tile}) {
      if (gw)
        bytes = std::max(bytes, thin ? gemm_scratch_bytes(dtype, K, Og, np) : gemm_scratch_bytes(dtype, Og, K, np));
      if (gx) bytes = std::max(bytes, gemm_scratch_bytes(dtype, unit ? Cg : K, np, Og));
    }
    const WorkerScratch gemm_scratch(rt, slots, bytes);
    rt.parallel_for(slots, 1, [&](std::int64_t s0, std::int64_t s1) {
      for (std::int64_t s = s0; s < s1; ++s) {
        const WorkerScratch::Lend lend = gemm_scratch.lend(s);
        for (std::int64_t i = items * s / slots; i < items * (s + 1) / slots; ++i) run_item(i, s);
      }
    });
  }
  if (!gw) return;
  if (thin) {  // gw[g][o][q] = the slots' acc[g][q][o]
    for (std::int64_t s = 0; s < slots; ++s)
      for (std::int64_t g = 0; g < G; ++g)
        for (std::int64_t q = 0; q < K; ++q)
          for (std::int64_t o = 0; o < Og; ++o)
            gw[(g * Og + o) * K + q] += acc[static_cast<std::size_t>(s * OK + g * Og * K + q * Og + o)];
    return;
  }
  if (slots == 1) return;
  rt.parallel_for(OK, kGrainElements / std::max<std::int64_t>(1, slots), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t s = 1; s < slots; ++s) {
      const T* a = acc.data() + (s - 1) * OK;
      for (std::int64_t i = i0; i < i1; ++i) gw[i] += a[i];
    }
  });
}

// Runs fn(plane) for every (n, c) plane, in parallel when the work is large.
template <typename Fn>
void for_each_plane(detail::DeviceRuntime& rt, const Window2d& w, Fn&& fn) {
  const std::int64_t planes = w.n * w.c;
  // Taps per plane, for the grain only: saturate rather than overflow on huge windows.
  std::int64_t per_plane = 1;
  for (const std::int64_t f : {w.out_h, w.out_w, w.kernel_h, w.kernel_w})
    if (__builtin_mul_overflow(per_plane, f, &per_plane)) per_plane = std::numeric_limits<std::int64_t>::max();
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(1, per_plane));
  rt.parallel_for(planes, grain, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) fn(i / w.c, i % w.c);
  });
}

// [first, last) of the kernel taps whose input index start + tap * dilation
// lies in [0, size).
inline void valid_taps(std::int64_t start, std::int64_t dilation, std::int64_t kernel, std::int64_t size,
                       std::int64_t& first, std::int64_t& last) {
  first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
  last = start >= size ? 0 : std::min(kernel, (size - start + dilation - 1) / dilation);
  if (last < first) last = first;
}

// A 2x2 window at stride 2, unpadded and undilated: pool2x2.h's case.
bool is_2x2_tiling(const Window2d& w) {
  return w.kernel_h == 2 && w.kernel_w == 2 && w.stride_h == 2 && w.stride_w == 2 && w.pad_h == 0 && w.pad_w == 0 &&
         w.dilation_h == 1 && w.dilation_w == 1;
}

template <typename T>
void max_pool_typed(detail::DeviceRuntime& rt, const Pool2dProblem& p) {
  const Window2d w = p.win;
  const T* x = reinterpret_cast<const T*>(p.x);
  T* out = reinterpret_cast<T*>(p.out);
  const std::int64_t xs0 = p.x_strides[0], xs1 = p.x_strides[1], xs2 = p.x_strides[2], xs3 = p.x_strides[3];
  const std::int64_t os0 = p.out_strides[0], os1 = p.out_strides[1], os2 = p.out_strides[2], os3 = p.out_strides[3];
  using C = compute_t<T>;
  if constexpr (std::is_same_v<T, float>) {
    if (pool2x2_available() && is_2x2_tiling(w) && xs3 == 1 && os3 == 1) {
      for_each_plane(rt, w, [&](std::int64_t n, std::int64_t c) {
        const float* plane = x + n * xs0 + c * xs1;
        float* dst = out + n * os0 + c * os1;
        for (std::int64_t oh = 0; oh < w.out_h; ++oh)
          max_pool_2x2_row(w.out_w, plane + 2 * oh * xs2, plane + (2 * oh + 1) * xs2, dst + oh * os2);
      });
      return;
    }
  }
  for_each_plane(rt, w, [&](std::int64_t n, std::int64_t c) {
    const T* plane = x + n * xs0 + c * xs1;
    T* dst = out + n * os0 + c * os1;
    for (std::int64_t oh = 0; oh < w.out_h; ++oh) {
      const std::int64_t h0 = oh * w.stride_h - w.pad_h;
      std::int64_t kh0, kh1;
      valid_taps(h0, w.dilation_h, w.kernel_h, w.h, kh0, kh1);
      for (std::int64_t ow = 0; ow < w.out_w; ++ow) {
        const std::int64_t w0 = ow * w.stride_w - w.pad_w;
        std::int64_t kw0, kw1;
        valid_taps(w0, w.dilation_w, w.kernel_w, w.w, kw0, kw1);
        // Branch-free (maxss); NaN, which wins as in libtorch, is tracked apart.
        C best = -std::numeric_limits<C>::infinity();
        bool nan = false;
        for (std::int64_t kh = kh0; kh < kh1; ++kh) {
          const T* row = plane + (h0 + kh * w.dilation_h) * xs2 + w0 * xs3;
          for (std::int64_t kw = kw0; kw < kw1; ++kw) {
            const C v = widen(row[kw * w.dilation_w * xs3]);
            best = v > best ? v : best;
            nan |= v != v;
          }
        }
        dst[oh * os2 + ow * os3] = convert<T>(nan ? std::numeric_limits<C>::quiet_NaN() : best);
      }
    }
  });
}

// One avg_pool2d window along one axis: the input range [lo, hi) it reads
// and its extent `span` counting padding (the count_include_pad divisor).
// The forward and the gradient share it, so they divide by the same count.
struct AvgWindow {
  std::int64_t lo, hi, span;
};
inline AvgWindow avg_window(std::int64_t o, std::int64_t stride, std::int64_t pad, std::int64_t kernel,
                            std::int64_t size) {
  const std::int64_t start = o * stride - pad;
  const std::int64_t end = std::min(start + kernel, size + pad);
  return {std::max<std::int64_t>(start, 0), std::min(end, size), end - start};
}

template <typename T>
void avg_pool_typed(detail::DeviceRuntime& rt, const Pool2dProblem& p) {
  const Window2d& w = p.win;
  const T* x = reinterpret_cast<const T*>(p.x);
  T* out = reinterpret_cast<T*>(p.out);
  const Strides &xs = p.x_strides, &os = p.out_strides;
  for_each_plane(rt, w, [&](std::int64_t n, std::int64_t c) {
    const T* plane = x + n * xs[0] + c * xs[1];
    T* dst = out + n * os[0] + c * os[1];
    for (std::int64_t oh = 0; oh < w.out_h; ++oh) {
      const auto [h0, h1, span_h] = avg_window(oh, w.stride_h, w.pad_h, w.kernel_h, w.h);
      for (std::int64_t ow = 0; ow < w.out_w; ++ow) {
        const auto [w0, w1, span_w] = avg_window(ow, w.stride_w, w.pad_w, w.kernel_w, w.w);
        T& o = dst[oh * os[2] + ow * os[3]];
        if (h0 >= h1 || w0 >= w1) {
          o = convert<T>(0.0f);
          continue;
        }
        compute_t<T> sum = 0;
        for (std::int64_t ih = h0; ih < h1; ++ih)
          for (std::int64_t iw = w0; iw < w1; ++iw) sum += widen(plane[ih * xs[2] + iw * xs[3]]);
        const std::int64_t count = p.count_include_pad ? span_h * span_w : (h1 - h0) * (w1 - w0);
        o = convert<T>(sum / static_cast<compute_t<T>>(count));
      }
    }
  });
}

// One output row of the max pool's gradient where the windows tile the plane
// (stride == kernel, no padding or dilation, x's columns unit-strided): each
// input is in at most one window, so each gradient element is written once,
// with no zero pass and no scatter. x points at the row's first input row,
// d at its first gradient row (of width w.w).
template <typename T>
void max_pool_tiled_row(const Window2d& w, const T* x, std::int64_t xs2, const T* g, std::int64_t gs3, T* d) {
  const std::int64_t kh_n = w.kernel_h, kw_n = w.kernel_w;
  for (std::int64_t ow = 0; ow < w.out_w; ++ow) {
    T best = -std::numeric_limits<T>::infinity();
    std::int64_t at = 0;
    for (std::int64_t kh = 0; kh < kh_n; ++kh)
      for (std::int64_t kw = 0; kw < kw_n; ++kw) {
        const T v = x[kh * xs2 + ow * kw_n + kw];
        if (v > best || v != v) {
          best = v;
          at = kh * kw_n + kw;
        }
      }
    const T gv = g[ow * gs3];
    for (std::int64_t kh = 0; kh < kh_n; ++kh)
      for (std::int64_t kw = 0; kw < kw_n; ++kw) d[kh * w.w + ow * kw_n + kw] = kh * kw_n + kw == at ? gv : T(0);
  }
}

// The same for 2x2 windows, branch-free so that it vectorizes over the row:
// the first of the four equal to their max takes the gradient. A NaN breaks
// the equalities; the caller redoes such a row with max_pool_tiled_row.
// Returns whether the row held a NaN.
template <typename T>
bool max_pool_tiled_row_2x2(std::int64_t out_w, const T* x, std::int64_t xs2, const T* g, std::int64_t gs3, T* d,
                            std::int64_t ds) {
  const T* r0 = x;
  const T* r1 = x + xs2;
  T* d0 = d;
  T* d1 = d + ds;
  bool nan = false;
  for (std::int64_t ow = 0; ow < out_w; ++ow) {
    const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], e = r1[2 * ow + 1];
    const T ab = a < b ? b : a, ce = c < e ? e : c, m = ab < ce ? ce : ab;
    nan |= (a != a) | (b != b) | (c != c) | (e != e);
    const bool ta = a == m, tb = !ta && b == m, tc = !ta && !tb && c == m, te = !ta && !tb && !tc;
    const T gv = g[ow * gs3];
    d0[2 * ow] = ta ? gv : T(0);
    d0[2 * ow + 1] = tb ? gv : T(0);
    d1[2 * ow] = tc ? gv : T(0);
    d1[2 * ow + 1] = te ? gv : T(0);
  }
  return nan;
}

template <typename T>
void max_pool_backward_tiled(const Window2d& w, const T* plane, std::int64_t xs2, const T* g, std::int64_t gs2,
                             std::int64_t gs3, T* dst) {
  const std::int64_t kh_n = w.kernel_h, kw_n = w.kernel_w;
  const bool two = kh_n == 2 && kw_n == 2;
  for (std::int64_t oh = 0; oh < w.out_h; ++oh) {
    const T* x = plane + oh * kh_n * xs2;
    T* d = dst + oh * kh_n * w.w;
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      if (two && gs3 == 1 && pool2x2_available())
        done = max_pool_2x2_grad_row(w.out_w, x, x + xs2, g + oh * gs2, d, d + w.w);
    }
    if (!done && (!two || max_pool_tiled_row_2x2(w.out_w, x, xs2, g + oh * gs2, gs3, d, w.w)))
      max_pool_tiled_row(w, x, xs2, g + oh * gs2, gs3, d);
    if (w.out_w * kw_n < w.w)
      for (std::int64_t kh = 0; kh < kh_n; ++kh) std::fill(d + kh * w.w + w.out_w * kw_n, d + (kh + 1) * w.w, T(0));
  }
  std::fill(dst + w.out_h * kh_n * w.w, dst + w.h * w.w, T(0));
}

// max_pool2d's gradient goes to the argmax of each window, recomputed from x
// (first max on ties, the last NaN if any, as libtorch picks its index).
// Recomputing reads x's plane once where saved indices would cost an i64
// write per output in every forward that records.
template <typename T>
void max_pool_backward_typed(detail::DeviceRuntime& rt, const Pool2dBackwardProblem& p) {
  const Window2d w = p.win;
  const T* x = reinterpret_cast<const T*>(p.x);
  const T* dy = reinterpret_cast<const T*>(p.grad_out);
  T* gx = reinterpret_cast<T*>(p.grad_x);
  const std::int64_t xs0 = p.x_strides[0], xs1 = p.x_strides[1], xs2 = p.x_strides[2], xs3 = p.x_strides[3];
  const Strides& gs = p.grad_out_strides;
  const bool tiled = w.stride_h == w.kernel_h && w.stride_w == w.kernel_w && w.pad_h == 0 && w.pad_w == 0 &&
                     w.dilation_h == 1 && w.dilation_w == 1 && xs3 == 1 && w.out_h * w.kernel_h <= w.h &&
                     w.out_w * w.kernel_w <= w.w;
  for_each_plane(rt, w, [&](std::int64_t n, std::int64_t c) {
    const T* plane = x + n * xs0 + c * xs1;
    const T* g = dy + n * gs[0] + c * gs[1];
    T* dst = gx + (n * w.c + c) * w.h * w.w;
    if (tiled) {
      max_pool_backward_tiled(w, plane, xs2, g, gs[2], gs[3], dst);
      return;
    }
    std::fill_n(dst, w.h * w.w, T(0));
    for (std::int64_t oh = 0; oh < w.out_h; ++oh) {
      const std::int64_t h0 = oh * w.stride_h - w.pad_h;
      std::int64_t kh0, kh1;
      valid_taps(h0, w.dilation_h, w.kernel_h, w.h, kh0, kh1);
      for (std::int64_t ow = 0; ow < w.out_w; ++ow) {
        const std::int64_t w0 = ow * w.stride_w - w.pad_w;
        std::int64_t kw0, kw1;
        valid_taps(w0, w.dilation_w, w.kernel_w, w.w, kw0, kw1);
        if (kh0 >= kh1 || kw0 >= kw1) continue;  // an all-padding window: no input to credit
        T best = -std::numeric_limits<T>::infinity();
        std::int64_t at = (h0 + kh0 * w.dilation_h) * w.w + w0 + kw0 * w.dilation_w;
        for (std::int64_t kh = kh0; kh < kh1; ++kh) {
          const std::int64_t ih = h0 + kh * w.dilation_h;
          const T* row = plane + ih * xs2;
          for (std::int64_t kw = kw0; kw < kw1; ++kw) {
            const std::int64_t iw = w0 + kw * w.dilation_w;
            const T v = row[iw * xs3];
            const std::int64_t take = -static_cast<std::int64_t>(v > best || v != v);  // a mask: no branch
            best = take ? v : best;
            at ^= (at ^ (ih * w.w + iw)) & take;
          }
        }
        dst[at] += g[oh * gs[2] + ow * gs[3]];
      }
    }
  });
}

// avg_pool2d's gradient: each output's gradient over its count, spread over
// the window's in-bounds taps, with the forward's window and divisor.
template <typename T>
void avg_pool_backward_typed(detail::DeviceRuntime& rt, const Pool2dBackwardProblem& p) {
  const Window2d& w = p.win;
  const T* dy = reinterpret_cast<const T*>(p.grad_out);
  T* gx = reinterpret_cast<T*>(p.grad_x);
  const Strides& gs = p.grad_out_strides;
  for_each_plane(rt, w, [&](std::int64_t n, std::int64_t c) {
    const T* g = dy + n * gs[0] + c * gs[1];
    T* dst = gx + (n * w.c + c) * w.h * w.w;
    std::fill_n(dst, w.h * w.w, T(0));
    for (std::int64_t oh = 0; oh < w.out_h; ++oh) {
      const auto [h0, h1, span_h] = avg_window(oh, w.stride_h, w.pad_h, w.kernel_h, w.h);
      for (std::int64_t ow = 0; ow < w.out_w; ++ow) {
        const auto [w0, w1, span_w] = avg_window(ow, w.stride_w, w.pad_w, w.kernel_w, w.w);
        if (h0 >= h1 || w0 >= w1) continue;
        const std::int64_t count = p.count_include_pad ? span_h * span_w : (h1 - h0) * (w1 - w0);
        const T share = g[oh * gs[2] + ow * gs[3]] / static_cast<T>(count);
        for (std::int64_t ih = h0; ih < h1; ++ih)
          for (std::int64_t iw = w0; iw < w1; ++iw) dst[ih * w.w + iw] += share;
      }
    }
  });
}

template <template <typename> class Kernel, typename Problem>
void dispatch_float(DType dtype, detail::DeviceRuntime& rt, const Problem& p) {
  switch (dtype) {
    case DType::f64:
      Kernel<double>::run(rt, p);
      break;
    case DType::f16:
      Kernel<Half>::run(rt, p);
      break;
    case DType::bf16:
      Kernel<BFloat16>::run(rt, p);
      break;
    default:
      Kernel<float>::run(rt, p);
      break;
  }
}

template <typename T>
struct MaxPool {
  static void run(detail::DeviceRuntime& rt, const Pool2dProblem& p) { max_pool_typed<T>(rt, p); }
};
template <typename T>
struct AvgPool {
  static void run(detail::DeviceRuntime& rt, const Pool2dProblem& p) { avg_pool_typed<T>(rt, p); }
};

}  // namespace

void conv2d(detail::DeviceRuntime& rt, const Conv2dProblem& p) {
  if (p.dtype == DType::f64)
    conv2d_typed<double>(rt, p);
  else
    conv2d_typed<float>(rt, p);
}

void max_pool2d(detail::DeviceRuntime& rt, const Pool2dProblem& p) { dispatch_float<MaxPool>(p.dtype, rt, p); }
void avg_pool2d(detail::DeviceRuntime& rt, const Pool2dProblem& p) { dispatch_float<AvgPool>(p.dtype, rt, p); }

void conv2d_backward(detail::DeviceRuntime& rt, const Conv2dBackwardProblem& p) {
  if (p.dtype == DType::f64)
    conv2d_backward_typed<double>(rt, p);
  else
    conv2d_backward_typed<float>(rt, p);
}

void max_pool2d_backward(detail::DeviceRuntime& rt, const Pool2dBackwardProblem& p) {
  if (p.dtype == DType::f64)
    max_pool_backward_typed<double>(rt, p);
  else
    max_pool_backward_typed<float>(rt, p);
}

void avg_pool2d_backward(detail::DeviceRuntime& rt, const Pool2dBackwardProblem& p) {
  if (p.dtype == DType::f64)
    avg_pool_backward_typed<double>(rt, p);
  else
    avg_pool_backward_typed<float>(rt, p);
}

}  // namespace forge::cpu
