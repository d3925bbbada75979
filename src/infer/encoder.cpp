// SentenceEncoder (policy in include/forge/infer/encoder.h): loading a
// sentence-transformers directory, the BERT forward pass from forge ops, and
// the pooled embeddings written into the caller's arena.
//
// The pass keeps no tensor longer than the next op needs it, so the pool hands
// each layer's transients back to the next layer: a steady loop of embed()
// calls of one batch shape takes no new memory from the system.

#include "forge/infer/encoder.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/io/safetensors.h"
#include "forge/ops.h"

namespace forge::infer {
namespace {

using json = nlohmann::json;

constexpr const char* kLoad = "encoder.load";
constexpr const char* kEmbed = "encoder.embed";

// A JSON file's object (or list); ErrorCode::io when it cannot be read or holds something else.
json read_json(const std::filesystem::path& path, json::value_t kind = json::value_t::object) {
  std::ifstream in(path, std::ios::binary);
  FORGE_CHECK(in.good(), io, kLoad, "cannot open ", path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    FORGE_FAIL(io, kLoad, path.string(), " is not valid JSON: ", e.what());
  }
  FORGE_CHECK(j.type() == kind, io, kLoad, path.string(), " does not hold a JSON ",
              kind == json::value_t::object ? "object" : "list");
  return j;
}

std::optional<json> read_json_if_present(const std::filesystem::path& path,
                                         json::value_t kind = json::value_t::object) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return read_json(path, kind);
}

// j[key] as an integer in [1, 2^31), or `fallback` when absent and one is given.
std::int64_t size_field(const json& j, const std::filesystem::path& path, const char* key,
                        std::optional<std::int64_t> fallback = std::nullopt) {
  const auto it = j.find(key);
  if (it == j.end() && fallback) return *fallback;
  FORGE_CHECK(it != j.end(), io, kLoad, path.string(), " lacks \"", key, "\"");
  FORGE_CHECK(it->is_number_integer(), io, kLoad, path.string(), ": \"", key, "\" must be an integer, got ",
              it->dump());
  const auto v = it->get<std::int64_t>();
  FORGE_CHECK(v >= 1 && v < (std::int64_t{1} << 31), io, kLoad, path.string(), ": \"", key, "\" is ", v,
              ", outside [1, 2^31)");
  return v;
}

template <typename T>
std::optional<T> optional_field(const json& j, const std::filesystem::path& path, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    FORGE_FAIL(io, kLoad, path.string(), ": \"", key, "\" has the wrong type: ", it->dump());
  }
}

WordPieceOptions tokenizer_options(const std::filesystem::path& dir, const EncoderConfig& config) {
  WordPieceOptions o;
  o.max_length = config.max_position_embeddings;
  const std::filesystem::path tc = dir / "tokenizer_config.json";
  if (const auto j = read_json_if_present(tc)) {
    if (auto v = optional_field<bool>(*j, tc, "do_lower_case")) o.lowercase = *v;
    o.strip_accents = optional_field<bool>(*j, tc, "strip_accents").value_or(o.lowercase);
    if (auto v = optional_field<bool>(*j, tc, "tokenize_chinese_chars")) o.split_cjk = *v;
    for (auto [key, token] : {std::pair{"unk_token", &o.unk_token}, std::pair{"cls_token", &o.cls_token},
                              std::pair{"sep_token", &o.sep_token}, std::pair{"pad_token", &o.pad_token}})
      if (auto v = optional_field<std::string>(*j, tc, key)) *token = *v;
    // model_max_length is often a huge placeholder; it only ever lowers the cap.
    if (auto v = optional_field<double>(*j, tc, "model_max_length"); v && *v >= 2 && *v < o.max_length)
      o.max_length = static_cast<std::int64_t>(*v);
  }
  const std::filesystem::path sc = dir / "sentence_bert_config.json";
  if (const auto j = read_json_if_present(sc)) {
    if (j->contains("max_seq_length")) {
      const std::int64_t v = size_field(*j, sc, "max_seq_length");
      FORGE_CHECK(v >= 2 && v <= config.max_position_embeddings, io, kLoad, sc.string(), ": max_seq_length ", v,
                  " must be in [2, max_position_embeddings ", config.max_position_embeddings, "]");
      o.max_length = v;
    }
  }
  return o;
}

void read_pooling(const std::filesystem::path& dir, EncoderConfig& config) {
  const std::filesystem::path pc = dir / "1_Pooling" / "config.json";
  if (const auto j = read_json_if_present(pc)) {
    const bool mean = optional_field<bool>(*j, pc, "pooling_mode_mean_tokens").value_or(false);
    const bool cls = optional_field<bool>(*j, pc, "pooling_mode_cls_token").value_or(false);
    for (const char* other : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                              "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
      FORGE_CHECK(!optional_field<bool>(*j, pc, other).value_or(false), not_implemented, kLoad, pc.string(), ": ",
                  other, " is not supported (mean or CLS pooling only)");
    FORGE_CHECK(mean != cls, not_implemented, kLoad, pc.string(), ": exactly one of mean and CLS pooling is supported");
    config.pooling = mean ? Pooling::mean : Pooling::cls;
  }
  const std::filesystem::path mc = dir / "modules.json";
  if (const auto j = read_json_if_present(mc, json::value_t::array)) {
    config.normalize = false;
    for (const json& m : *j)  // a list of {"type": "sentence_transformers.models.X", ...}
      if (m.is_object() && m.value("type", "").ends_with(".Normalize")) config.normalize = true;
  }
}

}  // namespace

// ---- config ----

EncoderConfig EncoderConfig::from_json(const std::filesystem::path& path) {
  const json j = read_json(path);
  if (auto type = optional_field<std::string>(j, path, "model_type"))
    FORGE_CHECK(*type == "bert", not_implemented, kLoad, path.string(), ": model_type \"", *type,
                "\" is not supported (bert only)");
  if (auto pos = optional_field<std::string>(j, path, "position_embedding_type"))
    FORGE_CHECK(*pos == "absolute", not_implemented, kLoad, path.string(), ": position_embedding_type \"", *pos,
                "\" is not supported (absolute only)");
  EncoderConfig c;
  c.vocab_size = size_field(j, path, "vocab_size");
  c.hidden_size = size_field(j, path, "hidden_size");
  c.num_layers = size_field(j, path, "num_hidden_layers");
  c.num_heads = size_field(j, path, "num_attention_heads");
  c.intermediate_size = size_field(j, path, "intermediate_size");
  c.max_position_embeddings = size_field(j, path, "max_position_embeddings");
  c.type_vocab_size = size_field(j, path, "type_vocab_size", 2);
  c.layer_norm_eps = optional_field<double>(j, path, "layer_norm_eps").value_or(1e-12);
  FORGE_CHECK(c.layer_norm_eps > 0 && c.layer_norm_eps < 1, io, kLoad, path.string(), ": layer_norm_eps ",
              c.layer_norm_eps, " is outside (0, 1)");
  const std::string act = optional_field<std::string>(j, path, "hidden_act").value_or("gelu");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    c.activation = GeluApproximation::tanh;
  else
    FORGE_CHECK(act == "gelu", not_implemented, kLoad, path.string(), ": hidden_act \"", act,
                "\" is not supported (gelu, gelu_new)");
  FORGE_CHECK(c.hidden_size % c.num_heads == 0, io, kLoad, path.string(), ": hidden_size ", c.hidden_size,
              " is not a multiple of num_attention_heads ", c.num_heads);
  return c;
}

void EncoderConfig::validate(const char* op) const {
  for (auto [name, v] :
       {std::pair{"vocab_size", vocab_size}, std::pair{"hidden_size", hidden_size}, std::pair{"num_layers", num_layers},
        std::pair{"num_heads", num_heads}, std::pair{"intermediate_size", intermediate_size},
        std::pair{"max_position_embeddings", max_position_embeddings}, std::pair{"type_vocab_size", type_vocab_size}})
    FORGE_CHECK(v >= 1, invalid_argument, op, "config ", name, " must be positive, got ", v);
  FORGE_CHECK(hidden_size % num_heads == 0, invalid_argument, op, "config hidden_size ", hidden_size,
              " is not a multiple of num_heads ", num_heads);
  FORGE_CHECK(layer_norm_eps > 0, invalid_argument, op, "config layer_norm_eps must be positive, got ", layer_norm_eps);
}

// ---- loading ----

SentenceEncoder SentenceEncoder::load(ExecContext& ctx, const std::filesystem::path& dir) {
  EncoderConfig config = EncoderConfig::from_json(dir / "config.json");
  read_pooling(dir, config);
  WordPieceTokenizer tokenizer = WordPieceTokenizer::from_file(dir / "vocab.txt", tokenizer_options(dir, config));
  const StateDict weights = io::load_safetensors(ctx, dir / "model.safetensors");
  return SentenceEncoder(config, weights, std::move(tokenizer));
}

Tensor SentenceEncoder::take(const char* op, const StateDict& weights, const std::string& prefix,
                             const std::string& name, const Shape& shape) {
  const auto it = weights.find(prefix + name);
  FORGE_CHECK(it != weights.end(), io, op, "the checkpoint lacks tensor '", prefix + name, "'");
  const Tensor& t = it->second;
  FORGE_CHECK(t.defined(), invalid_argument, op, "tensor '", it->first, "' is undefined");
  FORGE_CHECK(t.shape() == shape, shape, op, "tensor '", it->first, "' has shape ", t.shape(),
              " but the config makes it ", shape);
  FORGE_CHECK(is_floating(t.dtype()), dtype, op, "tensor '", it->first, "' is ", dtype_name(t.dtype()),
              ", not floating");
  FORGE_CHECK(t.device().is_cpu(), device, op, "tensor '", it->first, "' lives on ", t.device().str(),
              "; the encoder runs on the host");
  FORGE_CHECK(word_.defined() ? &t.runtime() == &word_.runtime() : t.runtime().device().is_cpu(), device, op,
              "tensor '", it->first, "' belongs to another context than the others, or to a device context");
  const std::size_t bytes = static_cast<std::size_t>(t.numel()) * sizeof(float);
  weight_bytes_ += bytes;
  if (t.dtype() == DType::f32 && t.is_contiguous()) return t.detach();  // the mapping, in place
  Tensor owned = detail::allocate_owned(t.runtime(), shape, DType::f32, op);
  owned.copy_(t.detach());
  owned_weight_bytes_ += bytes;
  return owned;
}

SentenceEncoder::Affine SentenceEncoder::take_affine(const char* op, const StateDict& weights,
                                                     const std::string& prefix, const std::string& name,
                                                     const Shape& weight_shape) {
  return {take(op, weights, prefix, name + ".weight", weight_shape),
          take(op, weights, prefix, name + ".bias", Shape{weight_shape[0]})};
}

SentenceEncoder::SentenceEncoder(EncoderConfig config, const StateDict& weights, WordPieceTokenizer tokenizer)
    : config_(config), tokenizer_(std::move(tokenizer)) {
  const char* op = kLoad;
  config_.validate(op);
  FORGE_CHECK(tokenizer_.vocab_size() == config_.vocab_size, shape, op, "the vocabulary has ", tokenizer_.vocab_size(),
              " tokens but the config's vocab_size is ", config_.vocab_size);
  FORGE_CHECK(tokenizer_.options().max_length <= config_.max_position_embeddings, invalid_argument, op,
              "the tokenizer's max_length ", tokenizer_.options().max_length, " exceeds max_position_embeddings ",
              config_.max_position_embeddings);
  const std::string prefix = weights.count("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  const std::int64_t h = config_.hidden_size, f = config_.intermediate_size;
  word_ = take(op, weights, prefix, "embeddings.word_embeddings.weight", Shape{config_.vocab_size, h});
  position_ =
      take(op, weights, prefix, "embeddings.position_embeddings.weight", Shape{config_.max_position_embeddings, h});
  token_type_ = take(op, weights, prefix, "embeddings.token_type_embeddings.weight", Shape{config_.type_vocab_size, h});
  embedding_norm_ = take_affine(op, weights, prefix, "embeddings.LayerNorm", Shape{h});
  for (std::int64_t i = 0; i < config_.num_layers; ++i) {
    const std::string p = prefix + "encoder.layer." + std::to_string(i) + ".";
    const auto affine = [&](const char* name, const Shape& shape) { return take_affine(op, weights, p, name, shape); };
    Layer l;
    l.query = affine("attention.self.query", Shape{h, h});
    l.key = affine("attention.self.key", Shape{h, h});
    l.value = affine("attention.self.value", Shape{h, h});
    l.attention_out = affine("attention.output.dense", Shape{h, h});
    l.attention_norm = affine("attention.output.LayerNorm", Shape{h});
    l.intermediate = affine("intermediate.dense", Shape{f, h});
    l.out = affine("output.dense", Shape{h, f});
    l.out_norm = affine("output.LayerNorm", Shape{h});
    layers_.push_back(std::move(l));
  }
  // A checkpoint with more layers than the config says is a config that disagrees with it.
  FORGE_CHECK(!weights.count(prefix + "encoder.layer." + std::to_string(config_.num_layers) + ".output.dense.weight"),
              shape, op, "the checkpoint holds more layers than num_hidden_layers ", config_.num_layers);
}

// ---- forward ----

Tensor SentenceEncoder::layer_forward(const Layer& l, const Tensor& x, const Tensor& key_mask) const {
  const std::int64_t b = x.size(0), t = x.size(1), h = config_.hidden_size, heads = config_.num_heads;
  const Shape split{b, t, heads, h / heads};
  // [B, T, H] -> [B, heads, T, head_dim] views: attention reads them through their strides.
  const auto project = [&](const Affine& a) { return linear(x, a.weight, a.bias).view(split).transpose(1, 2); };
  Tensor context = detail::allocate(x.runtime(), Shape{b, t, h}, DType::f32, "encoder.forward");
  {
    Tensor heads_view = context.view(split).transpose(1, 2);
    scaled_dot_product_attention_into(heads_view, project(l.query), project(l.key), project(l.value), key_mask);
  }
  Tensor y = linear(context, l.attention_out.weight, l.attention_out.bias);
  context = Tensor();
  add_into(y, y, x);
  y = layer_norm(y, Shape{h}, l.attention_norm.weight, l.attention_norm.bias, config_.layer_norm_eps);
  Tensor inner = linear(y, l.intermediate.weight, l.intermediate.bias);
  gelu_into(inner, inner, config_.activation);
  Tensor out = linear(inner, l.out.weight, l.out.bias);
  inner = Tensor();
  add_into(out, out, y);
  return layer_norm(out, Shape{h}, l.out_norm.weight, l.out_norm.bias, config_.layer_norm_eps);
}

Tensor SentenceEncoder::forward(const Tensor& ids, const Tensor& attention_mask) const {
  const char* op = "encoder.forward";
  detail::check_input(op, ids, "ids");
  detail::check_input(op, attention_mask, "attention_mask");
  FORGE_CHECK(ids.dim() == 2, shape, op, "ids must be [B, T], got ", ids.shape());
  FORGE_CHECK(attention_mask.shape() == ids.shape(), shape, op, "attention_mask has shape ", attention_mask.shape(),
              " but ids have ", ids.shape());
  FORGE_CHECK(attention_mask.dtype() == DType::boolean, dtype, op, "attention_mask must be bool, got ",
              dtype_name(attention_mask.dtype()));
  const std::int64_t b = ids.size(0), t = ids.size(1);
  FORGE_CHECK(t <= config_.max_position_embeddings, invalid_argument, op, "sequence length ", t,
              " exceeds max_position_embeddings ", config_.max_position_embeddings);
  autograd::NoGradGuard no_grad;
  Tensor x = embedding(word_, ids);  // out_of_range for an id outside the vocabulary
  add_into(x, x, token_type_.select(0, 0));
  add_into(x, x, position_.narrow(0, 0, t));
  x = layer_norm(x, Shape{config_.hidden_size}, embedding_norm_.weight, embedding_norm_.bias, config_.layer_norm_eps);
  // Every query attends to its sentence's tokens only: [B, 1, 1, T] over heads and queries.
  const Tensor key_mask = attention_mask.view(Shape{b, 1, 1, t});
  for (const Layer& l : layers_) x = layer_forward(l, x, key_mask);
  return x;
}

// ---- embed ----

void SentenceEncoder::check_batch(const char* op, const TokenBatch& batch) const {
  const auto cells = static_cast<std::size_t>(batch.rows * batch.columns);
  FORGE_CHECK(
      batch.rows >= 0 && batch.columns >= 0 && batch.ids.size() == cells && batch.attention_mask.size() == cells,
      invalid_argument, op, "the batch's ids (", batch.ids.size(), ") and attention_mask (",
      batch.attention_mask.size(), ") must both hold rows ", batch.rows, " x columns ", batch.columns);
  FORGE_CHECK(batch.columns <= config_.max_position_embeddings, invalid_argument, op, "the batch has ", batch.columns,
              " columns, more than max_position_embeddings ", config_.max_position_embeddings);
  for (std::int64_t r = 0; r < batch.rows; ++r) {
    bool any = false;
    for (std::int64_t c = 0; c < batch.columns; ++c)
      any = any || batch.attention_mask[static_cast<std::size_t>(r * batch.columns + c)] != 0;
    FORGE_CHECK(any, invalid_argument, op, "row ", r, " of the batch has no token");
  }
}

RowsView SentenceEncoder::embed(Arena& arena, std::span<const std::string> sentences) const try {
  ArenaCall call(kEmbed, &arena, {word_});  // first: it checks and rewinds the arena
  return embed_into(call, tokenizer_.encode_batch(sentences));
}
FORGE_CATCH_OOM(kEmbed)

RowsView SentenceEncoder::embed(Arena& arena, const TokenBatch& batch) const try {
  ArenaCall call(kEmbed, &arena, {word_});
  return embed_into(call, batch);
}
FORGE_CATCH_OOM(kEmbed)

RowsView SentenceEncoder::embed_into(ArenaCall& call, const TokenBatch& batch) const {
  const char* op = kEmbed;
  check_batch(op, batch);
  const std::int64_t b = batch.rows, t = batch.columns, h = config_.hidden_size;
  Tensor out = call.allocate(Shape{b, h}, DType::f32);
  if (b == 0) {
    call.commit();
    return RowsView(std::move(out));
  }
  autograd::NoGradGuard no_grad;
  Runtime& rt = word_.runtime();
  Tensor ids = detail::allocate(rt, Shape{b, t}, DType::i64, op);
  std::copy(batch.ids.begin(), batch.ids.end(), ids.data_ptr<std::int64_t>());
  Tensor mask = detail::allocate(rt, Shape{b, t}, DType::boolean, op);
  std::copy(batch.attention_mask.begin(), batch.attention_mask.end(), static_cast<std::uint8_t*>(mask.raw_data(op)));
  Tensor hidden = forward(ids, mask);
  ids = Tensor();
  Tensor pooled;
  if (config_.pooling == Pooling::cls) {
    pooled = hidden.select(1, 0);
  } else {
    // The mean over each sentence's tokens: [B, 1, T] weights times [B, T, H].
    const Tensor weights = mask.to(DType::f32).view(Shape{b, 1, t});
    const Tensor counts = weights.sum({2}).clamp(1e-9, std::nullopt);  // [B, 1]
    pooled = bmm(weights, hidden).view(Shape{b, h});
    div_into(pooled, pooled, counts);
  }
  if (config_.normalize) {
    const Tensor norms = pooled.norm(2.0, {1}, true).clamp(1e-12, std::nullopt);  // as F.normalize
    div_into(out, pooled, norms);
  } else {
    out.copy_(pooled);
  }
  call.commit();
  return RowsView(std::move(out));
}

}  // namespace forge::infer
