// Scan kernels along one dim: argmax / argmin (and max / min along a dim,
// which return values and indices) and cumsum. The kept dims are coalesced
// (dim_runs.h); work is split over the outputs, or, with too few outputs to
// keep the threads busy, over chunks of the scanned dim whose partial bests
// are combined in order.

#if defined(__AVX512F__)
#include <immintrin.h>

#include "backend/cpu/simd_lanes.h"
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/dim_runs.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/reduce_kernels.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

constexpr std::int64_t kTile = 256;

// ---- argmax / argmin (and max/min along a dim) ----

template <typename V, bool kMax>
inline bool better(V v, V best) noexcept {
  if constexpr (kMax)
    return v > best || (v != v && best == best);
  else
    return v < best || (v != v && best == best);
}

#if defined(__AVX512F__)
// The scan of a contiguous f32 run [i0, i1) from (best, idx), vectorized:
// per block of kArgBlock values, the block's max (and whether it holds a
// NaN) in one pass, then, only when the block beats `best`, a second pass
// over the same cache-hot block for the first index holding it. The scalar
// loop's data-dependent branch ran at about 4 GB/s on random rows.
constexpr std::int64_t kArgBlock = 2048;

template <bool kMax>
void scan_contiguous_f32(const float* p, std::int64_t i0, std::int64_t i1, float& best, std::int64_t& idx) {
  if (best != best) return;  // a NaN is never beaten
  const float fill = kMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const __m512 vfill = _mm512_set1_ps(fill);
  for (std::int64_t b0 = i0; b0 < i1; b0 += kArgBlock) {
    const std::int64_t b1 = std::min(i1, b0 + kArgBlock);
    __m512 acc = vfill;
    __mmask16 nan = 0;
    for (std::int64_t i = b0; i < b1; i += 16) {
      const __m512 v = _mm512_mask_loadu_ps(vfill, lanes16(b1 - i), p + i);
      nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      // VMAXPS/VMINPS return the second operand when either is NaN: acc.
      acc = kMax ? _mm512_mask_max_ps(acc, 0xFFFF, v, acc) : _mm512_mask_min_ps(acc, 0xFFFF, v, acc);
    }
    if (nan) {  // the first NaN wins
      for (std::int64_t i = b0; i < b1; ++i)
        if (p[i] != p[i]) {
          best = p[i];
          idx = i;
          return;
        }
    }
    alignas(64) float lane[16];
    _mm512_store_ps(lane, acc);
    float m = lane[0];
    for (int l = 1; l < 16; ++l) m = kMax ? std::max(m, lane[l]) : std::min(m, lane[l]);
    if (!(kMax ? m > best : m < best)) continue;
    const __m512 vm = _mm512_set1_ps(m);
    for (std::int64_t i = b0; i < b1; i += 16) {
      const __mmask16 hit =
          _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(lanes16(b1 - i), p + i), vm, _CMP_EQ_OQ) & lanes16(b1 - i);
      if (hit) {
        best = m;
        idx = i + __builtin_ctz(hit);
        break;
      }
    }
  }
}
#endif

template <typename T, bool kMax>
void run_arg(detail::DeviceRuntime& rt, const ArgReduceArgs& a) {
  using V = int_or_v<T>;
  DimRun kept[kMaxRank];
  int nk = 0;
  std::int64_t n_out = 1;
  for (int d = 0; d < a.shape.rank(); ++d) {
    if (d == a.dim) continue;
    n_out *= a.shape[d];
    const std::int64_t vs = a.values ? a.values_strides[d] : a.indices_strides[d];
    if (a.shape[d] != 1) kept[nk++] = {a.shape[d], a.in_strides[d], vs, a.indices_strides[d]};
  }
  if (n_out == 0) return;
  nk = coalesce(kept, nk, 3);
  std::int64_t ksize[kMaxRank], kin[kMaxRank], kval[kMaxRank], kidx[kMaxRank];
  for (int i = 0; i < nk; ++i) {
    ksize[i] = kept[i].size;
    kin[i] = kept[i].s0;
    kval[i] = kept[i].s1;
    kidx[i] = kept[i].s2;
  }
  const std::int64_t n = a.shape[a.dim], s = a.in_strides[a.dim];
  const T* in = reinterpret_cast<const T*>(a.in);
  T* values = reinterpret_cast<T*>(a.values);
  auto* indices = reinterpret_cast<std::int64_t*>(a.indices);
  auto walker = [&](int rank) { return Walker<3>::over(rank, ksize, {kin, kval, kidx}); };
  auto value = [](const T* p) { return static_cast<V>(widen(load(p))); };
  auto write = [&](const Walker<3>& w, std::int64_t extra_val, std::int64_t extra_idx, V best, std::int64_t idx) {
    if (values) values[w.off[1] + extra_val] = convert<T>(best);
    indices[w.off[2] + extra_idx] = idx;
  };
  // Scans [i0, i1) of the row at p, updating (best, idx).
  auto scan = [&](const T* p, std::int64_t i0, std::int64_t i1, V& best, std::int64_t& idx) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
      if (s == 1) {
        scan_contiguous_f32<kMax>(p, i0, i1, best, idx);
        return;
      }
    }
#endif
    for (std::int64_t i = i0; i < i1; ++i) {
      const V v = value(p + i * s);
      if (better<V, kMax>(v, best)) {
        best = v;
        idx = i;
      }
    }
  };
  const int threads = rt.threads();
  const bool outer = nk > 0 && kin[nk - 1] == 1 && s != 1;
  if (outer) {
    const std::int64_t j = ksize[nk - 1], per_row = (j + kTile - 1) / kTile;
    const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / (n * std::min(j, kTile)));
    rt.parallel_for((n_out / j) * per_row, grain, [&](std::int64_t t0, std::int64_t t1) {
      V best[kTile];
      std::int64_t idx[kTile];
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t q = t / per_row, j0 = (t % per_row) * kTile, w = std::min(kTile, j - j0);
        Walker<3> kw = walker(nk - 1);
        kw.seek(q);
        const T* base = in + kw.off[0] + j0;
        for (std::int64_t k = 0; k < w; ++k) {
          best[k] = value(base + k);
          idx[k] = 0;
        }
        for (std::int64_t i = 1; i < n; ++i) {
          const T* row = base + i * s;
          for (std::int64_t k = 0; k < w; ++k) {
            const V v = value(row + k);
            const bool b = better<V, kMax>(v, best[k]);
            best[k] = b ? v : best[k];
            idx[k] = b ? i : idx[k];
          }
        }
        for (std::int64_t k = 0; k < w; ++k)
          write(kw, (j0 + k) * kval[nk - 1], (j0 + k) * kidx[nk - 1], best[k], idx[k]);
      }
    });
    return;
  }
  if (threads > 1 && n_out < 2 * threads && n_out * n > kGrainElements && n >= 4 * threads) {
    const std::int64_t chunks =
        std::min<std::int64_t>(std::int64_t{threads} * 4, std::max<std::int64_t>(1, n_out * n / kGrainElements));
    ScratchLease<V> part_best = rt.pool().scratch<V>(static_cast<std::size_t>(chunks * n_out));
    ScratchLease<std::int64_t> part_idx = rt.pool().scratch<std::int64_t>(static_cast<std::size_t>(chunks * n_out));
    rt.parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t i0 = n * c / chunks, i1 = n * (c + 1) / chunks;
        Walker<3> w = walker(nk);
        w.seek(0);
        for (std::int64_t o = 0; o < n_out; ++o, w.next()) {
          V best = value(in + w.off[0] + i0 * s);
          std::int64_t idx = i0;
          scan(in + w.off[0], i0 + 1, i1, best, idx);
          part_best[static_cast<std::size_t>(c * n_out + o)] = best;
          part_idx[static_cast<std::size_t>(c * n_out + o)] = idx;
        }
      }
    });
    Walker<3> w = walker(nk);
    w.seek(0);
    for (std::int64_t o = 0; o < n_out; ++o, w.next()) {
      V best = part_best[static_cast<std::size_t>(o)];
      std::int64_t idx = part_idx[static_cast<std::size_t>(o)];
      for (std::int64_t c = 1; c < chunks; ++c) {
        const auto k = static_cast<std::size_t>(c * n_out + o);
        if (better<V, kMax>(part_best[k], best)) {
          best = part_best[k];
          idx = part_idx[k];
        }
      }
      write(w, 0, 0, best, idx);
    }
    return;
  }
  rt.parallel_for(n_out, std::max<std::int64_t>(1, kGrainElements / n), [&](std::int64_t o0, std::int64_t o1) {
    Walker<3> w = walker(nk);
    w.seek(o0);
    for (std::int64_t o = o0; o < o1; ++o, w.next()) {
      V best = value(in + w.off[0]);
      std::int64_t idx = 0;
      scan(in + w.off[0], 1, n, best, idx);
      write(w, 0, 0, best, idx);
    }
  });
}

// ---- cumsum ----

template <typename In, typename Out>
void run_cumsum(detail::DeviceRuntime& rt, const Shape& shape, const Strides& is, const Strides& os, int dim,
                const In* in, Out* out) {
  using Acc = std::conditional_t<std::is_floating_point_v<compute_t<In>>, double, std::uint64_t>;
  DimRun lines[kMaxRank];
  int nl = 0;
  std::int64_t n_lines = 1;
  for (int d = 0; d < shape.rank(); ++d) {
    if (d == dim) continue;
    n_lines *= shape[d];
    if (shape[d] != 1) lines[nl++] = {shape[d], is[d], os[d], 0};
  }
  const std::int64_t n = shape[dim], si = is[dim], so = os[dim];
  if (n_lines == 0 || n == 0) return;
  nl = coalesce(lines, nl, 2);
  std::int64_t lsize[kMaxRank], lin[kMaxRank], lout[kMaxRank];
  for (int i = 0; i < nl; ++i) {
    lsize[i] = lines[i].size;
    lin[i] = lines[i].s0;
    lout[i] = lines[i].s1;
  }
  rt.parallel_for(n_lines, std::max<std::int64_t>(1, kGrainElements / n), [&](std::int64_t l0, std::int64_t l1) {
    Walker<2> w;
    w.rank = nl;
    w.size = lsize;
    w.stride[0] = lin;
    w.stride[1] = lout;
    w.seek(l0);
    for (std::int64_t l = l0; l < l1; ++l, w.next()) {
      const In* p = in + w.off[0];
      Out* q = out + w.off[1];
      Acc acc = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        acc += static_cast<Acc>(widen(load(p + i * si)));
        if constexpr (std::is_floating_point_v<Acc>)
          q[i * so] = convert<Out>(acc);
        else
          q[i * so] = static_cast<Out>(acc);
      }
    }
  });
}

}  // namespace

void arg_reduce(detail::DeviceRuntime& rt, bool is_max, const ArgReduceArgs& a) {
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (is_max)
      run_arg<T, true>(rt, a);
    else
      run_arg<T, false>(rt, a);
  });
}

void cumsum(detail::DeviceRuntime& rt, const Shape& shape, const Strides& in_strides, const Strides& out_strides,
            int dim, const std::byte* in, DType in_dtype, std::byte* out, DType out_dtype) {
  (void)out_dtype;  // i64 for integers and bool, else in_dtype
  dispatch_dtype(in_dtype, [&](auto tag) {
    using T = decltype(tag);
    using Out = std::conditional_t<std::is_floating_point_v<compute_t<T>>, T, std::int64_t>;
    run_cumsum<T, Out>(rt, shape, in_strides, out_strides, dim, reinterpret_cast<const T*>(in),
                       reinterpret_cast<Out*>(out));
  });
}

}  // namespace forge::cpu
