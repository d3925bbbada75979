// The VJP of scaled_dot_product_attention, composed from public ops: the
// forward never stores the [L, S] probabilities, so the VJP recomputes them
// from the saved q, k and mask, then
//   dv = P^T g,  dP = g v^T,  dS = P * (dP - sum(dP * P)),
//   dq = dS k * scale,  dk = dS^T q * scale.
// Batch dims an operand broadcast over are summed by Vjp::set. The mask is
// not differentiable.

#include <limits>

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "autograd/rules/nn.h"
#include "forge/ops.h"

namespace forge::autograd::rules {
namespace {

Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }

// softmax(q k^T * scale + mask) as the forward computes it.
Tensor attention_probs(const Tensor& q, const Tensor& k, const Tensor& mask, bool is_causal, std::int64_t causal_offset,
                       double scale) {
  Tensor s = mul(matmul(q, mT(k)), scale);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    Tensor keep = zeros_like_shape(q, Shape{s.shape()[s.dim() - 2], s.shape().back()}, DType::boolean);
    keep.fill_(1.0);
    s = where(tril(keep, causal_offset), s, neg_inf);
  } else if (mask.defined()) {
    s = mask.dtype() == DType::boolean ? where(mask, s, neg_inf) : add(s, mask.to(s.dtype()));
  }
  return softmax(s, -1);
}

}  // namespace

void scaled_dot_product_attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& attn_mask, bool is_causal, std::int64_t causal_offset, double scale) {
  record(out, "scaled_dot_product_attention", inputs(q, k, v), saves(q, k, v, attn_mask),
         [is_causal, causal_offset, scale](Vjp& vj) {
           const Tensor &q = vj.saved(0), &k = vj.saved(1), &v = vj.saved(2), &g = vj.grad();
           const Tensor p = attention_probs(q, k, vj.saved(3), is_causal, causal_offset, scale);
           if (vj.needs(2)) vj.set(2, matmul(mT(p), g));
           if (!vj.needs(0) && !vj.needs(1)) return;
           const Tensor dp = matmul(g, mT(v));
           const Tensor ds = mul(mul(p, sub(dp, sum(mul(dp, p), {-1}, true))), scale);
           if (vj.needs(0)) vj.set(0, matmul(ds, k));
           if (vj.needs(1)) vj.set(1, matmul(mT(ds), q));
         });
}

}  // namespace forge::autograd::rules
