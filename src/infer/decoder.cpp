// Decoder: building the pieces (decoder_parts.h) and running them. Policy in
// include/forge/infer/decoder.h.
//
// Note [Decoding with a KvCache]: a cached forward appends T positions to
// sequences [seq, seq + count) of the cache, each at its own length len_b.
// Each layer writes its new K and V rows into the cache (KvCache::write, a
// copy into a narrow view), then attends over a narrow(2, 0, S) view of the
// cache, S = max(len_b) + T. Query i of sequence b may see key j iff
// j <= len_b + i. When all lengths are equal that is attention's causal mask
// aligned bottom-right (S = len + T; for T = 1 every key is visible, so no
// mask at all); otherwise a bool mask [count, 1, 1, T, S] built on the host
// (one per forward, shared by the layers; keys of shorter sequences past
// their own length are masked there too, so rows left from before never leak
// in).
// Cached forwards run without grad: the cache holds values, not a graph.
//
// Grouped-query attention keeps K and V at n_kv_heads: q is viewed as
// [count, n_kv_heads, group, T, head_dim] and K, V as [count, n_kv_heads, 1,
// S, head_dim], so attention broadcasts each kv head over its group without
// a copy.

#include "forge/infer/decoder.h"

#include <cmath>
#include <string>

#include "forge/autograd.h"
#include "forge/infer/kv_cache.h"
#include "forge/nn/layers.h"
#include "forge/ops.h"
#include "infer/decoder_parts.h"
#include "nn/owned.h"

namespace forge::infer {

// ---- config ----

const char* norm_kind_name(NormKind kind) { return kind == NormKind::layer_norm ? "layer_norm" : "rms_norm"; }
const char* position_kind_name(PositionKind kind) { return kind == PositionKind::learned ? "learned" : "rope"; }
const char* mlp_kind_name(MlpKind kind) { return kind == MlpKind::gelu ? "gelu" : "swiglu"; }

void DecoderConfig::validate() const {
  const char* op = "DecoderConfig";
  FORGE_CHECK(vocab_size > 0, invalid_argument, op, "vocab_size must be positive, got ", vocab_size);
  FORGE_CHECK(d_model > 0, invalid_argument, op, "d_model must be positive, got ", d_model);
  FORGE_CHECK(n_layers > 0, invalid_argument, op, "n_layers must be positive, got ", n_layers);
  FORGE_CHECK(n_heads > 0, invalid_argument, op, "n_heads must be positive, got ", n_heads);
  FORGE_CHECK(d_model % n_heads == 0, invalid_argument, op, "d_model ", d_model, " is not a multiple of n_heads ",
              n_heads);
  FORGE_CHECK(n_kv_heads >= 0 && n_kv_heads <= n_heads && n_heads % kv_heads() == 0, invalid_argument, op,
              "n_kv_heads ", n_kv_heads, " must be 0 or divide n_heads ", n_heads);
  FORGE_CHECK(mlp_hidden >= 0, invalid_argument, op, "mlp_hidden must be 0 (4 * d_model) or positive, got ",
              mlp_hidden);
  FORGE_CHECK(max_seq_len > 0, invalid_argument, op, "max_seq_len must be positive, got ", max_seq_len);
  FORGE_CHECK(positions != PositionKind::rope || head_dim() % 2 == 0, invalid_argument, op,
              "RoPE needs an even head_dim, got ", head_dim());
  FORGE_CHECK(norm_eps > 0 && std::isfinite(norm_eps), invalid_argument, op, "norm_eps must be positive, got ",
              norm_eps);
  FORGE_CHECK(rope_theta > 0 && std::isfinite(rope_theta), invalid_argument, op, "rope_theta must be positive, got ",
              rope_theta);
  FORGE_CHECK(static_cast<int>(norm) <= 1 && static_cast<int>(positions) <= 1 && static_cast<int>(mlp) <= 1,
              invalid_argument, op, "norm, positions or mlp holds no known kind");
}

namespace detail {

// ---- pieces ----

Projection::Projection(Tensor weight, Tensor bias) : has_bias_(bias.defined()) {
  register_parameter("weight", weight);
  if (has_bias_) register_parameter("bias", bias);
}

Projection::Projection(PackedMatrix packed, Tensor bias) : has_bias_(bias.defined()), packed_(std::move(packed)) {
  if (has_bias_) register_parameter("bias", bias, false);
}

// Note [Few rows through infer::linear]: a decode step multiplies one row
// per sequence by each weight, where forge::linear's GEMM runs a
// matrix-vector product on one thread. Without autograd, up to 4 rows of f32
// on the host go to infer::linear's f32 kernel instead, the weight wrapped
// without a copy: it splits the weight's rows over the host threads (decode
// at batch 1 about 1.7x faster at d_model 256, docs/BENCHMARKS.md). From 8
// rows on, the GEMM is the faster of the two (measured at batch 8), so
// larger batches, prefill, training and anything else keep forge::linear.
namespace {
constexpr std::int64_t kFewRows = 4;

bool few_rows_without_grad(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (autograd::GradMode::is_enabled() &&
      (x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad())))
    return false;
  const bool host_f32 = x.device().is_cpu() && w.device().is_cpu() && x.dtype() == DType::f32 &&
                        w.dtype() == DType::f32 && (!b.defined() || b.dtype() == DType::f32);
  return host_f32 && w.dim() == 2 && x.dim() >= 1 && x.size(-1) > 0 && x.numel() / x.size(-1) <= kFewRows &&
         w.is_contiguous();
}
}  // namespace

Tensor project(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (few_rows_without_grad(x, w, b))
    return infer::linear(x, PackedMatrix::wrap(w, WeightFormat::f32, w.size(0), w.size(1)), b);
  return forge::linear(x, w, b);
}

Tensor Projection::forward(const Tensor& x) {
  if (packed_.defined()) return infer::linear(x, packed_, bias());
  return project(x, parameter("weight"), bias());
}

Norm::Norm(NormKind kind, double eps, Tensor weight, Tensor bias) : kind_(kind), eps_(eps) {
  register_parameter("weight", weight);
  if (bias.defined()) register_parameter("bias", bias);
}

Tensor Norm::forward(const Tensor& x) {
  const Shape last{x.size(-1)};
  if (kind_ == NormKind::layer_norm) return layer_norm(x, last, parameter("weight"), parameter("bias"), eps_);
  return rms_norm(x, last, parameter("weight"), eps_);
}

// ---- weights ----

WeightSource::WeightSource(ExecContext& ctx, const StateDict* weights,
                           const std::map<std::string, PackedMatrix>* packed, std::optional<WeightFormat> format)
    : ctx_(ctx), weights_(weights), packed_(packed), format_(format) {}

Tensor WeightSource::find(const std::string& name) const {
  if (weights_ != nullptr)
    if (const auto it = weights_->find(name); it != weights_->end()) return it->second;
  if (packed_ != nullptr)
    if (const auto it = packed_->find(name); it != packed_->end())
      return it->second.dequantize();  // a table quantize converted (an embedding): looked up in f32
  return Tensor();
}

Tensor WeightSource::take(const std::string& name, const Shape& shape, const std::function<Tensor()>& init) {
  const char* op = "Decoder.load";
  if (weights_ == nullptr && packed_ == nullptr) return init();
  const Tensor t = find(name);
  FORGE_CHECK(t.defined(), invalid_argument, op, "the checkpoint has no tensor '", name, "'");
  FORGE_CHECK(t.shape() == shape, shape, op, "tensor '", name, "' has shape ", t.shape(), "; the config needs ", shape);
  FORGE_CHECK(is_floating(t.dtype()), dtype, op, "tensor '", name, "' holds ", dtype_name(t.dtype()),
              "; weights must be floating");
  used_.insert(name);
  // f32 stays where it is (zero-copy over a mapping); other dtypes become the model's own f32 copy.
  return t.dtype() == DType::f32 ? t : nn::detail::owned_copy(ctx_, t, DType::f32, op);
}

std::shared_ptr<Projection> WeightSource::projection(const std::string& name, std::int64_t rows, std::int64_t cols,
                                                     bool bias) {
  Tensor b;
  if (bias) b = take(name + ".bias", Shape{rows}, [&] { return ctx_.zeros(Shape{rows}); });
  if (packed_ != nullptr) {
    if (const auto it = packed_->find(name + ".weight"); it != packed_->end()) {
      const PackedMatrix& p = it->second;
      FORGE_CHECK(p.rows() == rows && p.cols() == cols, shape, "Decoder.load", "packed tensor '", name, ".weight' is [",
                  p.rows(), ", ", p.cols(), "]; the config needs [", rows, ", ", cols, "]");
      used_.insert(name + ".weight");
      if (!format_ || *format_ == p.format()) return std::make_shared<Projection>(p, b);
      const Tensor plain = p.dequantize();  // another format asked for: through f32
      if (*format_ == WeightFormat::f32) return std::make_shared<Projection>(plain, b);
      return std::make_shared<Projection>(pack(plain), b);
    }
  }
  Tensor w = take(name + ".weight", Shape{rows, cols}, [&] {
    // nn::Linear's initialization (kaiming_uniform), its weight adopted as ours.
    nn::Linear fresh(ctx_, cols, rows, false);
    return fresh.weight();
  });
  if (!format_ || *format_ == WeightFormat::f32) return std::make_shared<Projection>(w, b);
  return std::make_shared<Projection>(pack(w), b);
}

PackedMatrix WeightSource::pack(const Tensor& w) const {
  // ggml's blocks need rows of whole 32-value blocks; a matrix without them
  // stays f32 (as forge::quantize leaves it), still read by infer::linear.
  const bool blocks = *format_ == WeightFormat::q8_0 || *format_ == WeightFormat::q4_0;
  return PackedMatrix::pack(w, blocks && w.size(1) % 32 != 0 ? WeightFormat::f32 : *format_);
}

void WeightSource::check_all_used() const {
  std::string extra;
  const auto note = [&](const std::string& name) {
    if (!used_.count(name)) extra += (extra.empty() ? "" : ", ") + name;
  };
  if (weights_ != nullptr)
    for (const auto& [name, t] : *weights_) note(name);
  if (packed_ != nullptr)
    for (const auto& [name, p] : *packed_) note(name);
  FORGE_CHECK(extra.empty(), invalid_argument, "Decoder.load",
              "the checkpoint holds tensors the config has no place for: ", extra);
}

}  // namespace detail

namespace {

using detail::Block;
using detail::DecoderParts;
using detail::Norm;
using detail::Projection;
using detail::Table;
using detail::WeightSource;

// The cos and sin of HF Llama's rotate-half RoPE: inv_freq[i] = theta^(-2i / d),
// angle(p, i) = p * inv_freq[i], both halves of a row repeating the d / 2 angles.
std::pair<Tensor, Tensor> rope_tables(ExecContext& ctx, std::int64_t max_len, std::int64_t head_dim, double theta) {
  Tensor c = nn::detail::owned_empty(ctx, Shape{max_len, head_dim}, DType::f32, "Decoder");
  Tensor s = nn::detail::owned_empty(ctx, Shape{max_len, head_dim}, DType::f32, "Decoder");
  float* cp = c.data_ptr<float>();
  float* sp = s.data_ptr<float>();
  const std::int64_t half = head_dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    for (std::int64_t p = 0; p < max_len; ++p) {
      // f32 angle first, as HF computes it in f32.
      const auto angle = static_cast<float>(static_cast<float>(p) * static_cast<float>(inv_freq));
      cp[p * head_dim + i] = cp[p * head_dim + i + half] = std::cos(angle);
      sp[p * head_dim + i] = sp[p * head_dim + i + half] = std::sin(angle);
    }
  }
  return {c, s};
}

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1) over the last dim.
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const std::int64_t half = x.size(-1) / 2;
  const Tensor rotated = cat({neg(x.narrow(-1, half, half)), x.narrow(-1, 0, half)}, -1);
  return add(mul(x, cos), mul(rotated, sin));
}

Tensor normal_init(ExecContext& ctx, const Shape& shape) {
  // GPT-2's N(0, 0.02) for the embedding tables (nn::Embedding draws N(0, 1),
  // too large for a tied head).
  Tensor t = nn::detail::owned_empty(ctx, shape, DType::f32, "Decoder");
  autograd::NoGradGuard no_grad;
  t.copy_(ctx.randn(shape).mul(0.02));
  return t;
}

// Where the T new positions of each sequence start.
struct Positions {
  std::int64_t count = 0, steps = 0;
  std::vector<std::int64_t> start;  // per sequence
  bool uniform = true;              // every sequence starts at start[0]
  std::int64_t keys = 0;            // S: max(start) + steps
};

Tensor forward_layers(ExecContext& ctx, const DecoderConfig& c, DecoderParts& parts, const Tensor& tokens,
                      KvCache* cache, std::int64_t seq, const Positions& pos, bool last_only) {
  const std::int64_t n = pos.count, T = pos.steps, D = c.d_model, H = c.n_heads, Hkv = c.kv_heads();
  const std::int64_t G = H / Hkv, hd = c.head_dim(), S = pos.keys, start0 = pos.start[0];
  Tensor index;  // [n, T] positions, only when sequences start at different lengths
  if (!pos.uniform) {
    index = ctx.empty(Shape{n, T}, DType::i64);
    auto* p = index.data_ptr<std::int64_t>();
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t t = 0; t < T; ++t) p[b * T + t] = pos.start[static_cast<std::size_t>(b)] + t;
  }
  Tensor x = embedding(parts.tok_embed->weight(), tokens);  // [n, T, D]
  if (c.positions == PositionKind::learned) {
    const Tensor& table = parts.pos_embed->weight();
    x = add(x, pos.uniform ? table.narrow(0, start0, T) : embedding(table, index));
  }
  Tensor cos, sin;  // broadcasting against [n, heads, T, hd]
  if (c.positions == PositionKind::rope) {
    if (pos.uniform) {
      cos = parts.rope_cos.narrow(0, start0, T);
      sin = parts.rope_sin.narrow(0, start0, T);
    } else {
      cos = index_select(parts.rope_cos, 0, index.flatten()).view(Shape{n, 1, T, hd});
      sin = index_select(parts.rope_sin, 0, index.flatten()).view(Shape{n, 1, T, hd});
    }
  }
  // Note [Decoding with a KvCache]: which keys each query sees.
  Tensor mask;
  bool causal = false;
  if (pos.uniform) {
    causal = T > 1;  // bottom-right aligned: query i sees keys j <= start0 + i
  } else {
    mask = ctx.empty(Shape{n, 1, 1, T, S}, DType::boolean);
    bool* m = mask.data_ptr<bool>();
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < T; ++i)
        for (std::int64_t j = 0; j < S; ++j) m[(b * T + i) * S + j] = j <= pos.start[static_cast<std::size_t>(b)] + i;
  }
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const Block& blk = parts.blocks[static_cast<std::size_t>(l)];
    Tensor h = blk.attn_norm->forward(x);
    Tensor q = blk.q->forward(h).view(Shape{n, T, H, hd}).permute({0, 2, 1, 3});
    Tensor k = blk.k->forward(h).view(Shape{n, T, Hkv, hd}).permute({0, 2, 1, 3});
    Tensor v = blk.v->forward(h).view(Shape{n, T, Hkv, hd}).permute({0, 2, 1, 3});
    if (c.positions == PositionKind::rope) {
      q = apply_rope(q, cos, sin);
      k = apply_rope(k, cos, sin);
    }
    Tensor keys = k, values = v;
    if (cache != nullptr) {
      cache->write(l, seq, k, v);
      keys = cache->keys(l, seq, n, S);
      values = cache->values(l, seq, n, S);
    }
    Tensor qg = q.reshape(Shape{n, Hkv, G, T, hd});
    if (qg.dtype() != keys.dtype()) qg = qg.to(keys.dtype());  // an f16 / bf16 cache: attend in its dtype
    Tensor a = scaled_dot_product_attention(qg, keys.unsqueeze(2), values.unsqueeze(2), mask, causal, std::nullopt,
                                            CausalAlign::bottom_right);
    a = a.to(DType::f32).permute({0, 3, 1, 2, 4}).reshape(Shape{n, T, D});
    x = add(x, blk.o->forward(a));
    h = blk.mlp_norm->forward(x);
    const Tensor hidden = c.mlp == MlpKind::swiglu ? mul(silu(blk.gate->forward(h)), blk.up->forward(h))
                                                   : gelu(blk.up->forward(h), GeluApproximation::tanh);
    x = add(x, blk.down->forward(hidden));
  }
  if (last_only) x = x.narrow(1, T - 1, 1);
  x = parts.norm->forward(x);
  Tensor logits = parts.head ? parts.head->forward(x) : detail::project(x, parts.tok_embed->weight(), Tensor());
  return last_only ? logits.select(1, 0) : logits;
}

}  // namespace

// ---- the model ----

Decoder::Decoder(ExecContext& ctx, const DecoderConfig& config)
    : Decoder(ctx, config, nullptr, nullptr, std::nullopt) {}

Decoder::~Decoder() = default;

Decoder::Decoder(ExecContext& ctx, const DecoderConfig& config, const StateDict* weights,
                 const std::map<std::string, PackedMatrix>* packed, std::optional<WeightFormat> format)
    : ctx_(&ctx), config_((config.validate(), config)), parts_(std::make_unique<DecoderParts>()), format_(format) {
  const DecoderConfig& c = config_;
  WeightSource src(ctx, weights, packed, format && *format == WeightFormat::f32 ? std::nullopt : format);
  format_ = src.format();
  const std::int64_t D = c.d_model, hd = c.head_dim(), kv = c.kv_heads() * hd, hidden = c.hidden();
  const auto table = [&](const std::string& name, std::int64_t rows) {
    const auto init = [&] { return normal_init(ctx, Shape{rows, D}); };
    auto t = std::make_shared<Table>(src.take(name + ".weight", Shape{rows, D}, init), !src.packs());
    register_module(name, t);
    return t;
  };
  parts_->tok_embed = table("tok_embed", c.vocab_size);
  if (c.positions == PositionKind::learned) parts_->pos_embed = table("pos_embed", c.max_seq_len);
  const auto norm = [&](const std::string& name) {
    Tensor w = src.take(name + ".weight", Shape{D}, [&] { return ctx.ones(Shape{D}); });
    Tensor b;
    if (c.norm == NormKind::layer_norm) b = src.take(name + ".bias", Shape{D}, [&] { return ctx.zeros(Shape{D}); });
    return std::make_shared<Norm>(c.norm, c.norm_eps, w, b);
  };
  auto layers = std::make_shared<nn::Module>();
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Block blk;
    blk.attn_norm = norm(p + "attn_norm");
    blk.q = src.projection(p + "attn.q", D, D, c.bias);
    blk.k = src.projection(p + "attn.k", kv, D, c.bias);
    blk.v = src.projection(p + "attn.v", kv, D, c.bias);
    blk.o = src.projection(p + "attn.o", D, D, c.bias);
    blk.mlp_norm = norm(p + "mlp_norm");
    if (c.mlp == MlpKind::swiglu) blk.gate = src.projection(p + "mlp.gate", hidden, D, c.bias);
    blk.up = src.projection(p + "mlp.up", hidden, D, c.bias);
    blk.down = src.projection(p + "mlp.down", D, hidden, c.bias);
    auto layer = std::make_shared<nn::Module>();
    layer->register_module("attn_norm", blk.attn_norm);
    auto attn = std::make_shared<nn::Module>();
    attn->register_module("q", blk.q);
    attn->register_module("k", blk.k);
    attn->register_module("v", blk.v);
    attn->register_module("o", blk.o);
    layer->register_module("attn", attn);
    layer->register_module("mlp_norm", blk.mlp_norm);
    auto mlp = std::make_shared<nn::Module>();
    if (blk.gate) mlp->register_module("gate", blk.gate);
    mlp->register_module("up", blk.up);
    mlp->register_module("down", blk.down);
    layer->register_module("mlp", mlp);
    layers->register_module(std::to_string(l), layer);
    parts_->blocks.push_back(std::move(blk));
  }
  register_module("layers", layers);
  parts_->norm = norm("norm");
  register_module("norm", parts_->norm);
  if (!c.tied_head) {
    parts_->head = src.projection("head", c.vocab_size, D, false);
    register_module("head", parts_->head);
  } else if (src.packs()) {
    // The tied head packed from the embedding table (which stays plain for the lookup).
    parts_->head = std::make_shared<Projection>(src.pack(parts_->tok_embed->weight()), Tensor());
  }
  if (c.positions == PositionKind::rope)
    std::tie(parts_->rope_cos, parts_->rope_sin) = rope_tables(ctx, c.max_seq_len, hd, c.rope_theta);
  if (weights != nullptr || packed != nullptr) src.check_all_used();
  // A quantized file read without a format keeps its own.
  if (const PackedMatrix& q = parts_->blocks[0].q->packed(); q.defined()) format_ = q.format();
}

std::shared_ptr<Decoder> Decoder::from_state_dict(ExecContext& ctx, const DecoderConfig& config,
                                                  const StateDict& weights) {
  return std::shared_ptr<Decoder>(new Decoder(ctx, config, &weights, nullptr, std::nullopt));
}

Tensor Decoder::forward(const Tensor& tokens) try {
  FORGE_CHECK(!format_, invalid_argument, "Decoder.forward", "a model with ", format_name(*format_),
              " weights only decodes: training needs f32 weights (load it without a format)");
  return run(tokens, nullptr, 0, 0, false);
}
FORGE_CATCH_OOM("Decoder.forward")

Tensor Decoder::forward(const Tensor& tokens, KvCache& cache) try {
  return run(tokens, &cache, 0, cache.batch(), false);
}
FORGE_CATCH_OOM("Decoder.forward")

Tensor Decoder::forward(const Tensor& tokens, KvCache& cache, std::int64_t seq) try {
  return run(tokens, &cache, seq, tokens.defined() && tokens.dim() == 2 ? tokens.size(0) : 1, false);
}
FORGE_CATCH_OOM("Decoder.forward")

Tensor Decoder::next_logits(const Tensor& tokens, KvCache& cache, std::int64_t seq) try {
  return run(tokens, &cache, seq, tokens.defined() && tokens.dim() == 2 ? tokens.size(0) : 1, true);
}
FORGE_CATCH_OOM("Decoder.next_logits")

Tensor Decoder::run(const Tensor& tokens, KvCache* cache, std::int64_t seq, std::int64_t count, bool last_only) {
  const char* op = "Decoder.forward";
  const DecoderConfig& c = config_;
  FORGE_CHECK(tokens.defined() && tokens.dim() == 2, shape, op, "tokens must be [batch, T], got ",
              tokens.defined() ? tokens.shape() : Shape{});
  FORGE_CHECK(tokens.dtype() == DType::i64 || tokens.dtype() == DType::i32, dtype, op,
              "tokens must be i64 or i32, not ", dtype_name(tokens.dtype()));
  FORGE_CHECK(&tokens.runtime() == &ctx_->runtime(), device, op, "tokens belong to another context than the model");
  const std::int64_t T = tokens.size(1);
  FORGE_CHECK(T > 0, invalid_argument, op, "tokens hold no positions");
  Positions pos;
  pos.steps = T;
  std::optional<autograd::NoGradGuard> no_grad;
  if (cache != nullptr) {
    FORGE_CHECK(tokens.size(0) == count, shape, op, "tokens of shape ", tokens.shape(), " for ", count,
                " sequences of the cache");
    FORGE_CHECK(
        cache->n_layers() == c.n_layers && cache->n_kv_heads() == c.kv_heads() && cache->head_dim() == c.head_dim(),
        invalid_argument, op, "the cache (", cache->n_layers(), " layers, ", cache->n_kv_heads(), " kv heads of ",
        cache->head_dim(), ") was not made for this model");
    cache->check_room(seq, count, T);  // before anything is written
    pos.count = count;
    for (std::int64_t b = 0; b < count; ++b) pos.start.push_back(cache->lengths()[static_cast<std::size_t>(seq + b)]);
    no_grad.emplace();
  } else {
    pos.count = tokens.size(0);
    pos.start.assign(static_cast<std::size_t>(pos.count), 0);
  }
  for (const std::int64_t s : pos.start) {
    pos.uniform = pos.uniform && s == pos.start[0];
    pos.keys = std::max(pos.keys, s + T);
  }
  FORGE_CHECK(pos.keys <= c.max_seq_len, invalid_argument, op, "positions up to ", pos.keys,
              " exceed the model's max_seq_len ", c.max_seq_len);
  Tensor logits = forward_layers(*ctx_, c, *parts_, tokens, cache, seq, pos, last_only);
  if (cache != nullptr) cache->advance(seq, count, T);  // every layer written: the positions are in
  return logits;
}

}  // namespace forge::infer
