// Sort family kernels on the host.
// - sort/topk: each line along dim is read once into scratch as (key, index)
//   items and ordered by Note [Sort order] (backend/kernels/sort.h): the key
//   first, NaN last, then the index, so std::sort gives the stable order and
//   nothing depends on the algorithm or the thread count. topk keeps a heap
//   of the k best while it scans when k is small against the line (one
//   comparison per element), else partitions with nth_element. Lines are
//   split over threads; each chunk leases its scratch from the pool.
// - searchsorted: libtorch's bisection, comparisons written as libtorch's.
// - multinomial: every row is checked and summed in blocks first (no draw
//   from a refused call), then rows draw in order, one 53-bit uniform per
//   sample: a single sample walks the block sums and then one block; more
//   build a Fenwick tree of the weights (O(log V) per draw, removing each
//   drawn weight without replacement).
// - sort of a whole line of 32-bit-or-narrower keys (f32, f16, bf16, i32,
//   u8, i8, bool) of 256+ elements: an LSD radix sort of (key, index) words,
//   stable, so the same order as the comparison sort.

#include "backend/cpu/sort_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/dim_runs.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/reduce_kernels.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

using backend::BadWeights;
using backend::MultinomialArgs;
using backend::MultinomialCheck;
using backend::SearchArgs;
using backend::SortArgs;

using VecI32 = std::int32_t __attribute__((vector_size(32)));

// Lines with fewer elements than this go whole to one thread together.
constexpr std::int64_t kLineGrainElements = kGrainElements;
// topk scans with a heap of k items while k * this <= the line's length.
constexpr std::int64_t kHeapRatio = 8;

template <typename V>
inline bool key_less(V a, V b) noexcept {
  if constexpr (std::is_floating_point_v<V>)
    return a < b || (b != b && a == a);  // NaN after every number
  else
    return a < b;
}

template <typename V>
struct Item {
  V key;
  std::int64_t index;
};

// Note [Sort order]: the key in the asked direction, then the index.
template <typename V, bool kDescending>
struct Before {
  bool operator()(const Item<V>& a, const Item<V>& b) const noexcept {
    if constexpr (kDescending) {
      if (key_less(b.key, a.key)) return true;
      if (key_less(a.key, b.key)) return false;
    } else {
      if (key_less(a.key, b.key)) return true;
      if (key_less(b.key, a.key)) return false;
    }
    return a.index < b.index;
  }
};

// Whether any lane of a vector comparison's result is set.
inline bool any_lane(VecI32 m) noexcept {
  std::uint64_t words[sizeof(VecI32) / 8];
  std::memcpy(words, &m, sizeof m);
  std::uint64_t any = 0;
  for (const std::uint64_t w : words) any |= w;
  return any != 0;
}

struct ByIndex {
  template <typename I>
  bool operator()(const I& a, const I& b) const noexcept {
    return a.index < b.index;
  }
};

// A key's bits in an unsigned order that is Note [Sort order]'s: -0 as 0,
// every NaN above +inf.
template <typename V>
inline std::uint32_t ordered_bits(V v) noexcept {
  if constexpr (std::is_same_v<V, float>) {
    if (v != v) return 0xFFFFFFFFu;
    const auto u = std::bit_cast<std::uint32_t>(v == 0 ? 0.0f : v);
    return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
  } else if constexpr (std::is_same_v<V, std::int32_t>) {
    return static_cast<std::uint32_t>(v) ^ 0x80000000u;
  } else if constexpr (std::is_same_v<V, std::int8_t>) {
    return static_cast<std::uint32_t>(static_cast<std::uint8_t>(v) ^ 0x80u);
  } else {
    return v;
  }
}

constexpr int kRadixBits = 8;
constexpr std::int64_t kRadixMinElements = 256;
constexpr std::int64_t kRadixMaxElements = std::int64_t{1} << 32;  // the index takes the low 32 bits

// Sorts the n keys key(i) of a line, stably, into `out` as (ordered key << 32 | i),
// through `tmp`: least significant digit first, 8 bits at a time, skipping a
// digit every key shares. Stable passes over keys laid out in index order
// leave equal keys in index order.
template <bool kDescending, typename KeyFn>
void radix_sort_line(std::int64_t n, KeyFn key, std::uint64_t* out, std::uint64_t* tmp) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits = ordered_bits(key(i));
    if (kDescending) bits = ~bits;
    out[i] = static_cast<std::uint64_t>(bits) << 32 | static_cast<std::uint64_t>(i);
  }
  std::uint64_t* src = out;
  std::uint64_t* dst = tmp;
  for (int shift = 32; shift < 64; shift += kRadixBits) {
    std::int64_t count[std::size_t{1} << kRadixBits] = {};
    const std::uint64_t mask = (std::uint64_t{1} << kRadixBits) - 1;
    for (std::int64_t i = 0; i < n; ++i) ++count[(src[i] >> shift) & mask];
    if (count[(src[0] >> shift) & mask] == n) continue;  // one digit for all: nothing moves
    std::int64_t at = 0;
    for (std::int64_t& c : count) {
      const std::int64_t here = c;
      c = at;
      at += here;
    }
    for (std::int64_t i = 0; i < n; ++i) dst[count[(src[i] >> shift) & mask]++] = src[i];
    std::swap(src, dst);
  }
  if (src != out) std::copy(src, src + n, out);
}

// The lines of a SortArgs: every position of the dims other than dim, with
// the element offsets of x, values and indices there.
struct Lines {
  std::int64_t size[kMaxRank] = {};
  std::int64_t in[kMaxRank] = {}, val[kMaxRank] = {}, idx[kMaxRank] = {};
  int rank = 0;
  std::int64_t count = 1;

  explicit Lines(const SortArgs& a) {
    for (int d = 0; d < a.shape.rank(); ++d) {
      if (d == a.dim) continue;
      size[rank] = a.shape[d];
      in[rank] = a.in_strides[d];
      val[rank] = a.values ? a.values_strides[d] : 0;
      idx[rank] = a.indices_strides[d];
      count *= a.shape[d];
      ++rank;
    }
  }
  Walker<3> walker() const noexcept { return Walker<3>::over(rank, size, {in, val, idx}); }
};

template <typename T, bool kDescending>
void select_lines(detail::DeviceRuntime& rt, const SortArgs& a) {
  using V = int_or_v<T>;
  using I = Item<V>;
  const Before<V, kDescending> before;
  const Lines lines(a);
  const std::int64_t n = a.shape[a.dim], k = a.k, s = a.in_strides[a.dim];
  const std::int64_t vs = a.values ? a.values_strides[a.dim] : 0, is = a.indices_strides[a.dim];
  if (lines.count == 0 || k == 0) return;
  const T* in = reinterpret_cast<const T*>(a.in);
  T* values = reinterpret_cast<T*>(a.values);
  auto* indices = reinterpret_cast<std::int64_t*>(a.indices);
  const bool heap = k < n && k * kHeapRatio <= n;
  const auto key_at = [&](const T* row, std::int64_t i) { return static_cast<V>(widen(load(row + i * s))); };

  // Element i of the line, of key v, enters the heap in place of the worst kept.
  const auto offer = [&](I* items, V v, std::int64_t i) {
    // A later index loses every tie: only a strictly better key enters.
    if (!(kDescending ? key_less(items[0].key, v) : key_less(v, items[0].key))) return;
    std::pop_heap(items, items + k, before);
    items[k - 1] = {v, i};
    std::push_heap(items, items + k, before);
  };
  // Orders the line at `row` into items[0, k).
  const auto order = [&](const T* row, I* items) {
    if (heap) {
      for (std::int64_t i = 0; i < k; ++i) items[i] = {key_at(row, i), i};
      std::make_heap(items, items + k, before);  // items[0]: the worst kept
      std::int64_t i = k;
      if constexpr (std::is_same_v<T, float>) {
        // Blocks with no lane better than the worst kept (nor NaN) are passed over whole.
        for (; s == 1 && i + kVecF <= n; i += kVecF) {
          const VecF v = load_vec<VecF>(row + i), worst = splat<VecF>(items[0].key);
          // Descending, a NaN lane beats a number; ascending, any number beats a NaN kept.
          if (!any_lane(kDescending ? (v > worst) | (v != v) : (v < worst) | (worst != worst))) continue;
          for (int u = 0; u < kVecF; ++u) offer(items, row[i + u], i + u);
        }
      }
      for (; i < n; ++i) offer(items, key_at(row, i), i);
      if (a.sorted) std::sort_heap(items, items + k, before);
    } else {
      for (std::int64_t i = 0; i < n; ++i) items[i] = {key_at(row, i), i};
      if (k < n) std::nth_element(items, items + k, items + n, before);
      if (a.sorted) std::sort(items, items + k, before);
    }
    if (!a.sorted) std::sort(items, items + k, ByIndex{});
  };

  const std::int64_t grain = std::max<std::int64_t>(1, kLineGrainElements / n);
  // Whole long lines of keys of 32 bits or fewer sort by radix (same order, Note [Sort order]).
  constexpr bool kNarrowKeys = std::is_same_v<V, float> || std::is_same_v<V, std::int32_t> ||
                               std::is_same_v<V, std::uint8_t> || std::is_same_v<V, std::int8_t>;
  const bool radix = kNarrowKeys && k == n && a.sorted && n >= kRadixMinElements && n <= kRadixMaxElements;
  rt.parallel_for(lines.count, grain, [&](std::int64_t l0, std::int64_t l1) {
    ScratchLease<I> scratch = rt.pool().scratch<I>(static_cast<std::size_t>(heap ? k : n));
    I* items = scratch.data();
    Walker<3> w = lines.walker();
    w.seek(l0);
    for (std::int64_t l = l0; l < l1; ++l, w.next()) {
      if constexpr (kNarrowKeys) {
        if (radix) {
          // Two arrays of n words fit the n items' scratch.
          auto* keys = reinterpret_cast<std::uint64_t*>(items);
          const T* row = in + w.off[0];
          radix_sort_line<kDescending>(
              n, [&](std::int64_t i) { return key_at(row, i); }, keys, keys + n);
          for (std::int64_t j = 0; j < n; ++j) {
            const auto i = static_cast<std::int64_t>(keys[j] & 0xFFFFFFFFu);
            if (values) values[w.off[1] + j * vs] = load(row + i * s);
            indices[w.off[2] + j * is] = i;
          }
          continue;
        }
      }
      order(in + w.off[0], items);
      if (values) {
        T* v = values + w.off[1];
        for (std::int64_t j = 0; j < k; ++j) v[j * vs] = convert<T>(items[j].key);
      }
      std::int64_t* ix = indices + w.off[2];
      for (std::int64_t j = 0; j < k; ++j) ix[j * is] = items[j].index;
    }
  });
}

void select(detail::DeviceRuntime& rt, const SortArgs& a) {
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (a.descending)
      select_lines<T, true>(rt, a);
    else
      select_lines<T, false>(rt, a);
  });
}

// ---- searchsorted ----

template <typename T>
void search(detail::DeviceRuntime& rt, const SearchArgs& a) {
  using V = int_or_v<T>;
  const int rank = a.shape.rank();
  const std::int64_t total = a.shape.numel(), len = a.sequence_len, step = a.sequence_step;
  if (total == 0) return;
  std::int64_t size[kMaxRank], vst[kMaxRank], sst[kMaxRank], ost[kMaxRank];
  for (int d = 0; d < rank; ++d) {
    size[d] = a.shape[d];
    vst[d] = a.values_strides[d];
    sst[d] = a.sequence_strides[d];
    ost[d] = a.out_strides[d];
  }
  const T* values = reinterpret_cast<const T*>(a.values);
  const T* sequence = reinterpret_cast<const T*>(a.sequence);
  const auto bound = [&](const T* row, V v) {
    std::int64_t lo = 0, hi = len;
    while (lo < hi) {
      const std::int64_t mid = lo + ((hi - lo) >> 1);
      const V m = static_cast<V>(widen(load(row + mid * step)));
      if (a.right ? !(m > v) : !(m >= v))
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo;
  };
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / 16);
  rt.parallel_for(total, grain, [&](std::int64_t p0, std::int64_t p1) {
    Walker<3> w = Walker<3>::over(rank, size, {vst, sst, ost});
    w.seek(p0);
    for (std::int64_t p = p0; p < p1; ++p, w.next()) {
      const std::int64_t at = bound(sequence + w.off[1], static_cast<V>(widen(load(values + w.off[0]))));
      if (a.out_dtype == DType::i32)
        reinterpret_cast<std::int32_t*>(a.out)[w.off[2]] = static_cast<std::int32_t>(at);
      else
        reinterpret_cast<std::int64_t*>(a.out)[w.off[2]] = at;
    }
  });
}

// ---- multinomial ----

// A uniform double in [0, 1) from 53 random bits.
inline double unit_draw(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

template <typename T>
struct WeightRow {
  const T* p;
  std::int64_t stride;
  double operator[](std::int64_t i) const noexcept { return static_cast<double>(widen(load(p + i * stride))); }
};

// Negative, NaN or inf (w - w is 0 for every finite w): one branch-free test the lanes below vectorize.
inline bool bad_weight(double w) noexcept { return !(w >= 0 && w - w == 0); }

// The sum of weights [begin, end) of a row, how many are positive, and
// whether any is negative, NaN or inf: in 8 interleaved lanes, since one
// chain of dependent double adds would bound the loop.
struct Summary {
  double sum = 0;
  std::int64_t positive = 0;
  bool bad = false;
};
template <typename T>
Summary summarize(const WeightRow<T>& row, std::int64_t begin, std::int64_t end) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t positive = 0;
  bool bad = false;
  std::int64_t i = begin;
  const auto add_block = [&](auto at) {
    for (; i + kLanes <= end; i += kLanes) {
      for (int u = 0; u < kLanes; ++u) {
        const double w = at(i + u);
        lane[u] += w;
        positive += w > 0;
        bad |= bad_weight(w);
      }
    }
  };
  if (row.stride == 1)  // packed: the loop vectorizes
    add_block([p = row.p](std::int64_t j) { return static_cast<double>(widen(load(p + j))); });
  else
    add_block([&row](std::int64_t j) { return row[j]; });
  for (; i < end; ++i) {
    const double w = row[i];
    lane[0] += w;
    positive += w > 0;
    bad |= bad_weight(w);
  }
  const double sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  return {sum, positive, bad};
}

// Rows are summed in blocks of this many weights; a single draw walks the
// block sums, then one block.
constexpr std::int64_t kDrawBlock = 256;

// Checks every row; fills totals[r] with row r's sum and block_sums[r * blocks + b]
// with the sum of its block b.
template <typename T>
MultinomialCheck check_rows(const MultinomialArgs& a, double* totals, double* block_sums) {
  const T* probs = reinterpret_cast<const T*>(a.probs);
  const std::int64_t n = a.categories, blocks = (n + kDrawBlock - 1) / kDrawBlock;
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const WeightRow<T> row{probs + r * a.row_stride, a.col_stride};
    Summary s;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const Summary part = summarize(row, b * kDrawBlock, std::min(n, (b + 1) * kDrawBlock));
      block_sums[r * blocks + b] = part.sum;
      s.sum += part.sum;
      s.positive += part.positive;
      s.bad |= part.bad;
    }
    if (s.bad) {
      for (std::int64_t i = 0; i < n; ++i) {
        const double w = row[i];
        if (bad_weight(w)) return {w < 0 ? BadWeights::negative : BadWeights::non_finite, r, i, w, 0};
      }
    }
    if (!(s.sum > 0) || std::isinf(s.sum))
      return {s.sum > 0 ? BadWeights::non_finite : BadWeights::zero_sum, r, -1, s.sum, 0};
    if (!a.replacement && s.positive < a.samples) return {BadWeights::too_few_nonzero, r, -1, s.sum, s.positive};
    totals[r] = s.sum;
  }
  return {};
}

// The first category whose running sum passes target (a positive weight):
// whole blocks are added by their sums, the block that passes is walked.
template <typename T>
std::int64_t scan_draw(const WeightRow<T>& row, std::int64_t n, const double* block_sums, double target) {
  double acc = 0;
  for (std::int64_t b = 0; b * kDrawBlock < n; ++b) {
    if (!(acc + block_sums[b] > target)) {
      acc += block_sums[b];
      continue;
    }
    for (std::int64_t i = b * kDrawBlock, e = std::min(n, i + kDrawBlock); i < e; ++i) {
      const double w = row[i];
      if (w <= 0) continue;
      acc += w;
      if (acc > target) return i;
    }
  }
  for (std::int64_t i = n - 1; i > 0; --i)  // target rounded up to the whole sum: the last positive weight
    if (row[i] > 0) return i;
  return 0;
}

// A Fenwick tree over a row's weights: tree[i - 1] holds the sum of the
// weights (i - lowbit(i), i] (1-based).
class Fenwick {
 public:
  Fenwick(double* tree, double* weight, std::int64_t n) : tree_(tree), weight_(weight), n_(n) {}

  template <typename T>
  void build(const WeightRow<T>& row) {
    for (std::int64_t i = 0; i < n_; ++i) tree_[i] = weight_[i] = row[i];
    for (std::int64_t i = 1; i <= n_; ++i) {
      const std::int64_t j = i + (i & -i);
      if (j <= n_) tree_[j - 1] += tree_[i - 1];
    }
  }
  // The category whose running sum first passes target; a category of weight
  // 0 (a drawn one) is never returned, even when rounding leaves residue.
  std::int64_t find(double target) const noexcept {
    std::int64_t pos = 0;
    for (std::int64_t step = std::bit_floor(static_cast<std::uint64_t>(n_)); step > 0; step >>= 1) {
      if (pos + step <= n_ && tree_[pos + step - 1] <= target) {
        pos += step;
        target -= tree_[pos - 1];
      }
    }
    if (pos < n_ && weight_[pos] > 0) return pos;
    for (std::int64_t i = std::min(pos, n_ - 1); i >= 0; --i)
      if (weight_[i] > 0) return i;
    for (std::int64_t i = pos; i < n_; ++i)
      if (weight_[i] > 0) return i;
    return 0;  // unreachable: the op checked that enough weights are positive
  }
  // Removes category i's weight; returns it.
  double remove(std::int64_t i) noexcept {
    const double w = weight_[i];
    weight_[i] = 0;
    for (std::int64_t j = i + 1; j <= n_; j += j & -j) tree_[j - 1] -= w;
    return w;
  }
  double remaining() const noexcept {
    double sum = 0;
    for (std::int64_t i = 0; i < n_; ++i) sum += weight_[i];
    return sum;
  }

 private:
  double* tree_;
  double* weight_;
  std::int64_t n_;
};

template <typename T>
MultinomialCheck draw(detail::DeviceRuntime& rt, const MultinomialArgs& a, std::mt19937_64& g) {
  const std::int64_t n = a.categories, blocks = (n + kDrawBlock - 1) / kDrawBlock;
  ScratchLease<double> sums = rt.pool().scratch<double>(static_cast<std::size_t>(a.rows * (blocks + 1)));
  double* totals = sums.data();
  double* block_sums = totals + a.rows;
  const MultinomialCheck bad = check_rows<T>(a, totals, block_sums);
  if (bad.problem != BadWeights::none) return bad;
  const T* probs = reinterpret_cast<const T*>(a.probs);
  auto* out = reinterpret_cast<std::int64_t*>(a.out);
  ScratchLease<double> tree;
  if (a.samples > 1) tree = rt.pool().scratch<double>(static_cast<std::size_t>(2 * n));
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const WeightRow<T> row{probs + r * a.row_stride, a.col_stride};
    std::int64_t* o = out + r * a.out_row_stride;
    if (a.samples == 1) {
      o[0] = scan_draw(row, n, block_sums + r * blocks, unit_draw(g) * totals[r]);
      continue;
    }
    Fenwick f(tree.data(), tree.data() + n, n);
    f.build(row);
    double total = totals[r];
    for (std::int64_t j = 0; j < a.samples; ++j) {
      const std::int64_t c = f.find(unit_draw(g) * total);
      o[j * a.out_col_stride] = c;
      if (a.replacement) continue;
      total -= f.remove(c);
      if (!(total > 0)) total = f.remaining();  // rounding ate the rest: sum what is left
    }
  }
  return {};
}

}  // namespace

// A sort is a selection of every element (k = shape[dim]).
void sort(detail::DeviceRuntime& rt, const SortArgs& args) { select(rt, args); }
void topk(detail::DeviceRuntime& rt, const SortArgs& args) { select(rt, args); }

void searchsorted(detail::DeviceRuntime& rt, const SearchArgs& args) {
  dispatch_dtype(args.dtype, [&](auto tag) { search<decltype(tag)>(rt, args); });
}

MultinomialCheck multinomial(detail::DeviceRuntime& rt, const MultinomialArgs& args, std::mt19937_64* generator) {
  return dispatch_dtype(args.dtype, [&](auto tag) -> MultinomialCheck {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>)
      return draw<T>(rt, args, *generator);
    else
      return {};  // the table lists floating dtypes only
  });
}

}  // namespace forge::cpu
