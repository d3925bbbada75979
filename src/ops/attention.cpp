// dropout and scaled_dot_product_attention.
//
// dropout draws one 64-bit seed from the context's generator per call and
// decides element i (its logical, row-major position) by a counter-based hash
// of (seed, i): the mask does not depend on the thread count or the layout,
// and a manual_seed replays it. Dropped elements are written as 0. Under
// autograd the seed is all the backward keeps: it replays the same mask on
// the gradient (detail::dropout_with_seed), so no mask tensor is stored.
//
// scaled_dot_product_attention is one fused loop over the rows of q: for
// each row, the scores against every key (scaled, masked), a max-subtracted
// softmax and the weighted sum of the values, in f32 (f64 for f64) with the
// scores and the output row in scratch; the [L, S] matrix is never stored.
// Batch dims of q, k, v and the mask broadcast. A row whose keys are all
// masked has no softmax and comes out NaN, and no keys at all (S = 0) give
// zeros (an empty weighted sum), as in libtorch.

#include <cmath>
#include <limits>
#include <optional>

// GCC 12 reports a false (maybe-)uninitialized use inside Eigen's AVX-512 exp
// (_mm512_undefined_ps); the warning is about the intrinsic, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "backend/cpu/nn_backward_kernels.h"
#include "core/convert.h"
#include "forge/ops.h"
#include "ops/nn_internal.h"

namespace forge {
namespace {

// splitmix64's finalizer: a bijection that mixes every input bit into every output bit.
inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void check_dropout(const char* op, const Tensor& x, double p) {
  detail::check_input(op, x, "x");
  detail::check_floating(op, x, "x");
  FORGE_CHECK(p >= 0.0 && p <= 1.0, invalid_argument, op, "p must be in [0, 1], got ", p);
}

// out = x with the mask of `seed` applied: kept elements scaled by 1 / (1 - p).
void dropout_kernel(Tensor& out, const Tensor& x, double p, std::uint64_t seed) {
  Runtime& rt = out.runtime();
  const std::int64_t n = x.numel();
  if (n == 0) return;
  // Keep element i when its 53-bit uniform draw u satisfies u >= p.
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(p, 53));
  const cpu::Operand oo = detail::operand(out), ox = detail::operand(x);
  const Strides* const strides[2] = {&oo.strides, &ox.strides};
  const cpu::StridedLoop<2> loop(x.shape(), strides);
  const std::int64_t so = loop.strides[0].back(), sx = loop.strides[1].back();
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) {
      using C = compute_t<T>;
      const C scale = static_cast<C>(1.0 / (1.0 - p));
      const std::int64_t block = cpu::kGrainElements, blocks = (n + block - 1) / block;
      rt.parallel_for(blocks, 1, [&](std::int64_t begin, std::int64_t end) {
        detail::for_each_run_in(loop, begin * block, std::min(n, end * block),
                                [&](const std::int64_t(&off)[2], std::int64_t count, std::int64_t pos) {
                                  T* o = reinterpret_cast<T*>(oo.data) + off[0];
                                  const T* s = reinterpret_cast<const T*>(ox.data) + off[1];
                                  for (std::int64_t k = 0; k < count; ++k) {
                                    const std::uint64_t h =
                                        mix64(seed + static_cast<std::uint64_t>(pos + k) * 0x9e3779b97f4a7c15ull);
                                    const bool keep = (h >> 11) >= threshold;
                                    o[k * so] = keep ? convert<T>(widen(s[k * sx]) * scale) : T{};
                                  }
                                });
      });
    }
  });
}

// Draws the call's seed (none when p >= 1: everything is dropped) and applies
// its mask; returns the seed for the backward to replay.
std::uint64_t dropout_draw(Tensor& out, const Tensor& x, double p) {
  if (p >= 1.0) {
    detail::fill("dropout", out, out.shape(), detail::operand(out), 0.0);
    return 0;
  }
  const std::uint64_t seed = (*out.runtime().generator().lease("dropout"))();
  dropout_kernel(out, x, p, seed);
  return seed;
}

struct Attention {
  Shape batch;  // broadcast batch dims
  Shape out_shape;
  std::int64_t L, S, E, Ev;
  double scale;
};

Shape batch_of(const Tensor& t, int trailing) {
  Shape b;
  for (int d = 0; d < t.dim() - trailing; ++d) b.push_back(t.shape()[d]);
  return b;
}

Attention plan_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         bool is_causal, std::optional<double> scale) {
  detail::check_input(op, q, "q");
  detail::check_input(op, k, "k");
  detail::check_input(op, v, "v");
  detail::check_same_runtime(op, q, k);
  detail::check_same_runtime(op, q, v);
  detail::check_floating(op, q, "q");
  FORGE_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), dtype, op, "q, k and v must share a dtype, got ",
              dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  FORGE_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, shape, op, "q, k and v need at least 2 dims, got ",
              q.shape(), ", ", k.shape(), " and ", v.shape());
  Attention a;
  a.L = q.shape()[q.dim() - 2];
  a.E = q.shape()[q.dim() - 1];
  a.S = k.shape()[k.dim() - 2];
  a.Ev = v.shape()[v.dim() - 1];
  FORGE_CHECK(k.shape()[k.dim() - 1] == a.E, shape, op, "q of shape ", q.shape(), " and k of shape ", k.shape(),
              " differ in the embedding size");
  FORGE_CHECK(v.shape()[v.dim() - 2] == a.S, shape, op, "k of shape ", k.shape(), " and v of shape ", v.shape(),
              " differ in the number of keys");
  a.batch = broadcast_shapes(broadcast_shapes(batch_of(q, 2), batch_of(k, 2), op), batch_of(v, 2), op);
  FORGE_CHECK(a.batch.rank() + 2 <= kMaxRank, invalid_argument, op, "batch dims ", a.batch, " are too many");
  if (mask.defined()) {
    detail::check_input(op, mask, "attn_mask");
    detail::check_same_runtime(op, q, mask);
    FORGE_CHECK(mask.dtype() == DType::boolean || is_floating(mask.dtype()), dtype, op,
                "attn_mask must be bool or floating, not ", dtype_name(mask.dtype()));
    FORGE_CHECK(!is_causal, invalid_argument, op, "pass either attn_mask or is_causal, not both");
    Shape scores = a.batch;
    scores.push_back(a.L);
    scores.push_back(a.S);
    FORGE_CHECK(broadcast_shapes(mask.shape(), scores, op) == scores, shape, op, "attn_mask of shape ", mask.shape(),
                " does not broadcast to the scores' shape ", scores);
  }
  if (scale) {
    FORGE_CHECK(std::isfinite(*scale), invalid_argument, op, "scale must be finite, got ", *scale);
    a.scale = *scale;
  } else {
    a.scale = a.E > 0 ? 1.0 / std::sqrt(static_cast<double>(a.E)) : 1.0;
  }
  a.out_shape = a.batch;
  a.out_shape.push_back(a.L);
  a.out_shape.push_back(a.Ev);
  return a;
}

// Strides of t (rank >= 2) for the batch dims, right-aligned and 0 where broadcast.
Strides batch_strides(const Tensor& t, const Shape& batch, int trailing) {
  Strides s = Strides::filled(batch.rank(), 0);
  const int lead = batch.rank() - (t.dim() - trailing);
  for (int d = 0; d < t.dim() - trailing; ++d) s[lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return s;
}

template <typename T, typename M>
void attention_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool is_causal,
                    const Attention& a) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using Vec = Eigen::Matrix<A, Eigen::Dynamic, 1>;
  Runtime& rt = out.runtime();
  const bool masked = mask.defined();
  detail::OuterIndex<5> outer;
  outer.shape = a.batch;
  outer.strides[0] = batch_strides(out, a.batch, 2);
  outer.strides[1] = batch_strides(q, a.batch, 2);
  outer.strides[2] = batch_strides(k, a.batch, 2);
  outer.strides[3] = batch_strides(v, a.batch, 2);
  std::int64_t mask_row = 0, mask_col = 0;
  if (masked) {  // the mask as a [batch..., L, S] operand
    Shape scores = a.batch;
    scores.push_back(a.L);
    scores.push_back(a.S);
    const cpu::Operand m = detail::operand_broadcast(mask, scores);
    outer.strides[4] = Strides::filled(a.batch.rank(), 0);
    for (int d = 0; d < a.batch.rank(); ++d) outer.strides[4][d] = m.strides[d];
    mask_row = m.strides[a.batch.rank()];
    mask_col = m.strides[a.batch.rank() + 1];
  } else {
    outer.strides[4] = Strides::filled(a.batch.rank(), 0);
  }
  const T* qb = reinterpret_cast<const T*>(detail::first_element(q));
  const T* kb = reinterpret_cast<const T*>(detail::first_element(k));
  const T* vb = reinterpret_cast<const T*>(detail::first_element(v));
  const M* mb = masked ? reinterpret_cast<const M*>(detail::first_element(mask)) : nullptr;
  T* ob = reinterpret_cast<T*>(detail::first_element(out));
  const std::int64_t qr = q.strides()[q.dim() - 2], qe = q.strides()[q.dim() - 1];
  const std::int64_t kr = k.strides()[k.dim() - 2], ke = k.strides()[k.dim() - 1];
  const std::int64_t vr = v.strides()[v.dim() - 2], ve = v.strides()[v.dim() - 1];
  const std::int64_t orow = out.strides()[out.dim() - 2], oe = out.strides()[out.dim() - 1];
  const std::int64_t rows = a.batch.numel() * a.L;
  // Rows are cut into blocks, each with its own slice of one scratch lease:
  // scores (S), the query row widened (E) and the output row (Ev).
  const std::int64_t per_row_work = std::max<std::int64_t>(1, a.S * (a.E + a.Ev));
  const std::int64_t blocks = std::min<std::int64_t>(
      rows, std::max<std::int64_t>(1, std::min<std::int64_t>(rows * per_row_work / cpu::kGrainElements + 1,
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
        outer.offsets(b, off);
        const T* qp = qb + off[1] + i * qr;
        for (std::int64_t e = 0; e < a.E; ++e) qrow[e] = static_cast<A>(widen(qp[e * qe]));
        A m = neg_inf;
        for (std::int64_t j = 0; j < a.S; ++j) {
          A s;
          if (is_causal && j > i) {
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

void attention_kernel(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                      bool is_causal, const Attention& a) {
  if (out.numel() == 0) return;
  // A float mask in another dtype than q is read in q's dtype.
  Tensor cast_mask;
  const Tensor* m = &mask;
  if (mask.defined() && mask.dtype() != DType::boolean && mask.dtype() != q.dtype()) {
    cast_mask = detail::cast_temporary(mask, q.dtype(), "scaled_dot_product_attention");
    m = &cast_mask;
  }
  dispatch_dtype(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) {
      if (m->defined() && m->dtype() == DType::boolean)
        attention_rows<T, bool>(out, q, k, v, *m, is_causal, a);
      else
        attention_rows<T, T>(out, q, k, v, *m, is_causal, a);
    }
  });
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    bool is_causal, std::optional<double> scale) try {
  const char* op = "scaled_dot_product_attention";
  const Attention a = plan_attention(op, q, k, v, attn_mask, is_causal, scale);
  Tensor out = detail::allocate(q.runtime(), a.out_shape, q.dtype(), op);
  attention_kernel(out, q, k, v, attn_mask, is_causal, a);
  detail::adopt_output(out);
  // attn_mask is not differentiable: only q, k and v decide whether to record.
  if (autograd::needs_grad(q, k, v))
    autograd::rules::scaled_dot_product_attention(out, q, k, v, attn_mask, is_causal, a.scale);
  return out;
}
FORGE_CATCH_OOM("scaled_dot_product_attention")

Tensor& scaled_dot_product_attention_into(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& attn_mask, bool is_causal, std::optional<double> scale) try {
  const char* op = "scaled_dot_product_attention_into";
  const Attention a = plan_attention(op, q, k, v, attn_mask, is_causal, scale);
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, q);
  detail::check_out_geometry(op, out, a.out_shape, q.dtype());
  detail::check_no_overlap(op, out, q, "q");
  detail::check_no_overlap(op, out, k, "k");
  detail::check_no_overlap(op, out, v, "v");
  if (attn_mask.defined()) detail::check_no_overlap(op, out, attn_mask, "attn_mask");
  attention_kernel(out, q, k, v, attn_mask, is_causal, a);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("scaled_dot_product_attention_into")

Tensor dropout(const Tensor& x, double p, bool training) try {
  const char* op = "dropout";
  check_dropout(op, x, p);
  if (!training || p == 0.0) return x;
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  const std::uint64_t seed = dropout_draw(out, x, p);
  detail::adopt_output(out);
  FORGE_RECORD(dropout, out, x, p, seed);
  return out;
}
FORGE_CATCH_OOM("dropout")

Tensor& dropout_into(Tensor& out, const Tensor& x, double p, bool training) try {
  const char* op = "dropout_into";
  check_dropout(op, x, p);
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, x);
  detail::check_out_geometry(op, out, x.shape(), x.dtype());
  detail::check_no_partial_overlap(op, out, x, "x");  // elementwise: in place is fine
  if (!training || p == 0.0) {
    cpu::copy_cast(out.runtime(), x.shape(), detail::operand(out), detail::operand(x));
  } else {
    dropout_draw(out, x, p);
  }
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("dropout_into")

namespace detail {

Tensor dropout_with_seed(const Tensor& x, double p, std::uint64_t seed) {
  Tensor out = allocate(x.runtime(), x.shape(), x.dtype(), "dropout");
  if (p >= 1.0)
    detail::fill("dropout", out, x.shape(), operand(out), 0.0);
  else
    dropout_kernel(out, x, p, seed);
  adopt_output(out);
  return out;
}

}  // namespace detail
}  // namespace forge
