#pragma once
// Multi-head attention and the pre-norm transformer block built on it.
//
// Inputs are batch-first: [B, L, E] (or [L, E] without a batch). Heads split
// E into num_heads slices of E / num_heads, attended with
// forge::scaled_dot_product_attention.

#include <cstdint>
#include <memory>

#include "forge/exec_context.h"
#include "forge/nn/layers.h"
#include "forge/nn/module.h"
#include "forge/nn/sequential.h"

namespace forge::nn {

struct MultiheadAttentionOptions {
  bool bias = true;     // on the four projections
  bool causal = false;  // position i attends to positions j <= i only
};

// Children q_proj, k_proj, v_proj, out_proj (Linear E -> E). The input
// projections are xavier_uniform with zero bias, out_proj as Linear with zero
// bias (libtorch's MultiheadAttention).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(ExecContext& ctx, std::int64_t embed_dim, std::int64_t num_heads,
                     MultiheadAttentionOptions options = {});
  // Self-attention.
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  // query [B, L, E], key and value [B, S, E]; attn_mask (bool: true keeps, or
  // float: added) broadcasts to [B, num_heads, L, S].
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = Tensor());
  const char* type_name() const override { return "MultiheadAttention"; }

  std::int64_t embed_dim() const noexcept { return embed_dim_; }
  std::int64_t num_heads() const noexcept { return num_heads_; }
  bool causal() const noexcept { return options_.causal; }
  const std::shared_ptr<Linear>& q_proj() const noexcept { return q_proj_; }
  const std::shared_ptr<Linear>& k_proj() const noexcept { return k_proj_; }
  const std::shared_ptr<Linear>& v_proj() const noexcept { return v_proj_; }
  const std::shared_ptr<Linear>& out_proj() const noexcept { return out_proj_; }

 private:
  std::int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
  std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, out_proj_;
};

struct TransformerBlockOptions {
  std::int64_t mlp_hidden = 0;  // 0: 4 * dim
  bool causal = false;
  double eps = 1e-5;     // of both LayerNorms
  double dropout = 0.0;  // on the attention and MLP outputs, while training
};

// Pre-norm: x + attn(ln1(x)), then x + mlp(ln2(x)) with mlp = Linear, GELU,
// Linear. Children ln1, attn, ln2, mlp ("mlp.0.weight", "mlp.2.weight"), drop.
class TransformerBlock : public Module {
 public:
  TransformerBlock(ExecContext& ctx, std::int64_t dim, std::int64_t num_heads, TransformerBlockOptions options = {});
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& attn_mask);
  const char* type_name() const override { return "TransformerBlock"; }

  const std::shared_ptr<LayerNorm>& ln1() const noexcept { return ln1_; }
  const std::shared_ptr<MultiheadAttention>& attn() const noexcept { return attn_; }
  const std::shared_ptr<LayerNorm>& ln2() const noexcept { return ln2_; }
  const std::shared_ptr<Sequential>& mlp() const noexcept { return mlp_; }

 private:
  std::shared_ptr<LayerNorm> ln1_;
  std::shared_ptr<MultiheadAttention> attn_;
  std::shared_ptr<LayerNorm> ln2_;
  std::shared_ptr<Sequential> mlp_;
  std::shared_ptr<Dropout> drop_;
};

}  // namespace forge::nn
