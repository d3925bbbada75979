// Decoder checkpoints: save() writes the forge layout (decoder_parts.h) with
// the config as "forge.decoder.*" metadata; load() reads that, or a Hugging
// Face Llama or GPT-2 layout, renaming (and for GPT-2 splitting and
// transposing, as views) the tensors into the forge layout, so one builder
// makes every model. Tensors stay zero-copy over the read-only (private)
// mapping where they are f32; HF's extra buffers (GPT-2's attn.bias masks,
// Llama's rotary inv_freq) are skipped.

#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "forge/infer/decoder.h"
#include "forge/infer/quant.h"
#include "infer/decoder_parts.h"

namespace forge::infer {
namespace {

constexpr const char* kLoadOp = "Decoder.load";
constexpr const char* kPrefix = "forge.decoder.";

std::string format_double(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

std::string need(const io::Metadata& m, const std::string& key) {
  const auto it = m.find(kPrefix + key);
  FORGE_CHECK(it != m.end(), invalid_argument, kLoadOp, "the checkpoint's metadata lacks ", kPrefix, key);
  return it->second;
}

std::int64_t need_int(const io::Metadata& m, const std::string& key) {
  const std::string s = need(m, key);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  FORGE_CHECK(ec == std::errc() && end == s.data() + s.size(), invalid_argument, kLoadOp, kPrefix, key, " = '", s,
              "' is not an integer");
  return v;
}

double need_double(const io::Metadata& m, const std::string& key) {
  const std::string s = need(m, key);
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  FORGE_FAIL(invalid_argument, kLoadOp, kPrefix, key, " = '", s, "' is not a number");
}

template <typename E>
E need_kind(const io::Metadata& m, const std::string& key, const char* (*name)(E)) {
  const std::string s = need(m, key);
  for (const E e : {E{0}, E{1}})
    if (s == name(e)) return e;
  FORGE_FAIL(invalid_argument, kLoadOp, kPrefix, key, " = '", s, "' is neither ", name(E{0}), " nor ", name(E{1}));
}

bool need_bool(const io::Metadata& m, const std::string& key) {
  const std::string s = need(m, key);
  FORGE_CHECK(s == "true" || s == "false", invalid_argument, kLoadOp, kPrefix, key, " = '", s,
              "' is neither true nor false");
  return s == "true";
}

bool has(const StateDict& d, const std::string& name) { return d.count(name) != 0; }

// ---- Hugging Face configs (config.json beside the checkpoint) ----

nlohmann::json read_config_json(const std::filesystem::path& checkpoint) {
  const std::filesystem::path path = checkpoint.parent_path() / "config.json";
  std::ifstream in(path);
  if (!in) return nlohmann::json();
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    FORGE_FAIL(io, kLoadOp, path.string(), " is not valid JSON (", e.what(), ")");
  }
}

template <typename T>
T json_or(const nlohmann::json& j, const char* key, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    FORGE_FAIL(invalid_argument, kLoadOp, "config.json: '", key, "' has the wrong type");
  }
}

std::int64_t json_need(const nlohmann::json& j, const char* key) {
  FORGE_CHECK(!j.is_null(), invalid_argument, kLoadOp,
              "no config: the checkpoint has no forge.decoder.* metadata and no config.json beside it");
  FORGE_CHECK(j.contains(key), invalid_argument, kLoadOp, "config.json lacks '", key, "'");
  return json_or<std::int64_t>(j, key, 0);
}

// ---- layouts ----

// "model.layers.N.<rest>" -> N and rest; false for other names.
bool split_layer(const std::string& name, const std::string& prefix, std::string& layer, std::string& rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  const std::size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  layer = name.substr(prefix.size(), dot - prefix.size());
  rest = name.substr(dot + 1);
  return !layer.empty() && layer.find_first_not_of("0123456789") == std::string::npos;
}

DecoderConfig llama_config(const nlohmann::json& j, const StateDict& t) {
  DecoderConfig c;
  c.vocab_size = json_need(j, "vocab_size");
  c.d_model = json_need(j, "hidden_size");
  c.n_layers = json_need(j, "num_hidden_layers");
  c.n_heads = json_need(j, "num_attention_heads");
  c.n_kv_heads = json_or<std::int64_t>(j, "num_key_value_heads", c.n_heads);
  c.mlp_hidden = json_need(j, "intermediate_size");
  c.max_seq_len = json_need(j, "max_position_embeddings");
  c.norm = NormKind::rms_norm;
  c.positions = PositionKind::rope;
  c.mlp = MlpKind::swiglu;
  c.norm_eps = json_or<double>(j, "rms_norm_eps", 1e-6);
  c.rope_theta = json_or<double>(j, "rope_theta", 10000.0);
  c.bias = json_or<bool>(j, "attention_bias", false);
  c.tied_head = json_or<bool>(j, "tie_word_embeddings", !has(t, "lm_head.weight"));
  // What this decoder does not compute is refused rather than computed otherwise.
  FORGE_CHECK(json_or<std::string>(j, "hidden_act", "silu") == "silu", not_implemented, kLoadOp,
              "config.json: hidden_act '", json_or<std::string>(j, "hidden_act", ""), "' (only silu)");
  FORGE_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), not_implemented, kLoadOp,
              "config.json: rope_scaling is not supported (plain RoPE only)");
  FORGE_CHECK(c.n_heads <= 0 || json_or<std::int64_t>(j, "head_dim", c.d_model / c.n_heads) == c.d_model / c.n_heads,
              not_implemented, kLoadOp, "config.json: head_dim ", json_or<std::int64_t>(j, "head_dim", 0),
              " differs from hidden_size / num_attention_heads");
  FORGE_CHECK(json_or<bool>(j, "mlp_bias", c.bias) == c.bias, not_implemented, kLoadOp,
              "config.json: attention_bias and mlp_bias must agree (one bias setting for every projection)");
  return c;
}

StateDict from_llama(const StateDict& in, bool tied) {
  static const std::pair<const char*, const char*> kLayer[] = {
      {"self_attn.q_proj.", "attn.q."}, {"self_attn.k_proj.", "attn.k."},   {"self_attn.v_proj.", "attn.v."},
      {"self_attn.o_proj.", "attn.o."}, {"mlp.gate_proj.", "mlp.gate."},    {"mlp.up_proj.", "mlp.up."},
      {"mlp.down_proj.", "mlp.down."},  {"input_layernorm.", "attn_norm."}, {"post_attention_layernorm.", "mlp_norm."}};
  StateDict out;
  for (const auto& [name, t] : in) {
    std::string layer, rest;
    if (name == "model.embed_tokens.weight") {
      out.emplace("tok_embed.weight", t);
    } else if (name == "model.norm.weight") {
      out.emplace("norm.weight", t);
    } else if (name == "lm_head.weight") {
      if (!tied) out.emplace("head.weight", t);
    } else if (split_layer(name, "model.layers.", layer, rest)) {
      if (rest == "self_attn.rotary_emb.inv_freq") continue;  // recomputed from rope_theta
      bool mapped = false;
      for (const auto& [hf, ours] : kLayer)
        if (rest.rfind(hf, 0) == 0) {
          out.emplace("layers." + layer + "." + ours + rest.substr(std::string(hf).size()), t);
          mapped = true;
        }
      if (!mapped) out.emplace(name, t);  // reported as unexpected by the builder
    } else {
      out.emplace(name, t);
    }
  }
  return out;
}

DecoderConfig gpt2_config(const nlohmann::json& j) {
  DecoderConfig c;
  c.vocab_size = json_need(j, "vocab_size");
  c.d_model = json_need(j, "n_embd");
  c.n_layers = json_need(j, "n_layer");
  c.n_heads = json_need(j, "n_head");
  c.mlp_hidden = json_or<std::int64_t>(j, "n_inner", 0);
  c.max_seq_len = json_or<std::int64_t>(j, "n_positions", json_or<std::int64_t>(j, "n_ctx", 1024));
  c.norm_eps = json_or<double>(j, "layer_norm_epsilon", 1e-5);
  const std::string act = json_or<std::string>(j, "activation_function", "gelu_new");
  FORGE_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", not_implemented, kLoadOp,
              "config.json: activation_function '", act, "' (only the tanh GELU, gelu_new)");
  return c;  // learned positions, LayerNorm, GELU (tanh), tied head, biases: the defaults
}

// GPT-2 stores its linears as Conv1D, weight [in, out]: ours is its transpose,
// a view. c_attn fuses q, k and v along out.
StateDict from_gpt2(const StateDict& in, std::int64_t d_model) {
  StateDict out;
  const auto conv1d = [&](const std::string& to, const std::string& from, const std::string& layer_prefix) {
    const auto w = in.find(layer_prefix + from + ".weight");
    const auto b = in.find(layer_prefix + from + ".bias");
    if (w != in.end()) {
      FORGE_CHECK(w->second.dim() == 2, shape, kLoadOp, "tensor '", w->first, "' of shape ", w->second.shape(),
                  " is not a matrix");
      out.emplace(to + ".weight", w->second.t());
    }
    if (b != in.end()) out.emplace(to + ".bias", b->second);
  };
  for (const auto& [name, t] : in) {
    const std::string bare = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    const std::string prefix = name.substr(0, name.size() - bare.size());
    std::string layer, rest;
    if (bare == "wte.weight") {
      out.emplace("tok_embed.weight", t);
    } else if (bare == "wpe.weight") {
      out.emplace("pos_embed.weight", t);
    } else if (bare == "ln_f.weight" || bare == "ln_f.bias") {
      out.emplace("norm." + bare.substr(5), t);
    } else if (bare == "lm_head.weight" || name == "lm_head.weight") {
      continue;  // GPT-2's head is the token embedding
    } else if (split_layer(bare, "h.", layer, rest)) {
      const std::string ours = "layers." + layer + ".";
      const std::string theirs = prefix + "h." + layer + ".";
      if (rest == "attn.bias" || rest == "attn.masked_bias") continue;  // causal-mask buffers
      if (rest == "ln_1.weight" || rest == "ln_1.bias") {
        out.emplace(ours + "attn_norm." + rest.substr(5), t);
      } else if (rest == "ln_2.weight" || rest == "ln_2.bias") {
        out.emplace(ours + "mlp_norm." + rest.substr(5), t);
      } else if (rest == "attn.c_attn.weight") {
        FORGE_CHECK(t.dim() == 2 && t.size(1) == 3 * d_model, shape, kLoadOp, "tensor '", name, "' of shape ",
                    t.shape(), " is not [d_model, 3 * d_model] with d_model ", d_model);
        const char* parts[] = {"q", "k", "v"};
        for (int i = 0; i < 3; ++i)
          out.emplace(ours + "attn." + parts[i] + ".weight", t.narrow(1, i * d_model, d_model).t());
      } else if (rest == "attn.c_attn.bias") {
        FORGE_CHECK(t.dim() == 1 && t.size(0) == 3 * d_model, shape, kLoadOp, "tensor '", name, "' of shape ",
                    t.shape(), " is not [3 * d_model] with d_model ", d_model);
        const char* parts[] = {"q", "k", "v"};
        for (int i = 0; i < 3; ++i) out.emplace(ours + "attn." + parts[i] + ".bias", t.narrow(0, i * d_model, d_model));
      } else if (rest == "attn.c_proj.weight") {
        conv1d(ours + "attn.o", "attn.c_proj", theirs);
      } else if (rest == "mlp.c_fc.weight") {
        conv1d(ours + "mlp.up", "mlp.c_fc", theirs);
      } else if (rest == "mlp.c_proj.weight") {
        conv1d(ours + "mlp.down", "mlp.c_proj", theirs);
      } else if (rest == "attn.c_proj.bias" || rest == "mlp.c_fc.bias" || rest == "mlp.c_proj.bias") {
        continue;  // taken with its weight
      } else {
        out.emplace(name, t);
      }
    } else {
      out.emplace(name, t);
    }
  }
  return out;
}

enum class Layout { forge, llama, gpt2 };

Layout detect(const StateDict& t, const std::map<std::string, PackedMatrix>& packed, const io::Metadata& m,
              const std::filesystem::path& path) {
  const auto any = [&](const std::string& name) { return has(t, name) || packed.count(name) != 0; };
  if (m.count(std::string(kPrefix) + "vocab_size")) return Layout::forge;
  if (any("model.embed_tokens.weight")) return Layout::llama;
  if (any("wte.weight") || any("transformer.wte.weight")) return Layout::gpt2;
  if (any("tok_embed.weight")) return Layout::forge;
  FORGE_FAIL(invalid_argument, kLoadOp, path.string(),
             " is neither a forge decoder checkpoint nor a Hugging Face Llama or GPT-2 one (no token embedding "
             "under tok_embed.weight, model.embed_tokens.weight or wte.weight)");
}

}  // namespace

io::Metadata DecoderConfig::to_metadata() const {
  const std::string p = kPrefix;
  return {{p + "vocab_size", std::to_string(vocab_size)},   {p + "d_model", std::to_string(d_model)},
          {p + "n_layers", std::to_string(n_layers)},       {p + "n_heads", std::to_string(n_heads)},
          {p + "n_kv_heads", std::to_string(n_kv_heads)},   {p + "mlp_hidden", std::to_string(mlp_hidden)},
          {p + "max_seq_len", std::to_string(max_seq_len)}, {p + "norm", norm_kind_name(norm)},
          {p + "positions", position_kind_name(positions)}, {p + "mlp", mlp_kind_name(mlp)},
          {p + "tied_head", tied_head ? "true" : "false"},  {p + "bias", bias ? "true" : "false"},
          {p + "norm_eps", format_double(norm_eps)},        {p + "rope_theta", format_double(rope_theta)}};
}

DecoderConfig DecoderConfig::from_metadata(const io::Metadata& m) {
  DecoderConfig c;
  c.vocab_size = need_int(m, "vocab_size");
  c.d_model = need_int(m, "d_model");
  c.n_layers = need_int(m, "n_layers");
  c.n_heads = need_int(m, "n_heads");
  c.n_kv_heads = need_int(m, "n_kv_heads");
  c.mlp_hidden = need_int(m, "mlp_hidden");
  c.max_seq_len = need_int(m, "max_seq_len");
  c.norm = need_kind<NormKind>(m, "norm", norm_kind_name);
  c.positions = need_kind<PositionKind>(m, "positions", position_kind_name);
  c.mlp = need_kind<MlpKind>(m, "mlp", mlp_kind_name);
  c.tied_head = need_bool(m, "tied_head");
  c.bias = need_bool(m, "bias");
  c.norm_eps = need_double(m, "norm_eps");
  c.rope_theta = need_double(m, "rope_theta");
  c.validate();
  return c;
}

void Decoder::save(const std::filesystem::path& path, const io::Metadata& extra) const try {
  FORGE_CHECK(!format_, invalid_argument, "Decoder.save", "a model with ", format_name(*format_),
              " weights is not saved: save the f32 model and convert its file with forge::quantize");
  io::Metadata metadata = extra;
  for (auto& [k, v] : config_.to_metadata()) metadata[k] = v;
  io::save_safetensors(path, state_dict(), metadata);
}
FORGE_CATCH_OOM("Decoder.save")

std::shared_ptr<Decoder> Decoder::load(ExecContext& ctx, const std::filesystem::path& path,
                                       std::optional<WeightFormat> format) try {
  PackedCheckpoint file = read_packed(ctx, path);
  DecoderConfig config;
  StateDict weights;
  std::map<std::string, PackedMatrix> packed;
  const bool forge_config = file.metadata.count(std::string(kPrefix) + "vocab_size") != 0;
  switch (detect(file.tensors, file.packed, file.metadata, path)) {
    case Layout::forge:
      config = DecoderConfig::from_metadata(file.metadata);
      weights = std::move(file.tensors);
      packed = std::move(file.packed);
      break;
    case Layout::llama: {
      config = forge_config ? DecoderConfig::from_metadata(file.metadata)
                            : llama_config(read_config_json(path), file.tensors);
      weights = from_llama(file.tensors, config.tied_head);
      // Quantized projections are renamed as their plain tensors would be.
      for (const auto& [name, p] : file.packed) {
        StateDict one{{name, p.storage()}};
        const StateDict renamed = from_llama(one, config.tied_head);
        if (!renamed.empty()) packed.emplace(renamed.begin()->first, p);
      }
      break;
    }
    case Layout::gpt2:
      FORGE_CHECK(file.packed.empty(), not_implemented, kLoadOp,
                  "a quantized GPT-2 layout (Conv1D weights are stored transposed) is not read: quantize the "
                  "model after loading it in f32 (load with a format)");
      config = forge_config ? DecoderConfig::from_metadata(file.metadata) : gpt2_config(read_config_json(path));
      weights = from_gpt2(file.tensors, config.d_model);
      break;
  }
  FORGE_CHECK(config.vocab_size > 0, invalid_argument, kLoadOp, "no config for ", path.string(),
              ": write config.json beside it or forge.decoder.* metadata");
  auto model = std::shared_ptr<Decoder>(new Decoder(ctx, config, &weights, &packed, format));
  model->metadata_ = std::move(file.metadata);
  model->mapped_bytes_ = file.mapped_bytes;
  if (model->format_) model->eval();
  return model;
}
FORGE_CATCH_OOM("Decoder.load")

}  // namespace forge::infer
