// scaled_dot_product_attention as one fused loop over the rows of q: for
// each row, the scores against every key (scaled, masked), a max-subtracted
// softmax and the weighted sum of the values, in f32 (f64 for f64) with the
// scores and the output row in scratch; the [L, S] matrix is never stored.
// Rows are cut into blocks, each with its own slice of one scratch lease.
//
// dropout decides element i (its logical, row-major position) by splitmix64's
// finalizer over (seed, i), in fixed blocks of positions: the mask depends on
// the seed alone, not on the thread count or the layout.

#include "backend/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/eigen.h"
#include "backend/cpu/kernels.h"
#include "core/convert.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

// Element offsets, for each operand of `loop`, of logical (row-major) position `pos`.
template <int N>
void offsets_at(const StridedLoop<N>& loop, std::int64_t pos, std::int64_t (&off)[N]) noexcept {
  const std::int64_t inner = loop.inner();
  loop.row_offsets(pos / inner, off);
  for (int k = 0; k < N; ++k) off[k] += pos % inner * loop.strides[k].back();
}

// An operand's batch strides, or zeros for an absent one.
Strides batch_strides_or_zero(const backend::MatrixOperand& m, int rank) {
  return m.data != nullptr ? m.batch_strides : Strides::filled(rank, 0);
}

template <typename T, typename M>
void attention_rows(DeviceRuntime& rt, const AttentionProblem& a) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using Vec = Eigen::Matrix<A, Eigen::Dynamic, 1>;
  const bool masked = a.mask.data != nullptr;
  const bool is_causal = a.is_causal;
  const std::int64_t causal_offset = a.causal_offset;
  const Strides mask_batch = batch_strides_or_zero(a.mask, a.batch.rank());
  const Strides* const batch_strides[5] = {&a.out.batch_strides, &a.q.batch_strides, &a.k.batch_strides,
                                           &a.v.batch_strides, &mask_batch};
  const StridedLoop<5> outer(a.batch, batch_strides);
  const std::int64_t mask_row = a.mask.rs, mask_col = a.mask.cs;
  const T* qb = reinterpret_cast<const T*>(a.q.data);
  const T* kb = reinterpret_cast<const T*>(a.k.data);
  const T* vb = reinterpret_cast<const T*>(a.v.data);
  const M* mb = masked ? reinterpret_cast<const M*>(a.mask.data) : nullptr;
  T* ob = reinterpret_cast<T*>(a.out.data);
  const std::int64_t qr = a.q.rs, qe = a.q.cs;
  const std::int64_t kr = a.k.rs, ke = a.k.cs;
  const std::int64_t vr = a.v.rs, ve = a.v.cs;
  const std::int64_t orow = a.out.rs, oe = a.out.cs;
  const std::int64_t rows = a.batch.numel() * a.L;
  // Scratch per block: scores (S), the query row widened (E) and the output row (Ev).
  const std::int64_t per_row_work = std::max<std::int64_t>(1, a.S * (a.E + a.Ev));
  const std::int64_t blocks = std::min<std::int64_t>(
      rows, std::max<std::int64_t>(1, std::min<std::int64_t>(rows * per_row_work / kGrainElements + 1,
                                                             4 * static_cast<std::int64_t>(rt.threads()))));
  const std::int64_t stride = a.S + a.E + a.Ev;
  ScratchLease<A> scratch = rt.pool().scratch<A>(static_cast<std::size_t>(std::max<std::int64_t>(blocks * stride, 1)));
  const A scale = static_cast<A>(a.scale);
  const A neg_inf = -std::numeric_limits<A>::infinity();
  rt.parallel_for(blocks, 1, [&](std::int64_t bbegin, std::int64_t bend) {
    for (std::int64_t blk = bbegin; blk < bend; ++blk) {
      A* scores = scratch.data() + blk * stride;
      A* qrow = scores + a.S;
      A* acc = qrow + a.E;
      const std::int64_t rbegin = rows * blk / blocks, rend = rows * (blk + 1) / blocks;
      for (std::int64_t r = rbegin; r < rend; ++r) {
        const std::int64_t b = r / a.L, i = r % a.L;
        std::int64_t off[5];
        offsets_at(outer, b, off);
        const T* qp = qb + off[1] + i * qr;
        for (std::int64_t e = 0; e < a.E; ++e) qrow[e] = static_cast<A>(widen(qp[e * qe]));
        A m = neg_inf;
        for (std::int64_t j = 0; j < a.S; ++j) {
          A s;
          if (is_causal && j > i + causal_offset) {
            s = neg_inf;
          } else {
            const T* kp = kb + off[2] + j * kr;
            A dot = 0;
            if constexpr (std::is_same_v<T, A>) {
              if (ke == 1)
                dot = Vec::Map(qrow, a.E).dot(Vec::Map(kp, a.E));
              else
                for (std::int64_t e = 0; e < a.E; ++e) dot += qrow[e] * kp[e * ke];
            } else if (ke == 1) {
              for (std::int64_t e = 0; e < a.E; ++e) dot += qrow[e] * static_cast<A>(widen(kp[e]));
            } else {
              for (std::int64_t e = 0; e < a.E; ++e) dot += qrow[e] * static_cast<A>(widen(kp[e * ke]));
            }
            s = dot * scale;
            if (masked) {
              const M mv = mb[off[4] + i * mask_row + j * mask_col];
              if constexpr (std::is_same_v<M, bool>) {
                if (!load(&mv)) s = neg_inf;
              } else {
                s += static_cast<A>(widen(mv));
              }
            }
          }
          scores[j] = s;
          m = std::max(m, s);
        }
        // Eigen's exp and sum are vectorized (std::exp in a loop is not).
        auto row = Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>>(scores, a.S);
        row = (row - m).exp();
        const A total = row.sum();
        const A inv = A{1} / total;
        for (std::int64_t e = 0; e < a.Ev; ++e) acc[e] = 0;
        for (std::int64_t j = 0; j < a.S; ++j) {
          const A p = scores[j] * inv;
          const T* vp = vb + off[3] + j * vr;
          if (ve == 1) {
            for (std::int64_t e = 0; e < a.Ev; ++e) acc[e] += p * static_cast<A>(widen(vp[e]));
          } else {
            for (std::int64_t e = 0; e < a.Ev; ++e) acc[e] += p * static_cast<A>(widen(vp[e * ve]));
          }
        }
        T* op = ob + off[0] + i * orow;
        for (std::int64_t e = 0; e < a.Ev; ++e) op[e * oe] = convert<T>(acc[e]);
      }
    }
  });
}

// splitmix64's finalizer: a bijection that mixes every input bit into every output bit.
inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
void dropout_typed(DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& x, double p,
                   std::uint64_t seed) {
  using C = compute_t<T>;
  const std::int64_t n = shape.numel();
  // Keep element i when its 53-bit uniform draw u satisfies u >= p.
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(p, 53));
  const Strides* const strides[2] = {&out.strides, &x.strides};
  const StridedLoop<2> loop(shape, strides);
  const std::int64_t so = loop.strides[0].back(), sx = loop.strides[1].back();
  const C scale = static_cast<C>(1.0 / (1.0 - p));
  const std::int64_t block = kGrainElements, blocks = (n + block - 1) / block;
  const std::int64_t inner = loop.inner();
  rt.parallel_for(blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t last = std::min(n, end * block);
    for (std::int64_t pos = begin * block; pos < last;) {  // one run of the inner dim at a time
      std::int64_t off[2];
      offsets_at(loop, pos, off);
      const std::int64_t count = std::min(inner - pos % inner, last - pos);
      T* o = reinterpret_cast<T*>(out.data) + off[0];
      const T* s = reinterpret_cast<const T*>(x.data) + off[1];
      for (std::int64_t k = 0; k < count; ++k) {
        const std::uint64_t h = mix64(seed + static_cast<std::uint64_t>(pos + k) * 0x9e3779b97f4a7c15ull);
        const bool keep = (h >> 11) >= threshold;
        o[k * so] = keep ? convert<T>(widen(s[k * sx]) * scale) : T{};
      }
      pos += count;
    }
  });
}

}  // namespace

void attention(DeviceRuntime& rt, const AttentionProblem& p) {
  if (p.batch.numel() * p.L * p.Ev == 0) return;
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) {
      if (p.mask.data != nullptr && p.mask_dtype == DType::boolean)
        attention_rows<T, bool>(rt, p);
      else
        attention_rows<T, T>(rt, p);
    }
  });
}

void dropout(DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& x, double p,
             std::uint64_t seed) {
  if (shape.numel() == 0) return;
  dispatch_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) dropout_typed<T>(rt, shape, out, x, p, seed);
  });
}

}  // namespace forge::cpu
