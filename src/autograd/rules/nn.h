#pragma once
// Derivative rules of the neural-network ops (forge/ops/nn.h): normalizations,
// indexing, masks and padding, dropout (rules/nn.cpp), the losses
// (rules/loss.cpp) and attention (rules/attention.cpp).

#include <cstdint>

#include "forge/ops/nn.h"
#include "forge/tensor.h"

namespace forge::autograd::rules {

void softmax(const Tensor& out, const Tensor& x, std::int64_t dim);
void log_softmax(const Tensor& out, const Tensor& x, std::int64_t dim);
void layer_norm(const Tensor& out, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                const Tensor& bias, double eps);
// eps: the value the op used (its dtype's default resolved).
void rms_norm(const Tensor& out, const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps);

// padding_row: the row that gets no gradient, or -1.
void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices, std::int64_t padding_row);
void index_select(const Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index);
void gather(const Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index);
void scatter_add(const Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src);

void triu(const Tensor& out, const Tensor& x, std::int64_t diagonal);
void tril(const Tensor& out, const Tensor& x, std::int64_t diagonal);
void pad(const Tensor& out, const Tensor& x, const Dims& pad, PadMode mode);

// seed: the one the forward drew; the backward replays its mask.
void dropout(const Tensor& out, const Tensor& x, double p, std::uint64_t seed);

void cross_entropy(const Tensor& out, const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options);
void nll_loss(const Tensor& out, const Tensor& log_probs, const Tensor& target, Reduction reduction,
              std::int64_t ignore_index);
void mse_loss(const Tensor& out, const Tensor& a, const Tensor& b, Reduction reduction);

// scale: the value the op used (1 / sqrt(E) resolved). attn_mask is not differentiable.
void scaled_dot_product_attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& attn_mask, bool is_causal, std::int64_t causal_offset, double scale);

}  // namespace forge::autograd::rules
