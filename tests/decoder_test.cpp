// forge::infer's decoder: KvCache, Decoder and Generator. Cached decoding is
// checked against recomputing the whole sequence, batched decoding against
// each sequence alone, Hugging Face layouts against the forge layout with the
// same weights, and generation against the recomputed logits; every bad
// request is refused with nothing leaked. The models are tiny.

#include "forge/infer/decoder.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/infer/generator.h"
#include "forge/infer/kv_cache.h"
#include "forge/infer/quant.h"
#include "support.h"
#include "temp_dir.h"

using forge::DType;
using forge::Shape;
using forge::StateDict;
using forge::Tensor;
using forge_test::TempDir;
using forge_test::TestContext;
namespace fs = std::filesystem;
namespace infer = forge::infer;

namespace {

// GPT-2 style: learned positions, LayerNorm, GELU, multi-head, tied head, biases.
infer::DecoderConfig gpt_config() {
  return {.vocab_size = 37, .d_model = 32, .n_layers = 2, .n_heads = 4, .max_seq_len = 48};
}

// Llama style: RoPE, RMSNorm, SwiGLU, grouped-query (4 heads over 2), separate head, no biases.
infer::DecoderConfig llama_config() {
  return {.vocab_size = 41,
          .d_model = 32,
          .n_layers = 2,
          .n_heads = 4,
          .n_kv_heads = 2,
          .mlp_hidden = 48,
          .max_seq_len = 48,
          .norm = infer::NormKind::rms_norm,
          .positions = infer::PositionKind::rope,
          .mlp = infer::MlpKind::swiglu,
          .tied_head = false,
          .bias = false,
          .norm_eps = 1e-6};
}

std::vector<std::int64_t> random_tokens(std::int64_t n, std::int64_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  for (auto& t : out) t = static_cast<std::int64_t>(rng() % static_cast<unsigned>(vocab));
  return out;
}

Tensor row(forge::ExecContext& ctx, const std::vector<std::int64_t>& tokens) {
  return ctx.from_vector(tokens, Shape{1, static_cast<std::int64_t>(tokens.size())});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<float>();
  const auto y = b.to_vector<float>();
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(static_cast<double>(x[i]) - y[i]));
  return m;
}

// The logits of the whole sequence recomputed without a cache: [T, V].
Tensor recompute(infer::Decoder& model, forge::ExecContext& ctx, const std::vector<std::int64_t>& tokens) {
  forge::autograd::NoGradGuard no_grad;
  return model.forward(row(ctx, tokens)).select(0, 0);
}

// The logits of the next token after `tokens`, recomputed: [V].
Tensor last_logits(infer::Decoder& model, forge::ExecContext& ctx, const std::vector<std::int64_t>& tokens) {
  return recompute(model, ctx, tokens).select(0, static_cast<std::int64_t>(tokens.size()) - 1);
}

// A fresh model with a generator of max_batch rows and an arena.
struct Generation {
  TestContext ctx;
  infer::DecoderConfig config;
  std::shared_ptr<infer::Decoder> model;
  infer::Generator gen;
  forge::Arena arena;
  Generation(const infer::DecoderConfig& c, std::int64_t max_batch)
      : config(c), model(std::make_shared<infer::Decoder>(ctx, c)), gen(model, max_batch), arena(ctx) {}
};

// Whether `t`'s first byte lies in a mapping of `file` (/proc/self/maps): a zero-copy load.
bool inside_mapping_of(const Tensor& t, const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  const auto address = reinterpret_cast<std::uintptr_t>(t.raw_data());
  const std::string name = fs::canonical(file).string();
  for (std::string line; std::getline(maps, line);) {
    if (line.size() < name.size() || line.compare(line.size() - name.size(), name.size(), name) != 0) continue;
    const std::uintptr_t begin = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    const std::uintptr_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    if (address >= begin && address < end) return true;
  }
  return false;
}

std::int64_t argmax_of(const Tensor& logits_row) {
  const auto v = logits_row.to_vector<float>();
  return std::max_element(v.begin(), v.end()) - v.begin();
}

// ---- an independent reference: the decoder written out in f64 loops from the
// formulas (HF Llama's rotate-half RoPE, kv head h / group for query head h,
// GPT-2's tanh GELU), reading the model's state dict ----
using Vec = std::vector<double>;

struct Reference {
  const infer::DecoderConfig& c;
  StateDict w;
  Vec get(const std::string& name) const { return w.at(name).to_vector<double>(); }
  bool has(const std::string& name) const { return w.count(name) != 0; }

  // y = W x (+ b), W [rows, cols].
  Vec linear(const std::string& name, const Vec& x) const {
    const Vec W = get(name + ".weight");
    const std::size_t cols = x.size(), rows = W.size() / cols;
    Vec y(rows, 0.0);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t k = 0; k < cols; ++k) y[r] += W[r * cols + k] * x[k];
    if (has(name + ".bias")) {
      const Vec b = get(name + ".bias");
      for (std::size_t r = 0; r < rows; ++r) y[r] += b[r];
    }
    return y;
  }
  Vec norm(const std::string& name, const Vec& x) const {
    const auto n = static_cast<double>(x.size());
    const Vec g = get(name + ".weight");
    Vec y(x.size());
    if (c.norm == infer::NormKind::rms_norm) {
      double ms = 0;
      for (double v : x) ms += v * v / n;
      for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(ms + c.norm_eps) * g[i];
    } else {
      double mean = 0, var = 0;
      for (double v : x) mean += v / n;
      for (double v : x) var += (v - mean) * (v - mean) / n;
      const Vec b = get(name + ".bias");
      for (std::size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + c.norm_eps) * g[i] + b[i];
    }
    return y;
  }
  // Rotates each head of `x` (heads x hd) for position p.
  void rope(Vec& x, std::int64_t p) const {
    const std::int64_t hd = c.head_dim(), half = hd / 2;
    for (std::size_t h = 0; h < x.size() / static_cast<std::size_t>(hd); ++h) {
      double* u = x.data() + h * static_cast<std::size_t>(hd);
      for (std::int64_t i = 0; i < half; ++i) {
        const double a =
            static_cast<double>(p) * std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
        const double lo = u[i], hi = u[i + half];
        u[i] = lo * std::cos(a) - hi * std::sin(a);
        u[i + half] = hi * std::cos(a) + lo * std::sin(a);
      }
    }
  }
  // Logits [T][V] of `tokens`.
  std::vector<Vec> logits(const std::vector<std::int64_t>& tokens) const {
    const auto T = static_cast<std::int64_t>(tokens.size());
    const std::int64_t D = c.d_model, hd = c.head_dim(), H = c.n_heads, G = H / c.kv_heads();
    const Vec E = get("tok_embed.weight");
    std::vector<Vec> x(static_cast<std::size_t>(T));
    for (std::int64_t p = 0; p < T; ++p) {
      x[p].assign(E.begin() + tokens[p] * D, E.begin() + (tokens[p] + 1) * D);
      if (c.positions == infer::PositionKind::learned) {
        const Vec P = get("pos_embed.weight");
        for (std::int64_t i = 0; i < D; ++i) x[p][i] += P[p * D + i];
      }
    }
    for (std::int64_t l = 0; l < c.n_layers; ++l) {
      const std::string L = "layers." + std::to_string(l) + ".";
      std::vector<Vec> q(T), k(T), v(T);
      for (std::int64_t p = 0; p < T; ++p) {
        const Vec h = norm(L + "attn_norm", x[p]);
        q[p] = linear(L + "attn.q", h);
        k[p] = linear(L + "attn.k", h);
        v[p] = linear(L + "attn.v", h);
        if (c.positions == infer::PositionKind::rope) {
          rope(q[p], p);
          rope(k[p], p);
        }
      }
      for (std::int64_t p = 0; p < T; ++p) {
        Vec attn(static_cast<std::size_t>(D), 0.0);
        for (std::int64_t h = 0; h < H; ++h) {
          const std::int64_t kvh = h / G;
          Vec s(static_cast<std::size_t>(p + 1));
          double m = -1e300, z = 0;
          for (std::int64_t j = 0; j <= p; ++j) {
            double d = 0;
            for (std::int64_t i = 0; i < hd; ++i) d += q[p][h * hd + i] * k[j][kvh * hd + i];
            s[j] = d / std::sqrt(static_cast<double>(hd));
            m = std::max(m, s[j]);
          }
          for (double& e : s) z += (e = std::exp(e - m));
          for (std::int64_t j = 0; j <= p; ++j)
            for (std::int64_t i = 0; i < hd; ++i) attn[h * hd + i] += s[j] / z * v[j][kvh * hd + i];
        }
        const Vec o = linear(L + "attn.o", attn);
        for (std::int64_t i = 0; i < D; ++i) x[p][i] += o[i];
        const Vec h = norm(L + "mlp_norm", x[p]);
        Vec up = linear(L + "mlp.up", h);
        if (c.mlp == infer::MlpKind::swiglu) {
          const Vec gate = linear(L + "mlp.gate", h);
          for (std::size_t i = 0; i < up.size(); ++i) up[i] *= gate[i] / (1 + std::exp(-gate[i]));
        } else {
          for (double& u : up) u = 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
        }
        const Vec down = linear(L + "mlp.down", up);
        for (std::int64_t i = 0; i < D; ++i) x[p][i] += down[i];
      }
    }
    std::vector<Vec> out;
    for (std::int64_t p = 0; p < T; ++p) {
      const Vec h = norm("norm", x[p]);
      out.push_back(c.tied_head ? Reference{c, {{"t.weight", w.at("tok_embed.weight")}}}.linear("t", h)
                                : linear("head", h));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("decoder: the logits match an f64 reference written from the formulas, for both architectures",
          "[infer][decoder]") {
  TestContext ctx;
  for (const auto& config : {gpt_config(), llama_config()}) {
    infer::Decoder model(ctx, config);
    const auto tokens = random_tokens(9, config.vocab_size, 11);
    const Tensor got = recompute(model, ctx, tokens);
    const auto expected = Reference{config, model.state_dict()}.logits(tokens);
    double err = 0;
    for (std::int64_t p = 0; p < 9; ++p) {
      const auto row_got = got.select(0, p).to_vector<float>();
      for (std::size_t v = 0; v < row_got.size(); ++v) err = std::max(err, std::abs(row_got[v] - expected[p][v]));
    }
    CHECK(err < 1e-4);
  }
}

TEST_CASE("decoder: cached decode gives the recomputed logits at every position, by prefill, chunk and step",
          "[infer][decoder]") {
  TestContext ctx;
  for (const auto& config : {gpt_config(), llama_config()}) {
    infer::Decoder model(ctx, config);
    const auto tokens = random_tokens(12, config.vocab_size, 7);
    const Tensor full = recompute(model, ctx, tokens);
    infer::KvCache cache(ctx, config, 1, config.max_seq_len);
    // Prefill 3 (causal from an empty cache), a chunk of 4 (into a non-empty cache), then single steps.
    std::vector<std::pair<std::int64_t, std::int64_t>> pieces{{0, 3}, {3, 4}};
    for (std::int64_t i = 7; i < 12; ++i) pieces.emplace_back(i, 1);
    for (const auto& [start, len] : pieces) {
      const std::vector<std::int64_t> part(tokens.begin() + start, tokens.begin() + start + len);
      const Tensor logits = model.forward(row(ctx, part), cache);
      REQUIRE(logits.shape() == Shape{1, len, config.vocab_size});
      CHECK(max_abs_diff(logits.select(0, 0), full.narrow(0, start, len)) < 1e-4);
      CHECK(cache.length(0) == start + len);
    }
  }
}

TEST_CASE("decoder: a batched decode of prompts of different lengths equals each sequence alone", "[infer][decoder]") {
  TestContext ctx;
  for (const auto& config : {gpt_config(), llama_config()}) {
    infer::Decoder model(ctx, config);
    std::vector<std::vector<std::int64_t>> seqs{random_tokens(2, config.vocab_size, 1),
                                                random_tokens(6, config.vocab_size, 2),
                                                random_tokens(4, config.vocab_size, 3)};
    infer::KvCache cache(ctx, config, 3, 32);
    for (std::int64_t b = 0; b < 3; ++b) model.forward(row(ctx, seqs[b]), cache, b);
    CHECK(cache.length(0) == 2);
    CHECK(cache.length(1) == 6);
    CHECK(cache.length(2) == 4);
    // Three single steps, then a chunk of two positions per sequence (masked per sequence).
    for (int step = 0; step < 4; ++step) {
      const std::int64_t T = step < 3 ? 1 : 2;
      const auto fresh = random_tokens(3 * T, config.vocab_size, 10 + step);
      const Tensor input = ctx.from_vector(fresh, Shape{3, T});
      const Tensor logits = model.forward(input, cache);
      REQUIRE(logits.shape() == Shape{3, T, config.vocab_size});
      for (std::int64_t b = 0; b < 3; ++b) {
        seqs[b].insert(seqs[b].end(), fresh.begin() + b * T, fresh.begin() + (b + 1) * T);
        const Tensor alone = recompute(model, ctx, seqs[b]);
        const auto n = static_cast<std::int64_t>(seqs[b].size());
        CHECK(max_abs_diff(logits.select(0, b), alone.narrow(0, n - T, T)) < 1e-4);
      }
    }
  }
}

TEST_CASE("kv_cache: reset keeps the buffers and a reused cache decodes as a new one", "[infer][decoder]") {
  TestContext ctx;
  const auto config = llama_config();
  infer::Decoder model(ctx, config);
  infer::KvCache cache(ctx, config, 2, 16);
  CHECK(cache.bytes() == 2u * 2 * 2 * 2 * 16 * 8 * 4);  // layers x {K, V} x batch x kv heads x len x head_dim x f32
  const void* k0 = cache.keys(0).raw_data();
  const auto a = random_tokens(5, config.vocab_size, 4);
  const auto b = random_tokens(3, config.vocab_size, 5);
  const Tensor first = model.forward(row(ctx, a), cache, 0).clone();
  model.forward(row(ctx, b), cache, 1);
  cache.reset(0);
  CHECK(cache.length(0) == 0);
  CHECK(cache.length(1) == 3);
  CHECK(max_abs_diff(model.forward(row(ctx, a), cache, 0), first) == 0);
  cache.reset();
  CHECK(cache.max_length() == 0);
  CHECK(max_abs_diff(model.forward(row(ctx, a), cache, 0), first) == 0);
  CHECK(cache.keys(0).raw_data() == k0);
  CHECK(cache.keys(0, 0, 1, 5).raw_data() == k0);  // a view, no copy
}

TEST_CASE("kv_cache: bf16 and f16 caches stay within their rounding of the f32 logits", "[infer][decoder]") {
  TestContext ctx;
  const auto config = llama_config();
  infer::Decoder model(ctx, config);
  const auto tokens = random_tokens(10, config.vocab_size, 8);
  const Tensor full = recompute(model, ctx, tokens);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    infer::KvCache cache(ctx, config, 1, 16, dtype);
    CHECK(cache.keys(0).dtype() == dtype);
    model.forward(row(ctx, std::vector<std::int64_t>(tokens.begin(), tokens.begin() + 6)), cache);
    for (std::int64_t i = 6; i < 10; ++i) {
      const Tensor logits = model.forward(ctx.from_vector(std::vector<std::int64_t>{tokens[i]}, Shape{1, 1}), cache);
      const double err = max_abs_diff(logits.select(0, 0), full.narrow(0, i, 1));
      CHECK(err < (dtype == DType::bf16 ? 0.1 : 0.01));
      CHECK(err > 0);  // the cache really holds the narrower dtype
    }
  }
}

TEST_CASE("kv_cache: a cache larger than RAM is refused up front, an overflow before anything is written",
          "[infer][decoder]") {
  TestContext ctx;
  const auto config = gpt_config();
  try {
    infer::KvCache huge(ctx, 64, 1024, 64, 1 << 20, 128, DType::f32);
    FAIL("a cache of 2^45 * 64 bytes was made");
  } catch (const forge::Error& e) {
    CHECK(e.code() == forge::ErrorCode::out_of_memory);
    CHECK_THAT(e.what(),
               Catch::Contains(std::to_string(infer::KvCache::bytes_for(64, 1024, 64, 1 << 20, 128, DType::f32))));
  }
  infer::Decoder model(ctx, config);
  infer::KvCache cache(ctx, config, 1, 8);
  model.forward(row(ctx, random_tokens(6, config.vocab_size, 1)), cache);
  const auto before = cache.keys(0).to_vector<float>();
  const auto baseline = ctx.stats().outstanding;
  try {
    model.forward(row(ctx, random_tokens(3, config.vocab_size, 2)), cache);
    FAIL("6 + 3 positions went into a cache of 8");
  } catch (const forge::Error& e) {
    CHECK(e.code() == forge::ErrorCode::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains("overflow"));
  }
  CHECK(cache.length(0) == 6);
  CHECK(cache.keys(0).to_vector<float>() == before);
  CHECK(ctx.stats().outstanding == baseline);
  CHECK_THROWS_AS(infer::KvCache(ctx, config, 1, config.max_seq_len + 1), forge::Error);
  CHECK_THROWS_AS(infer::KvCache(ctx, config, 1, 8, DType::i32), forge::Error);
}

TEST_CASE("decoder: training through forward(tokens) reaches every parameter, grouped-query included",
          "[infer][decoder]") {
  TestContext ctx;
  for (const auto& config : {gpt_config(), llama_config()}) {
    infer::Decoder model(ctx, config);
    const Tensor tokens = ctx.from_vector(random_tokens(2 * 9, config.vocab_size, 3), Shape{2, 9});
    const Tensor logits = model.forward(tokens);
    CHECK(logits.requires_grad());
    const Tensor loss = forge::cross_entropy(logits.narrow(1, 0, 8).transpose(1, 2), tokens.narrow(1, 1, 8));
    loss.backward();
    for (const auto& [name, p] : model.named_parameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      CHECK(p.grad().abs().sum().item<float>() > 0);
    }
  }
}

TEST_CASE("decoder: save and load round trip in the forge layout, weights over the mapping", "[infer][decoder]") {
  TestContext ctx;
  TempDir dir;
  for (const auto& config : {gpt_config(), llama_config()}) {
    infer::Decoder model(ctx, config);
    model.save(dir / "m.safetensors", {{"forge.vocab", "abc"}});
    const auto loaded = infer::Decoder::load(ctx, dir / "m.safetensors");
    CHECK(loaded->config() == config);
    CHECK(loaded->metadata().at("forge.vocab") == "abc");
    CHECK(loaded->mapped_bytes() > 0);
    CHECK_FALSE(loaded->weight_format().has_value());
    const auto tokens = random_tokens(9, config.vocab_size, 2);
    CHECK(max_abs_diff(recompute(*loaded, ctx, tokens), recompute(model, ctx, tokens)) == 0);
    CHECK(loaded->state_dict().size() == model.state_dict().size());
    infer::Decoder copy(ctx, config);  // other random weights, then the model's through load_state_dict
    copy.load_state_dict(model.state_dict());
    CHECK(max_abs_diff(recompute(copy, ctx, tokens), recompute(model, ctx, tokens)) == 0);
    for (const auto& [name, t] : loaded->state_dict()) {
      INFO(name);
      CHECK(inside_mapping_of(t, dir / "m.safetensors"));
    }
  }
}

TEST_CASE("decoder: a Hugging Face Llama-layout checkpoint loads as the forge model with the same weights",
          "[infer][decoder]") {
  TestContext ctx;
  TempDir dir;
  const auto config = llama_config();
  infer::Decoder model(ctx, config);
  const StateDict ours = model.state_dict();
  StateDict hf;
  hf.emplace("model.embed_tokens.weight", ours.at("tok_embed.weight"));
  hf.emplace("model.norm.weight", ours.at("norm.weight"));
  hf.emplace("lm_head.weight", ours.at("head.weight"));
  const std::pair<const char*, const char*> names[] = {
      {"attn.q", "self_attn.q_proj"}, {"attn.k", "self_attn.k_proj"},   {"attn.v", "self_attn.v_proj"},
      {"attn.o", "self_attn.o_proj"}, {"mlp.gate", "mlp.gate_proj"},    {"mlp.up", "mlp.up_proj"},
      {"mlp.down", "mlp.down_proj"},  {"attn_norm", "input_layernorm"}, {"mlp_norm", "post_attention_layernorm"}};
  for (int l = 0; l < config.n_layers; ++l)
    for (const auto& [f, h] : names)
      hf.emplace("model.layers." + std::to_string(l) + "." + h + ".weight",
                 ours.at("layers." + std::to_string(l) + "." + f + ".weight"));
  hf.emplace("model.layers.0.self_attn.rotary_emb.inv_freq", ctx.ones(Shape{4}));  // older exports carry it
  forge::io::save_safetensors(dir / "model.safetensors", hf);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 41,
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 48, "max_position_embeddings": 48, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "tie_word_embeddings": false, "hidden_act": "silu"})";
  const auto loaded = infer::Decoder::load(ctx, dir / "model.safetensors");
  CHECK(loaded->config() == config);
  const auto tokens = random_tokens(11, config.vocab_size, 6);
  CHECK(max_abs_diff(recompute(*loaded, ctx, tokens), recompute(model, ctx, tokens)) == 0);
  // A config asking for what the decoder does not compute is refused.
  std::ofstream(dir / "config.json") << R"({"vocab_size": 41, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "max_position_embeddings": 48,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})";
  CHECK_THROWS_WITH(infer::Decoder::load(ctx, dir / "model.safetensors"), Catch::Contains("rope_scaling"));
  // Without its config the checkpoint cannot be read.
  fs::remove(dir / "config.json");
  CHECK_THROWS_WITH(infer::Decoder::load(ctx, dir / "model.safetensors"), Catch::Contains("config.json"));
}

TEST_CASE("decoder: a GPT-2-layout checkpoint (fused, transposed Conv1D weights) loads as the forge model",
          "[infer][decoder]") {
  TestContext ctx;
  TempDir dir;
  const auto config = gpt_config();
  infer::Decoder model(ctx, config);
  const StateDict ours = model.state_dict();
  for (const std::string prefix : {"", "transformer."}) {
    StateDict hf;
    hf.emplace(prefix + "wte.weight", ours.at("tok_embed.weight"));
    hf.emplace(prefix + "wpe.weight", ours.at("pos_embed.weight"));
    hf.emplace(prefix + "ln_f.weight", ours.at("norm.weight"));
    hf.emplace(prefix + "ln_f.bias", ours.at("norm.bias"));
    for (int l = 0; l < config.n_layers; ++l) {
      const std::string f = "layers." + std::to_string(l) + ".", h = prefix + "h." + std::to_string(l) + ".";
      for (const char* p : {"weight", "bias"}) {
        hf.emplace(h + "ln_1." + p, ours.at(f + "attn_norm." + p));
        hf.emplace(h + "ln_2." + p, ours.at(f + "mlp_norm." + p));
      }
      hf.emplace(
          h + "attn.c_attn.weight",
          forge::cat({ours.at(f + "attn.q.weight"), ours.at(f + "attn.k.weight"), ours.at(f + "attn.v.weight")}, 0)
              .t()
              .contiguous());
      hf.emplace(h + "attn.c_attn.bias",
                 forge::cat({ours.at(f + "attn.q.bias"), ours.at(f + "attn.k.bias"), ours.at(f + "attn.v.bias")}, 0));
      hf.emplace(h + "attn.c_proj.weight", ours.at(f + "attn.o.weight").t().contiguous());
      hf.emplace(h + "attn.c_proj.bias", ours.at(f + "attn.o.bias"));
      hf.emplace(h + "mlp.c_fc.weight", ours.at(f + "mlp.up.weight").t().contiguous());
      hf.emplace(h + "mlp.c_fc.bias", ours.at(f + "mlp.up.bias"));
      hf.emplace(h + "mlp.c_proj.weight", ours.at(f + "mlp.down.weight").t().contiguous());
      hf.emplace(h + "mlp.c_proj.bias", ours.at(f + "mlp.down.bias"));
      hf.emplace(h + "attn.bias", ctx.ones(Shape{1, 1, 48, 48}));  // GPT-2's causal-mask buffer
    }
    forge::io::save_safetensors(dir / "model.safetensors", hf);
    std::ofstream(dir / "config.json") << R"({"model_type": "gpt2", "vocab_size": 37, "n_embd": 32, "n_layer": 2,
      "n_head": 4, "n_positions": 48, "layer_norm_epsilon": 1e-05})";
    const auto loaded = infer::Decoder::load(ctx, dir / "model.safetensors");
    CHECK(loaded->config() == config);
    const auto tokens = random_tokens(10, config.vocab_size, 9);
    CHECK(max_abs_diff(recompute(*loaded, ctx, tokens), recompute(model, ctx, tokens)) < 1e-5);
    // The fused, transposed weights are views over the mapping.
    CHECK(inside_mapping_of(loaded->state_dict().at("layers.1.attn.v.weight"), dir / "model.safetensors"));
    // Decoding the loaded model matches too.
    infer::KvCache cache(ctx, config, 1, 16);
    const Tensor cached = loaded->forward(row(ctx, tokens), cache).select(0, 0);
    CHECK(max_abs_diff(cached, recompute(model, ctx, tokens)) < 1e-4);
  }
}

TEST_CASE("decoder: bad configs and inputs are refused naming the problem", "[infer][decoder]") {
  TestContext ctx;
  auto config = gpt_config();
  config.n_heads = 5;
  CHECK_THROWS_WITH(infer::Decoder(ctx, config), Catch::Contains("n_heads"));
  config = llama_config();
  config.n_kv_heads = 3;
  CHECK_THROWS_WITH(infer::Decoder(ctx, config), Catch::Contains("n_kv_heads"));
  infer::Decoder model(ctx, gpt_config());
  CHECK_THROWS_AS(model.forward(ctx.from_vector(std::vector<std::int64_t>{1, 99}, Shape{1, 2})), forge::Error);
  CHECK_THROWS_WITH(model.forward(ctx.zeros(Shape{1, 49}, DType::i64)), Catch::Contains("max_seq_len"));
  CHECK_THROWS_AS(model.forward(ctx.zeros(Shape{1, 4}, DType::f32)), forge::Error);
  infer::KvCache other(ctx, llama_config(), 1, 8);
  CHECK_THROWS_WITH(model.forward(ctx.zeros(Shape{1, 2}, DType::i64), other), Catch::Contains("cache"));
}

TEST_CASE("generator: greedy decoding picks the argmax of the recomputed logits, batched prompts alike",
          "[infer][decoder]") {
  for (const auto& architecture : {gpt_config(), llama_config()}) {
    Generation g(architecture, 3);
    auto& [ctx, config, model, gen, arena] = g;
    const std::vector<std::vector<std::int64_t>> prompts{random_tokens(3, config.vocab_size, 1),
                                                         random_tokens(7, config.vocab_size, 2),
                                                         random_tokens(1, config.vocab_size, 3)};
    const infer::Generated out = gen.generate(arena, prompts, {.max_new_tokens = 6, .greedy = true, .logprobs = true});
    REQUIRE(out.tokens.count() == 3);
    REQUIRE(out.logprobs.count() == 3);
    for (std::int64_t b = 0; b < 3; ++b) {
      const auto got = out.tokens.item(b).to_vector<std::int64_t>();
      const auto lps = out.logprobs.item(b).to_vector<float>();
      REQUIRE(got.size() == 6);
      auto seq = prompts[b];
      for (std::size_t i = 0; i < got.size(); ++i) {
        const Tensor logits = last_logits(*model, ctx, seq);
        INFO("vocab " << config.vocab_size << " sequence " << b << " token " << i);
        CHECK(got[i] == argmax_of(logits));
        const float expected = forge::log_softmax(logits, 0).to_vector<float>()[got[i]];
        CHECK(std::abs(lps[i] - expected) < 1e-4);
        seq.push_back(got[i]);
      }
    }
  }
}

TEST_CASE("generator: a stop token ends its sequence and is kept, and the offsets tile the tokens",
          "[infer][decoder]") {
  Generation g(gpt_config(), 2);
  auto& [ctx, config, model, gen, arena] = g;
  const std::vector<std::vector<std::int64_t>> prompts{random_tokens(4, config.vocab_size, 1),
                                                       random_tokens(2, config.vocab_size, 2)};
  const auto free_run = gen.generate(arena, prompts, {.max_new_tokens = 5, .greedy = true});
  const auto first = free_run.tokens.item(0).to_vector<std::int64_t>();
  const auto second = free_run.tokens.item(1).to_vector<std::int64_t>();
  // Stop sequence 0 at its third token (unless it already appeared earlier).
  const std::int64_t stop = first[2];
  const auto stop_at = [&](const std::vector<std::int64_t>& t) {
    return static_cast<std::int64_t>(std::find(t.begin(), t.end(), stop) - t.begin());
  };
  const auto out = gen.generate(arena, prompts, {.max_new_tokens = 5, .stop_tokens = {stop}, .greedy = true});
  const std::int64_t* off = out.tokens.offsets_data();
  const std::int64_t n0 = std::min<std::int64_t>(stop_at(first) + 1, 5),
                     n1 = std::min<std::int64_t>(stop_at(second) + 1, 5);
  CHECK(off[0] == 0);
  CHECK(off[1] == n0);
  CHECK(off[2] == n0 + n1);
  CHECK(out.tokens.values().numel() == n0 + n1);
  const auto got0 = out.tokens.item(0).to_vector<std::int64_t>();
  CHECK(got0 == std::vector<std::int64_t>(first.begin(), first.begin() + n0));
  CHECK(got0.back() == stop);
  CHECK(out.logprobs.count() == 0);  // not asked for
}

TEST_CASE("generator: after a warm-up call no decode step makes a system allocation, after two no call does",
          "[infer][decoder]") {
  for (const auto& architecture : {gpt_config(), llama_config()}) {
    Generation g(architecture, 2);
    auto& [ctx, config, model, gen, arena] = g;
    const std::vector<std::vector<std::int64_t>> prompts{random_tokens(5, config.vocab_size, 1),
                                                         random_tokens(3, config.vocab_size, 2)};
    const infer::GenerateOptions options{
        .max_new_tokens = 20, .repetition_penalty = 1.3, .greedy = true, .logprobs = true};
    gen.generate(arena, prompts, options);  // warm-up: the pool and the arena learn the sizes
    // The second call's steps after its first reuse the first call's blocks. (Its first step may still take
    // one: the pool serves a request from the smallest cached block up to 2x its size, so a block a later
    // size left behind can be taken early.)
    gen.generate(arena, prompts, options);
    CHECK(gen.last_stats().decode_steps == 19);
    CHECK(gen.last_stats().decode_system_allocations == 0);
    for (int call = 0; call < 2; ++call) {
      const auto pool_before = ctx.stats().system_allocations;
      const auto arena_before = arena.stats().system_allocations;
      gen.generate(arena, prompts, options);
      CHECK(gen.last_stats().decode_system_allocations == 0);
      CHECK(ctx.stats().system_allocations == pool_before);  // prefill and sampling included
      CHECK(arena.stats().system_allocations == arena_before);
    }
  }
}

TEST_CASE("generator: bad prompts and options are refused with clear errors and nothing leaked", "[infer][decoder]") {
  Generation g(gpt_config(), 2);
  auto& [ctx, config, model, gen, arena] = g;
  const auto ok = random_tokens(4, config.vocab_size, 1);
  const auto baseline = ctx.stats().outstanding;
  const auto refused = [&](const std::vector<std::vector<std::int64_t>>& prompts, const infer::GenerateOptions& o,
                           forge::ErrorCode code, const std::string& words) {
    INFO(words);
    try {
      gen.generate(arena, prompts, o);
      FAIL("accepted");
    } catch (const forge::Error& e) {
      CHECK(e.code() == code);
      CHECK_THAT(e.what(), Catch::Contains(words));
    }
    CHECK(ctx.stats().outstanding == baseline);
    CHECK(arena.stats().used_bytes == 0);
  };
  const infer::GenerateOptions greedy{.max_new_tokens = 4, .greedy = true};
  using C = forge::ErrorCode;
  refused({}, greedy, C::invalid_argument, "no prompts");
  refused({ok, {}}, greedy, C::invalid_argument, "prompt 1 is empty");
  refused({ok, {3, 37}}, greedy, C::invalid_argument, "token 37 at position 1");
  refused({{-1}}, greedy, C::invalid_argument, "token -1");
  refused({ok, ok, ok}, greedy, C::invalid_argument, "max_batch 2");
  refused({ok}, {.max_new_tokens = 45, .greedy = true}, C::invalid_argument, "exceeds the cache's 48 positions");
  refused({ok}, {.max_new_tokens = -1}, C::invalid_argument, "max_new_tokens");
  refused({ok}, {.temperature = 0}, C::invalid_argument, "temperature");
  refused({ok}, {.top_p = 0}, C::invalid_argument, "top_p");
  refused({ok}, {.top_k = -2}, C::invalid_argument, "top_k");
  refused({ok}, {.repetition_penalty = 0}, C::invalid_argument, "repetition_penalty");
  refused({ok}, {.stop_tokens = {40}, .greedy = true}, C::out_of_range, "stop token 40");
  CHECK_THROWS_WITH(infer::Generator(nullptr), Catch::Contains("null"));
  TestContext other;
  forge::Arena foreign(other);
  CHECK_THROWS_WITH(gen.generate(foreign, std::vector<std::vector<std::int64_t>>{ok}, greedy),
                    Catch::Contains("the model's context"));
  // A generator with a shorter cache refuses what does not fit it.
  infer::Generator short_gen(model, 1, DType::f32, 8);
  CHECK(short_gen.cache().max_len() == 8);
  CHECK_THROWS_WITH(short_gen.generate(arena, std::vector<std::vector<std::int64_t>>{ok}, {.max_new_tokens = 5}),
                    Catch::Contains("exceeds the cache's 8 positions"));
  // The generator still works afterwards.
  CHECK(gen.generate(arena, std::vector<std::vector<std::int64_t>>{ok}, greedy).tokens.count() == 1);
}

TEST_CASE("decoder: bf16, q8_0 and q4_0 weights stay within their stated error of the f32 logits", "[infer][decoder]") {
  TestContext ctx;
  TempDir dir;
  for (const auto& config : {gpt_config(), llama_config()}) {
    infer::Decoder model(ctx, config);
    model.save(dir / "f32.safetensors");
    const auto tokens = random_tokens(10, config.vocab_size, 4);
    const Tensor reference = recompute(model, ctx, tokens);
    const double scale = reference.abs().max().item<float>();
    // Largest |logit error| / largest |logit|, measured on these random models: bf16 0.5-0.7%, q8_0 1.2-2.9%
    // (activations are rounded to int8 blocks too), q4_0 15-20%; the bounds leave about 2x.
    const std::pair<infer::WeightFormat, double> bounds[] = {
        {infer::WeightFormat::bf16, 0.015}, {infer::WeightFormat::q8_0, 0.06}, {infer::WeightFormat::q4_0, 0.4}};
    for (const auto& [format, bound] : bounds) {
      INFO(infer::format_name(format));
      // Packed on load, and read from a file forge::quantize converted.
      forge::quantize(dir / "f32.safetensors", dir / "packed.safetensors", format);
      for (const auto& packed : {infer::Decoder::load(ctx, dir / "f32.safetensors", format),
                                 infer::Decoder::load(ctx, dir / "packed.safetensors")}) {
        CHECK(packed->weight_format() == format);
        infer::KvCache cache(ctx, config, 1, 16);
        const Tensor logits = packed->forward(row(ctx, tokens), cache).select(0, 0);
        const double err = max_abs_diff(logits, reference) / scale;
        CHECK(err < bound);
        CHECK(err > 0);
        CHECK_THROWS_WITH(packed->forward(row(ctx, tokens)), Catch::Contains("only decodes"));
        CHECK_THROWS_WITH(packed->save(dir / "again.safetensors"), Catch::Contains("quantize"));
      }
    }
  }
}

TEST_CASE("decoder: grouped-query gradients equal those of multi-head attention with the kv heads repeated",
          "[infer][decoder]") {
  TestContext ctx;
  const auto gqa_config = llama_config();  // 4 query heads over 2 kv heads
  auto mha_config = gqa_config;
  mha_config.n_kv_heads = 0;
  infer::Decoder gqa(ctx, gqa_config);
  const std::int64_t hd = gqa_config.head_dim(), G = 2;
  StateDict weights;
  for (const auto& [name, t] : gqa.state_dict()) {
    const bool kv = name.find("attn.k.") != std::string::npos || name.find("attn.v.") != std::string::npos;
    if (!kv) {
      weights.emplace(name, t.clone());
      continue;
    }
    std::vector<Tensor> heads;  // query head h reads kv head h / G
    for (std::int64_t h = 0; h < gqa_config.n_heads; ++h) heads.push_back(t.narrow(0, h / G * hd, hd));
    weights.emplace(name, forge::cat(heads, 0));
  }
  const auto mha = infer::Decoder::from_state_dict(ctx, mha_config, weights);
  const Tensor tokens = ctx.from_vector(random_tokens(2 * 7, gqa_config.vocab_size, 5), Shape{2, 7});
  const auto loss = [&](infer::Decoder& m) {
    const Tensor logits = m.forward(tokens);
    return forge::cross_entropy(logits.narrow(1, 0, 6).transpose(1, 2), tokens.narrow(1, 1, 6));
  };
  const Tensor lg = loss(gqa), lm = loss(*mha);
  CHECK(std::abs(lg.item<float>() - lm.item<float>()) < 1e-5);
  lg.backward();
  lm.backward();
  std::map<std::string, Tensor> mha_params;
  for (const auto& [name, p] : mha->named_parameters()) mha_params.emplace(name, p);
  for (const auto& [name, p] : gqa.named_parameters()) {
    INFO(name);
    Tensor expected = mha_params.at(name).grad();
    if (name.find("attn.k.") != std::string::npos || name.find("attn.v.") != std::string::npos) {
      // A kv head's gradient gathers those of the query heads that read it.
      std::vector<Tensor> sums;
      for (std::int64_t kvh = 0; kvh < gqa_config.kv_heads(); ++kvh)
        sums.push_back(forge::add(expected.narrow(0, kvh * G * hd, hd), expected.narrow(0, (kvh * G + 1) * hd, hd)));
      expected = forge::cat(sums, 0);
    }
    CHECK(max_abs_diff(p.grad(), expected) < 1e-5);
  }
}

TEST_CASE("generator: a seed makes sampling reproducible, and another seed draws otherwise", "[infer][decoder]") {
  Generation g(llama_config(), 2);
  auto& [ctx, config, model, gen, arena] = g;
  const std::vector<std::vector<std::int64_t>> prompts{random_tokens(3, config.vocab_size, 1),
                                                       random_tokens(5, config.vocab_size, 2)};
  const auto draw = [&](std::uint64_t seed) {
    return gen.generate(arena, prompts, {.max_new_tokens = 24, .temperature = 1.5, .seed = seed})
        .tokens.values()
        .to_vector<std::int64_t>();
  };
  const auto a = draw(5);
  CHECK(draw(5) == a);
  CHECK(draw(6) != a);
}

TEST_CASE("generator: sampled log-probabilities are log_softmax of the recomputed logits at the chosen tokens",
          "[infer][decoder]") {
  Generation g(gpt_config(), 2);
  auto& [ctx, config, model, gen, arena] = g;
  const std::vector<std::vector<std::int64_t>> prompts{random_tokens(4, config.vocab_size, 3),
                                                       random_tokens(2, config.vocab_size, 4)};
  // Temperature 1 without filters: the plain distribution; top-k 3 at temperature 0.7: renormalized over the top 3.
  for (const std::int64_t top_k : {0, 3}) {
    const double temperature = top_k == 0 ? 1.0 : 0.7;
    const auto out = gen.generate(
        arena, prompts, {.max_new_tokens = 8, .temperature = temperature, .top_k = top_k, .seed = 9, .logprobs = true});
    for (std::int64_t b = 0; b < 2; ++b) {
      auto seq = prompts[b];
      const auto got = out.tokens.item(b).to_vector<std::int64_t>();
      const auto lps = out.logprobs.item(b).to_vector<float>();
      REQUIRE(got.size() == 8);
      for (std::size_t i = 0; i < got.size(); ++i) {
        const auto logits = last_logits(*model, ctx, seq).to_vector<float>();
        std::vector<double> scaled(logits.begin(), logits.end());
        for (double& l : scaled) l /= temperature;
        std::vector<double> sorted = scaled;
        std::sort(sorted.rbegin(), sorted.rend());
        const double floor = top_k == 0 ? -1e300 : sorted[top_k - 1];
        double z = 0;
        for (double l : scaled) z += l >= floor ? std::exp(l) : 0.0;
        INFO("top_k " << top_k << " sequence " << b << " token " << i);
        CHECK(scaled[got[i]] >= floor);  // a kept token
        CHECK(std::abs(lps[i] - (scaled[got[i]] - std::log(z))) < 1e-4);
        seq.push_back(got[i]);
      }
    }
  }
}

TEST_CASE("generator: top-k 1 and a tiny top-p decode greedily", "[infer][decoder]") {
  Generation g(llama_config(), 1);
  auto& [ctx, config, model, gen, arena] = g;
  const std::vector<std::vector<std::int64_t>> prompts{random_tokens(4, config.vocab_size, 8)};
  const auto greedy =
      gen.generate(arena, prompts, {.max_new_tokens = 10, .greedy = true}).tokens.values().to_vector<std::int64_t>();
  for (const infer::GenerateOptions& o :
       {infer::GenerateOptions{.max_new_tokens = 10, .top_k = 1, .logprobs = true},
        infer::GenerateOptions{.max_new_tokens = 10, .top_p = 1e-6, .logprobs = true}}) {
    const auto out = gen.generate(arena, prompts, o);
    CHECK(out.tokens.values().to_vector<std::int64_t>() == greedy);
    for (const float lp : out.logprobs.values().to_vector<float>()) CHECK(lp == 0.0f);  // one token kept
  }
}

TEST_CASE("generator: the repetition penalty divides seen positive logits and multiplies seen negative ones",
          "[infer][decoder]") {
  Generation g(gpt_config(), 1);
  auto& [ctx, config, model, gen, arena] = g;
  const std::vector<std::int64_t> prompt = random_tokens(6, config.vocab_size, 12);
  const double penalty = 3.0;
  const auto out = gen.generate(arena, std::vector<std::vector<std::int64_t>>{prompt},
                                {.max_new_tokens = 12, .repetition_penalty = penalty, .greedy = true});
  const auto got = out.tokens.item(0).to_vector<std::int64_t>();
  auto seq = prompt;
  bool changed = false;  // the penalty must have mattered somewhere
  for (const std::int64_t token : got) {
    auto logits = last_logits(*model, ctx, seq).to_vector<float>();
    const std::int64_t plain = std::max_element(logits.begin(), logits.end()) - logits.begin();
    for (const std::int64_t t : std::set<std::int64_t>(seq.begin(), seq.end()))
      logits[t] = logits[t] < 0 ? logits[t] * penalty : logits[t] / penalty;
    CHECK(token == std::max_element(logits.begin(), logits.end()) - logits.begin());
    changed = changed || token != plain;
    seq.push_back(token);
  }
  CHECK(changed);
}
