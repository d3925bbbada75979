// Reduction kernels. The contract:
// - The reduced and the kept dims are each sorted by input stride and
//   coalesced, so any layout becomes a few (size, stride) runs.
// - When the innermost reduced dim is the contiguous one (or no kept dim is),
//   each output reduces its runs with kLanes independent accumulators over
//   pairwise-split blocks (accurate f32 sums, and vectorized).
// - When a kept dim is the contiguous one, a tile of up to kTile outputs
//   accumulates whole input rows (vectorized across the tile); float sums
//   fold every kCascadeRows rows into the tile's total.
// - Work is split over the outputs above the grain; when there are too few
//   outputs to keep the threads busy, the reduced range is cut into chunks
//   whose partial accumulators are combined in order afterwards.

#include "backend/cpu/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/dim_runs.h"
#include "backend/cpu/kernels.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

constexpr int kLanes = 32;
constexpr std::int64_t kPairwiseBlock = 2048;
constexpr std::int64_t kTile = 256;
constexpr std::int64_t kCascadeRows = 128;

// ---- reducers: identity, map (one element), combine (associative), finish ----

template <typename V>
constexpr bool is_float_v = std::is_floating_point_v<V>;

// Integer sums and products run in uint64, which wraps like libtorch's i64.
template <typename V>
using int_acc_t = std::conditional_t<is_float_v<V>, V, std::uint64_t>;

// Reducers whose Acc is their float element type also take SIMD blocks
// (kVec): vmap and vcombine accept a float, a double or a vector of them.
template <typename V>
struct SumR {
  using Acc = int_acc_t<V>;
  static constexpr bool kCascade = is_float_v<V>;
  static constexpr bool kVec = is_float_v<V>;
  template <typename X>
  static X vmap(X v) {
    return v;
  }
  template <typename X>
  static X vcombine(X a, X b) {
    return a + b;
  }
  Acc identity() const { return Acc(0); }
  Acc map(V v) const { return static_cast<Acc>(v); }
  Acc combine(Acc a, Acc b) const { return a + b; }
  auto finish(Acc a, std::int64_t) const {
    if constexpr (is_float_v<V>)
      return a;
    else
      return static_cast<std::int64_t>(a);
  }
};

template <typename V>
struct MeanR : SumR<V> {
  V finish(V a, std::int64_t n) const { return a / static_cast<V>(n); }
};

template <typename V>
struct Norm1R : SumR<V> {
  V map(V v) const { return std::abs(v); }
  template <typename X>
  static X vmap(X v) {
    return v < X{} ? -v : v;
  }
};

template <typename V>
struct Norm2R : SumR<V> {
  V map(V v) const { return v * v; }
  template <typename X>
  static X vmap(X v) {
    return v * v;
  }
  V finish(V a, std::int64_t) const { return std::sqrt(a); }
};

template <typename V>
struct ProdR {
  using Acc = int_acc_t<V>;
  static constexpr bool kCascade = false;
  static constexpr bool kVec = is_float_v<V>;
  template <typename X>
  static X vmap(X v) {
    return v;
  }
  template <typename X>
  static X vcombine(X a, X b) {
    return a * b;
  }
  Acc identity() const { return Acc(1); }
  Acc map(V v) const { return static_cast<Acc>(v); }
  Acc combine(Acc a, Acc b) const { return a * b; }
  auto finish(Acc a, std::int64_t) const {
    if constexpr (is_float_v<V>)
      return a;
    else
      return static_cast<std::int64_t>(a);
  }
};

// NaN propagates: a NaN accumulator stays, a NaN element takes over.
// Contiguous f32 blocks take vpick and a NaN check instead of vcombine
// (Note [NaN-checked extremes]).
template <typename V, bool kMax>
struct ExtremeR {
  using Acc = V;
  static constexpr bool kCascade = false;
  static constexpr bool kVec = is_float_v<V>;
  static constexpr bool kNanChecked = std::is_same_v<V, float>;
  template <typename X>
  static X vmap(X v) {
    return v;
  }
  // One vmaxps / vminps, which may drop a NaN (the block's bit check
  // catches it); equal values (+0 and -0) resolve to the later one, x, as
  // in combine.
  template <typename X>
  static X vpick(X m, X x) {
    if constexpr (kMax)
      return m > x ? m : x;
    else
      return m < x ? m : x;
  }
  template <typename X>
  static X vcombine(X a, X b) {
    if constexpr (kMax)
      return ((a > b) | (a != a)) ? a : b;
    else
      return ((a < b) | (a != a)) ? a : b;
  }
  Acc identity() const {
    if constexpr (is_float_v<V>)
      return kMax ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
    else
      return kMax ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
  }
  Acc map(V v) const { return v; }
  Acc combine(Acc a, Acc b) const {
    if constexpr (kMax)
      return (a > b || a != a) ? a : b;
    else
      return (a < b || a != a) ? a : b;
  }
  V finish(Acc a, std::int64_t) const { return a; }
};

// Whether R's contiguous blocks run extreme_block: only reducers that say so.
template <typename R>
constexpr bool nan_checked_v = requires {
  requires R::kNanChecked;
};

template <typename V, bool kAll>
struct LogicalR {
  using Acc = std::uint8_t;
  static constexpr bool kCascade = false;
  static constexpr bool kVec = false;
  Acc identity() const { return kAll ? 1 : 0; }
  Acc map(V v) const { return v != V(0) ? 1 : 0; }
  Acc combine(Acc a, Acc b) const { return kAll ? (a & b) : (a | b); }
  bool finish(Acc a, std::int64_t) const { return a != 0; }
};

// Welford's running mean and squared deviations, merged with Chan's formula.
struct Moments {
  double n, mean, m2;
};

template <typename V, bool kStd>
struct VarR {
  using Acc = Moments;
  static constexpr bool kCascade = false;
  static constexpr bool kVec = false;
  double correction;
  Acc identity() const { return {0, 0, 0}; }
  Acc map(V v) const { return {1, static_cast<double>(v), 0}; }
  Acc combine(Acc a, Acc b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, d = b.mean - a.mean, f = b.n / n;
    return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
  }
  double finish(Acc a, std::int64_t) const {
    const double divisor = a.n > correction ? a.n - correction : 0.0;  // as libtorch: 0 gives NaN or inf
    const double v = a.m2 / divisor;
    return kStd ? std::sqrt(v) : v;
  }
};

// log(sum(exp(x))) as a running (max, sum of exp(x - max)); an infinite or
// NaN max is the answer itself, as libtorch's masked max gives.
template <typename V>
struct LogSumExpR {
  struct Acc {
    V m, s;
  };
  static constexpr bool kCascade = false;
  static constexpr bool kVec = false;
  Acc identity() const { return {-std::numeric_limits<V>::infinity(), V(0)}; }
  Acc map(V v) const { return {v, V(1)}; }
  Acc combine(Acc a, Acc b) const {
    if (a.m != a.m) return a;
    if (b.m != b.m) return b;
    if (a.m == b.m) return {a.m, a.s + b.s};
    if (a.m < b.m) std::swap(a, b);
    return {a.m, a.s + b.s * std::exp(b.m - a.m)};
  }
  V finish(Acc a, std::int64_t) const {
    if (std::isinf(a.m) || a.m != a.m) return a.m;
    return a.m + std::log(a.s);
  }
};

// ---- geometry (dim_runs.h: Walker, DimRun, coalesce) ----

struct Geometry {
  int nk = 0, nr = 0;
  std::int64_t ksize[kMaxRank], kin[kMaxRank], kout[kMaxRank];
  std::int64_t rsize[kMaxRank], rin[kMaxRank];
  std::int64_t n_out = 1, n_red = 1;
};

Geometry make_geometry(const ReduceArgs& a) {
  Geometry g;
  DimRun kept[kMaxRank], red[kMaxRank];
  int nk = 0, nr = 0;
  for (int d = 0; d < a.shape.rank(); ++d) {
    const std::int64_t n = a.shape[d];
    if (a.reduced[d])
      g.n_red *= n;
    else
      g.n_out *= n;
    if (n == 1) continue;
    if (a.reduced[d])
      red[nr++] = {n, a.in_strides[d], 0, 0};
    else
      kept[nk++] = {n, a.in_strides[d], a.out_strides[d], 0};
  }
  g.nk = coalesce(kept, nk, 2);
  g.nr = coalesce(red, nr, 1);
  for (int i = 0; i < g.nk; ++i) {
    g.ksize[i] = kept[i].size;
    g.kin[i] = kept[i].s0;
    g.kout[i] = kept[i].s1;
  }
  for (int i = 0; i < g.nr; ++i) {
    g.rsize[i] = red[i].size;
    g.rin[i] = red[i].s0;
  }
  if (g.nr == 0) {  // one element per output
    g.nr = 1;
    g.rsize[0] = 1;
    g.rin[0] = 0;
  }
  return g;
}

// ---- the engine ----

template <typename R, typename In, typename Out>
class Engine {
 public:
  using Acc = typename R::Acc;
  using V = compute_t<In>;
  static constexpr bool kWiden = is_half_v<In>;
  // SIMD blocks when the elements are the accumulators (f32, f64).
  static constexpr bool kSimd = R::kVec && std::is_same_v<In, Acc>;
  using Vec = std::conditional_t<std::is_same_v<Acc, double>, VecD, VecF>;
  static constexpr int kW = static_cast<int>(sizeof(Vec) / sizeof(Acc));

  Engine(detail::DeviceRuntime& rt, const R& r, const Geometry& g, const In* in, Out* out)
      : rt_(rt), r_(r), g_(g), in_(in), out_(out) {}

  void run() {
    if (g_.n_out == 0) return;
    if (g_.n_red == 0) {
      const Acc id = r_.identity();
      Walker<2> w = kept_walker(g_.nk);
      w.seek(0);
      for (std::int64_t o = 0; o < g_.n_out; ++o, w.next()) out_[w.off[1]] = convert<Out>(r_.finish(id, 0));
      return;
    }
    const bool outer = g_.nk > 0 && g_.kin[g_.nk - 1] == 1 && g_.rin[g_.nr - 1] != 1;
    const std::int64_t work = g_.n_out * g_.n_red;
    const int threads = rt_.threads();
    if (outer) {
      const std::int64_t j = g_.ksize[g_.nk - 1], tiles_per_row = (j + kTile - 1) / kTile;
      const std::int64_t tiles = (g_.n_out / j) * tiles_per_row;
      if (threads > 1 && work > kGrainElements && tiles < 2 * threads && g_.n_red >= 4 * threads) {
        split_reduction(true);
        return;
      }
      const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / (g_.n_red * std::min(j, kTile)));
      rt_.parallel_for(tiles, grain, [&](std::int64_t t0, std::int64_t t1) {
        Acc acc[kTile];
        for (std::int64_t t = t0; t < t1; ++t) {
          const std::int64_t q = t / tiles_per_row, j0 = (t % tiles_per_row) * kTile;
          const std::int64_t w = std::min(kTile, j - j0);
          std::fill(acc, acc + w, r_.identity());
          Walker<2> kw = kept_walker(g_.nk - 1);
          kw.seek(q);
          outer_tile(in_ + kw.off[0] + j0, w, 0, g_.n_red, acc);
          const std::int64_t so = g_.kout[g_.nk - 1];
          Out* o = out_ + kw.off[1] + j0 * so;
          for (std::int64_t i = 0; i < w; ++i) o[i * so] = convert<Out>(r_.finish(acc[i], g_.n_red));
        }
      });
      return;
    }
    if (threads > 1 && work > kGrainElements && g_.n_out < 2 * threads && g_.n_red >= 4 * threads) {
      split_reduction(false);
      return;
    }
    const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / g_.n_red);
    rt_.parallel_for(g_.n_out, grain, [&](std::int64_t o0, std::int64_t o1) {
      Walker<2> w = kept_walker(g_.nk);
      w.seek(o0);
      for (std::int64_t o = o0; o < o1; ++o, w.next())
        out_[w.off[1]] = convert<Out>(r_.finish(reduce_range(in_ + w.off[0], 0, g_.n_red), g_.n_red));
    });
  }

 private:
  Walker<2> kept_walker(int rank) const {
    Walker<2> w;
    w.rank = rank;
    w.size = g_.ksize;
    w.stride[0] = g_.kin;
    w.stride[1] = g_.kout;
    return w;
  }

  V value(const In* p) const { return static_cast<V>(widen(load(p))); }

  // One block's moments of contiguous f32 in two vectorized passes over the
  // (cache-hot) block: its sum, then the squared deviations from the f32
  // mean, corrected to the exact mean. Welford per element, in f64, ran at
  // about 20 GB/s; blocks still merge with Chan's formula.
  static Moments block_moments(const float* p, std::int64_t n) {
    VecF v[4] = {};
    std::int64_t i = 0;
    for (; i + 4 * kVecF <= n; i += 4 * kVecF)
      for (int u = 0; u < 4; ++u) v[u] += load_vec<VecF>(p + i + u * kVecF);
    VecF t = (v[0] + v[1]) + (v[2] + v[3]);
    double sum = 0;
    for (int k = 0; k < kVecF; ++k) sum += t[k];
    for (; i < n; ++i) sum += p[i];
    const double mean = sum / static_cast<double>(n);
    const float mf = static_cast<float>(mean);
    for (auto& a : v) a = VecF{};
    i = 0;
    for (; i + 4 * kVecF <= n; i += 4 * kVecF)
      for (int u = 0; u < 4; ++u) {
        const VecF d = load_vec<VecF>(p + i + u * kVecF) - mf;
        v[u] += d * d;
      }
    t = (v[0] + v[1]) + (v[2] + v[3]);
    double m2 = 0;
    for (int k = 0; k < kVecF; ++k) m2 += t[k];
    for (; i < n; ++i) m2 += (static_cast<double>(p[i]) - mf) * (static_cast<double>(p[i]) - mf);
    const double shift = mean - static_cast<double>(mf);
    return {static_cast<double>(n), mean, std::max(0.0, m2 - static_cast<double>(n) * shift * shift)};
  }

  // Note [NaN-checked extremes]
  // max and min must return NaN when any element is NaN. Folding that into
  // every step (compare, unordered compare, OR of the masks, blend) made
  // the f32 max 2.6x slower than the sum on data in cache, and slower than
  // memory on two threads. A block instead runs one vmaxps (or vminps) per
  // vector, which may drop a NaN element, beside an integer maximum of the
  // elements' bits shifted left by one (the sign dropped): the two integer
  // ops run on other ports than the float one, and a NaN is exactly a
  // shifted pattern above 0xff000000. A block that holds one is reduced
  // again by the exact combine, which returns one of its NaNs.
  Acc extreme_block(const In* p, std::int64_t n) const {
    using Bits = typename float_bits<Vec>::type;
    Vec m[4];
    Bits e[4] = {};
    for (auto& a : m) a = splat<Vec>(r_.identity());
    std::int64_t i = 0;
    for (; i + 4 * kW <= n; i += 4 * kW)
      for (int u = 0; u < 4; ++u) {
        const Vec x = load_vec<Vec>(p + i + u * kW);
        m[u] = R::vpick(m[u], x);
        const Bits b = std::bit_cast<Bits>(x) << 1;
        e[u] = b > e[u] ? b : e[u];
      }
    Bits eb = e[0] > e[1] ? e[0] : e[1];
    const Bits ec = e[2] > e[3] ? e[2] : e[3];
    eb = eb > ec ? eb : ec;
    bool nan = false;
    for (int k = 0; k < kW; ++k) nan |= eb[k] > 0xff000000u;
    if (nan) return simd_lanes(p, n);
    return fold(R::vpick(R::vpick(m[0], m[1]), R::vpick(m[2], m[3])), p + i, n - i);  // exact on the tail
  }

  // Four vector accumulators over n contiguous elements.
  Acc simd_lanes(const In* p, std::int64_t n) const {
    Vec v[4];
    for (auto& a : v) a = splat<Vec>(r_.identity());
    std::int64_t i = 0;
    for (; i + 4 * kW <= n; i += 4 * kW)
      for (int u = 0; u < 4; ++u) v[u] = R::vcombine(v[u], R::vmap(load_vec<Vec>(p + i + u * kW)));
    return fold(R::vcombine(R::vcombine(v[0], v[1]), R::vcombine(v[2], v[3])), p + i, n - i);
  }

  // A vector accumulator's lanes, then the `rest` elements after it.
  Acc fold(const Vec& t, const In* tail, std::int64_t rest) const {
    Acc acc = t[0];
    for (int k = 1; k < kW; ++k) acc = r_.combine(acc, t[k]);
    for (std::int64_t i = 0; i < rest; ++i) acc = r_.combine(acc, r_.map(tail[i]));
    return acc;
  }

  // kLanes independent accumulators over n elements `stride` apart.
  template <bool kUnit>
  Acc lanes(const In* p, std::int64_t n, std::int64_t stride) const {
    if constexpr (kUnit && std::is_same_v<Acc, Moments> && std::is_same_v<In, float>) {
      if (n > 0) return block_moments(p, n);
    }
    if constexpr (kUnit && kSimd) {
      if constexpr (nan_checked_v<R>)
        return extreme_block(p, n);
      else
        return simd_lanes(p, n);
    }
    Acc acc[kLanes];
    for (auto& a : acc) a = r_.identity();
    std::int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int k = 0; k < kLanes; ++k)
        acc[k] = r_.combine(acc[k], r_.map(value(p + (kUnit ? i + k : (i + k) * stride))));
    for (; i < n; ++i) acc[0] = r_.combine(acc[0], r_.map(value(p + (kUnit ? i : i * stride))));
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int k = 0; k < w; ++k) acc[k] = r_.combine(acc[k], acc[k + w]);
    return acc[0];
  }

  Acc lanes_widened(const In* p, std::int64_t n) const {
    float buf[kPairwiseBlock];
    widen_block(p, buf, n);
    Acc acc[kLanes];
    for (auto& a : acc) a = r_.identity();
    std::int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int k = 0; k < kLanes; ++k) acc[k] = r_.combine(acc[k], r_.map(buf[i + k]));
    for (; i < n; ++i) acc[0] = r_.combine(acc[0], r_.map(buf[i]));
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int k = 0; k < w; ++k) acc[k] = r_.combine(acc[k], acc[k + w]);
    return acc[0];
  }

  // Pairwise split down to blocks of kPairwiseBlock elements.
  Acc run_reduce(const In* p, std::int64_t n, std::int64_t stride) const {
    if (n <= kPairwiseBlock) {
      if (stride == 1) {
        if constexpr (kWiden)
          return lanes_widened(p, n);
        else
          return lanes<true>(p, n, 1);
      }
      return lanes<false>(p, n, stride);
    }
    const std::int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
    // Left half first, in its own statement: as function arguments GCC
    // evaluated the right half first, so the blocks were read from the end
    // of memory back to its start, and the prefetchers, which follow
    // ascending streams, gave half the read bandwidth.
    const Acc left = run_reduce(p, half, stride);
    return r_.combine(left, run_reduce(p + half * stride, n - half, stride));
  }

  // The reduced elements [rb, re) (in the order of the coalesced reduced dims) of one output.
  Acc reduce_range(const In* base, std::int64_t rb, std::int64_t re) const {
    const std::int64_t n0 = g_.rsize[g_.nr - 1], s0 = g_.rin[g_.nr - 1];
    Walker<1> w;
    w.rank = g_.nr - 1;
    w.size = g_.rsize;
    w.stride[0] = g_.rin;
    w.seek(rb / n0);
    std::int64_t col = rb % n0;
    Acc acc = r_.identity();
    for (std::int64_t pos = rb; pos < re; col = 0, w.next()) {
      const std::int64_t count = std::min(n0 - col, re - pos);
      acc = r_.combine(acc, run_reduce(base + w.off[0] + col * s0, count, s0));
      pos += count;
    }
    return acc;
  }

  // acc[0, w) combines the rows [rb, re) of w contiguous inputs at base.
  void outer_tile(const In* base, std::int64_t w, std::int64_t rb, std::int64_t re, Acc* acc) const {
    Walker<1> rw;
    rw.rank = g_.nr;
    rw.size = g_.rsize;
    rw.stride[0] = g_.rin;
    rw.seek(rb);
    [[maybe_unused]] float buf[kWiden ? kTile : 1];
    Acc part[R::kCascade ? kTile : 1];
    Acc* into = R::kCascade ? part : acc;
    if constexpr (R::kCascade) std::fill(part, part + w, r_.identity());
    std::int64_t rows = 0;
    for (std::int64_t r = rb; r < re; ++r, rw.next()) {
      const In* row = base + rw.off[0];
      if constexpr (kWiden) {
        widen_block(row, buf, w);
        for (std::int64_t j = 0; j < w; ++j) into[j] = r_.combine(into[j], r_.map(buf[j]));
      } else if constexpr (kSimd) {
        std::int64_t j = 0;
        for (; j + kW <= w; j += kW)
          store_vec(into + j, R::vcombine(load_vec<Vec>(into + j), R::vmap(load_vec<Vec>(row + j))));
        for (; j < w; ++j) into[j] = r_.combine(into[j], r_.map(row[j]));
      } else {
        for (std::int64_t j = 0; j < w; ++j) into[j] = r_.combine(into[j], r_.map(value(row + j)));
      }
      if constexpr (R::kCascade) {
        if (++rows == kCascadeRows) {
          for (std::int64_t j = 0; j < w; ++j) acc[j] = r_.combine(acc[j], part[j]);  // NOLINT
          std::fill(part, part + w, r_.identity());
          rows = 0;
        }
      }
    }
    if constexpr (R::kCascade)
      for (std::int64_t j = 0; j < w; ++j) acc[j] = r_.combine(acc[j], part[j]);
  }

  // Few outputs, long reductions: chunk p of the reduced range fills
  // partial[p * n_out + o]; the chunks are then combined in order.
  void split_reduction(bool outer) {
    const std::int64_t n_out = g_.n_out, n_red = g_.n_red;
    const std::int64_t chunks = std::min<std::int64_t>(
        {std::int64_t{rt_.threads()} * 4, n_red, std::max<std::int64_t>(1, n_out * n_red / kGrainElements)});
    ScratchLease<Acc> partial = rt_.pool().scratch<Acc>(static_cast<std::size_t>(chunks * n_out));
    Acc* part = partial.data();
    rt_.parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t rb = n_red * c / chunks, re = n_red * (c + 1) / chunks;
        Acc* pc = part + c * n_out;
        if (outer) {
          const std::int64_t j = g_.ksize[g_.nk - 1];
          Walker<2> kw = kept_walker(g_.nk - 1);
          kw.seek(0);
          for (std::int64_t q = 0; q < n_out / j; ++q, kw.next())
            for (std::int64_t j0 = 0; j0 < j; j0 += kTile) {
              const std::int64_t w = std::min(kTile, j - j0);
              std::fill(pc + q * j + j0, pc + q * j + j0 + w, r_.identity());
              outer_tile(in_ + kw.off[0] + j0, w, rb, re, pc + q * j + j0);
            }
        } else {
          Walker<2> w = kept_walker(g_.nk);
          w.seek(0);
          for (std::int64_t o = 0; o < n_out; ++o, w.next()) pc[o] = reduce_range(in_ + w.off[0], rb, re);
        }
      }
    });
    // Output o is the o-th of the kept dims in order, in both formulations.
    Walker<2> w = kept_walker(g_.nk);
    w.seek(0);
    for (std::int64_t o = 0; o < n_out; ++o, w.next()) {
      Acc acc = part[o];
      for (std::int64_t c = 1; c < chunks; ++c) acc = r_.combine(acc, part[c * n_out + o]);
      out_[w.off[1]] = convert<Out>(r_.finish(acc, n_red));
    }
  }

  detail::DeviceRuntime& rt_;
  const R& r_;
  const Geometry& g_;
  const In* in_;
  Out* out_;
};

template <typename R, typename In, typename Out>
void run_engine(detail::DeviceRuntime& rt, const R& r, const ReduceArgs& a) {
  const Geometry g = make_geometry(a);
  Engine<R, In, Out>(rt, r, g, reinterpret_cast<const In*>(a.in), reinterpret_cast<Out*>(a.out)).run();
}

// Floating-only ops (the op validated the dtype).
template <template <typename> class R, typename... Extra>
void run_float(detail::DeviceRuntime& rt, const ReduceArgs& a, Extra... extra) {
  dispatch_dtype(a.in_dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      const R<compute_t<T>> r{extra...};
      run_engine<R<compute_t<T>>, T, T>(rt, r, a);
    }
  });
}

template <typename V>
using MaxR = ExtremeR<V, true>;
template <typename V>
using MinR = ExtremeR<V, false>;
template <typename V>
using AllR = LogicalR<V, true>;
template <typename V>
using AnyR = LogicalR<V, false>;
template <typename V>
using VR = VarR<V, false>;
template <typename V>
using SR = VarR<V, true>;

// sum and prod: floats keep their dtype; integers and bool give i64.
template <template <typename> class R>
void run_widening(detail::DeviceRuntime& rt, const ReduceArgs& a) {
  dispatch_dtype(a.in_dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      run_engine<R<compute_t<T>>, T, T>(rt, R<compute_t<T>>{}, a);
    } else {
      run_engine<R<std::int64_t>, T, std::int64_t>(rt, R<std::int64_t>{}, a);
    }
  });
}

template <template <typename> class R, typename OutFor>
void run_same(detail::DeviceRuntime& rt, const ReduceArgs& a, OutFor) {
  dispatch_dtype(a.in_dtype, [&](auto tag) {
    using T = decltype(tag);
    using Out = std::conditional_t<std::is_same_v<OutFor, bool>, bool, T>;
    run_engine<R<int_or_v<T>>, T, Out>(rt, R<int_or_v<T>>{}, a);
  });
}

}  // namespace

void reduce(detail::DeviceRuntime& rt, ReduceOp op, const ReduceArgs& a) {
  switch (op) {
    case ReduceOp::sum:
      return run_widening<SumR>(rt, a);
    case ReduceOp::prod:
      return run_widening<ProdR>(rt, a);
    case ReduceOp::mean:
      return run_float<MeanR>(rt, a);
    case ReduceOp::norm1:
      return run_float<Norm1R>(rt, a);
    case ReduceOp::norm2:
      return run_float<Norm2R>(rt, a);
    case ReduceOp::logsumexp:
      return run_float<LogSumExpR>(rt, a);
    case ReduceOp::var:
      return run_float<VR>(rt, a, static_cast<double>(a.correction));
    case ReduceOp::std:
      return run_float<SR>(rt, a, static_cast<double>(a.correction));
    case ReduceOp::amax:
      return run_same<MaxR>(rt, a, 0);
    case ReduceOp::amin:
      return run_same<MinR>(rt, a, 0);
    case ReduceOp::all:
      return run_same<AllR>(rt, a, false);
    case ReduceOp::any:
      return run_same<AnyR>(rt, a, false);
  }
}

}  // namespace forge::cpu
