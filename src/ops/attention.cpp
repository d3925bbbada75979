// dropout and scaled_dot_product_attention.
//
// dropout draws one 64-bit seed from the context's generator per call and
// decides element i (its logical, row-major position) by a counter-based hash
// of (seed, i) (the linalg family's dropout entry): the mask does not depend
// on the thread count or the layout, and a manual_seed replays it. Dropped
// elements are written as 0. Under autograd the seed is all the backward
// keeps: it replays the same mask on the gradient (detail::dropout_with_seed),
// so no mask tensor is stored.
//
// scaled_dot_product_attention never stores the [L, S] scores: the linalg
// family's attention entry computes each row's softmax and weighted sum of
// the values in scratch. Batch dims of q, k, v and the mask broadcast. A row
// whose keys are all masked has no softmax and comes out NaN, and no keys at
// all (S = 0) give zeros (an empty weighted sum), as in libtorch.

#include <cmath>
#include <optional>

#include "autograd/record.h"
#include "autograd/rules/nn.h"
#include "forge/amp.h"
#include "forge/ops.h"
#include "ops/attention_internal.h"
#include "ops/nn_internal.h"

namespace forge {
namespace {

void check_dropout(const char* op, const Tensor& x, double p) {
  detail::check_input(op, x, "x");
  detail::check_floating(op, x, "x");
  FORGE_CHECK(p >= 0.0 && p <= 1.0, invalid_argument, op, "p must be in [0, 1], got ", p);
}

// out = x with the mask of `seed` applied: kept elements scaled by 1 / (1 - p).
void apply_dropout(const char* op, Tensor& out, const Tensor& x, double p, std::uint64_t seed) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  dev.kernels().linalg.dropout.get(op, x.dtype(), dev)(dev, x.shape(), detail::operand(out), detail::operand(x), p,
                                                       seed);
}

// Draws the call's seed (none when p >= 1: everything is dropped) and applies
// its mask; returns the seed for the backward to replay.
std::uint64_t dropout_draw(const char* op, Tensor& out, const Tensor& x, double p) {
  if (p >= 1.0) {
    detail::fill(op, out, out.shape(), detail::operand(out), 0.0);
    return 0;
  }
  const std::uint64_t seed = (*out.runtime().generator().lease("dropout"))();
  apply_dropout(op, out, x, p, seed);
  return seed;
}

struct Attention {
  Shape batch;  // broadcast batch dims
  Shape out_shape;
  std::int64_t L, S, E, Ev;
  std::int64_t causal_offset;  // is_causal masks key j > i + causal_offset
  double scale;
};

Shape batch_of(const Tensor& t, int trailing) {
  Shape b;
  for (int d = 0; d < t.dim() - trailing; ++d) b.push_back(t.shape()[d]);
  return b;
}

Attention plan_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         bool is_causal, std::optional<double> scale, CausalAlign align) {
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
  FORGE_CHECK(align == CausalAlign::top_left || align == CausalAlign::bottom_right, invalid_argument, op,
              "align must be top_left or bottom_right, got ", static_cast<int>(align));
  a.causal_offset = is_causal && align == CausalAlign::bottom_right ? a.S - a.L : 0;
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

// A matrix operand of t (rank >= 2) over the batch dims.
backend::MatrixOperand matrix_operand(const Tensor& t, const Shape& batch) {
  return {detail::first_element(t), batch_strides(t, batch, 2), t.strides()[t.dim() - 2], t.strides()[t.dim() - 1]};
}

void run_attention(const char* op, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   bool is_causal, const Attention& a) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto kernel = dev.kernels().linalg.attention.get(op, q.dtype(), dev);
  if (out.numel() == 0) return;
  backend::AttentionProblem p;
  p.dtype = q.dtype();
  p.batch = a.batch;
  p.L = a.L;
  p.S = a.S;
  p.E = a.E;
  p.Ev = a.Ev;
  p.scale = a.scale;
  p.is_causal = is_causal;
  p.causal_offset = a.causal_offset;
  p.q = matrix_operand(q, a.batch);
  p.k = matrix_operand(k, a.batch);
  p.v = matrix_operand(v, a.batch);
  p.out = matrix_operand(out, a.batch);
  // A float mask in another dtype than q is read in q's dtype.
  Tensor cast_mask;
  if (mask.defined()) {
    const bool cast = mask.dtype() != DType::boolean && mask.dtype() != q.dtype();
    if (cast) cast_mask = detail::cast_temporary(mask, q.dtype(), op);
    const Tensor& m = cast ? cast_mask : mask;
    Shape scores = a.batch;  // the mask as a [batch..., L, S] operand
    scores.push_back(a.L);
    scores.push_back(a.S);
    const backend::Operand mo = detail::operand_broadcast(m, scores);
    const int br = a.batch.rank();
    p.mask.data = mo.data;
    for (int d = 0; d < br; ++d) p.mask.batch_strides.push_back(mo.strides[d]);
    p.mask.rs = mo.strides[br];
    p.mask.cs = mo.strides[br + 1];
    p.mask_dtype = m.dtype();
  }
  kernel(dev, p);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    bool is_causal, std::optional<double> scale, CausalAlign align) try {
  if (amp::detail::autocasts(q, k, v, attn_mask)) [[unlikely]] {
    return scaled_dot_product_attention(amp::detail::autocast(q), amp::detail::autocast(k), amp::detail::autocast(v),
                                        amp::detail::autocast(attn_mask), is_causal, scale, align);
  }
  const char* op = "scaled_dot_product_attention";
  const Attention a = plan_attention(op, q, k, v, attn_mask, is_causal, scale, align);
  Tensor out = detail::allocate(q.runtime(), a.out_shape, q.dtype(), op);
  run_attention(op, out, q, k, v, attn_mask, is_causal, a);
  detail::adopt_output(out);
  // attn_mask is not differentiable: only q, k and v decide whether to record.
  if (autograd::needs_grad(q, k, v))
    autograd::rules::scaled_dot_product_attention(out, q, k, v, attn_mask, is_causal, a.causal_offset, a.scale);
  return out;
}
FORGE_CATCH_OOM("scaled_dot_product_attention")

Tensor& scaled_dot_product_attention_into(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& attn_mask, bool is_causal, std::optional<double> scale,
                                          CausalAlign align) try {
  const char* op = "scaled_dot_product_attention_into";
  const Attention a = plan_attention(op, q, k, v, attn_mask, is_causal, scale, align);
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, q);
  detail::check_out_geometry(op, out, a.out_shape, q.dtype());
  detail::check_no_overlap(op, out, q, "q");
  detail::check_no_overlap(op, out, k, "k");
  detail::check_no_overlap(op, out, v, "v");
  if (attn_mask.defined()) detail::check_no_overlap(op, out, attn_mask, "attn_mask");
  run_attention(op, out, q, k, v, attn_mask, is_causal, a);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("scaled_dot_product_attention_into")

Tensor dropout(const Tensor& x, double p, bool training) try {
  const char* op = "dropout";
  check_dropout(op, x, p);
  if (!training || p == 0.0) return x;
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  const std::uint64_t seed = dropout_draw(op, out, x, p);
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
    detail::copy_cast(op, out, x.shape(), detail::operand(out), detail::operand(x));
  } else {
    dropout_draw(op, out, x, p);
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
    apply_dropout("dropout", out, x, p, seed);
  adopt_output(out);
  return out;
}

}  // namespace detail
}  // namespace forge
