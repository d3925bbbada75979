#include "forge/nn/attention.h"

#include "forge/nn/init.h"

namespace forge::nn {

MultiheadAttention::MultiheadAttention(ExecContext& ctx, std::int64_t embed_dim, std::int64_t num_heads,
                                       MultiheadAttentionOptions options) try
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  FORGE_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, invalid_argument, "nn.MultiheadAttention",
              "embed_dim ", embed_dim, " must be a positive multiple of num_heads ", num_heads);
  q_proj_ = register_module("q_proj", std::make_shared<Linear>(ctx, embed_dim, embed_dim, options.bias));
  k_proj_ = register_module("k_proj", std::make_shared<Linear>(ctx, embed_dim, embed_dim, options.bias));
  v_proj_ = register_module("v_proj", std::make_shared<Linear>(ctx, embed_dim, embed_dim, options.bias));
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(ctx, embed_dim, embed_dim, options.bias));
  for (const auto& in : {q_proj_, k_proj_, v_proj_}) init::xavier_uniform_(in->weight());
  if (options.bias)
    for (const auto& p : {q_proj_, k_proj_, v_proj_, out_proj_}) init::zeros_(p->bias());
}
FORGE_CATCH_OOM("nn.MultiheadAttention")

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& attn_mask) try {
  const char* op = "nn.MultiheadAttention";
  FORGE_CHECK(query.defined() && key.defined() && value.defined(), invalid_argument, op, "undefined input");
  const int rank = query.dim();
  FORGE_CHECK((rank == 2 || rank == 3) && key.dim() == rank && value.dim() == rank, shape, op,
              "query, key and value must all be [B, L, E] or all [L, E], got ", query.shape(), ", ", key.shape(), ", ",
              value.shape());
  FORGE_CHECK(query.size(-1) == embed_dim_ && key.size(-1) == embed_dim_ && value.size(-1) == embed_dim_, shape, op,
              "the last dim must be embed_dim ", embed_dim_, ", got ", query.shape(), ", ", key.shape(), ", ",
              value.shape());
  FORGE_CHECK(
      key.size(-2) == value.size(-2) && (rank == 2 || (key.size(0) == query.size(0) && value.size(0) == query.size(0))),
      shape, op, "key ", key.shape(), " and value ", value.shape(), " must match query ", query.shape(),
      " in batch and each other in length");
  const bool batched = rank == 3;
  const std::int64_t head_dim = embed_dim_ / num_heads_;
  // [B, L, E] -> [B, H, L, D]: a view of the projection.
  const auto split_heads = [&](const Tensor& t) {
    return t.view({t.size(0), t.size(1), num_heads_, head_dim}).transpose(1, 2);
  };
  const auto batch = [&](const Tensor& t) { return batched ? t : t.unsqueeze(0); };
  const Tensor q = split_heads(q_proj_->forward(batch(query)));
  const Tensor k = split_heads(k_proj_->forward(batch(key)));
  const Tensor v = split_heads(v_proj_->forward(batch(value)));
  const Tensor heads = scaled_dot_product_attention(q, k, v, attn_mask, options_.causal);
  const std::int64_t b = q.size(0), l = q.size(2);
  const Tensor merged = heads.transpose(1, 2).reshape({b, l, embed_dim_});
  const Tensor out = out_proj_->forward(merged);
  return batched ? out : out.squeeze(0);
}
FORGE_CATCH_OOM("nn.MultiheadAttention")

TransformerBlock::TransformerBlock(ExecContext& ctx, std::int64_t dim, std::int64_t num_heads,
                                   TransformerBlockOptions options) try {
  const char* op = "nn.TransformerBlock";
  FORGE_CHECK(options.mlp_hidden >= 0, invalid_argument, op, "mlp_hidden ", options.mlp_hidden, " is negative");
  const std::int64_t hidden = options.mlp_hidden > 0 ? options.mlp_hidden : 4 * dim;
  ln1_ = register_module("ln1", std::make_shared<LayerNorm>(ctx, dim, options.eps));
  attn_ = register_module("attn", std::make_shared<MultiheadAttention>(
                                      ctx, dim, num_heads, MultiheadAttentionOptions{.causal = options.causal}));
  ln2_ = register_module("ln2", std::make_shared<LayerNorm>(ctx, dim, options.eps));
  mlp_ = register_module("mlp", std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
                                    std::make_shared<Linear>(ctx, dim, hidden), std::make_shared<GELU>(),
                                    std::make_shared<Linear>(ctx, hidden, dim)}));
  drop_ = register_module("drop", std::make_shared<Dropout>(options.dropout));
}
FORGE_CATCH_OOM("nn.TransformerBlock")

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& attn_mask) try {
  const Tensor y = ln1_->forward(x);
  const Tensor h = x + drop_->forward(attn_->forward(y, y, y, attn_mask));
  return h + drop_->forward(mlp_->forward(ln2_->forward(h)));
}
FORGE_CATCH_OOM("nn.TransformerBlock")

}  // namespace forge::nn
