// Greedy decoding with a KV cache, forge beside libtorch 1.13 eager (Debian's
// libtorch-dev), one configuration per process so that each peak RSS is its
// own. The model is a GPT-style decoder (d_model 256, 4 layers, 4 heads,
// vocab 256, learned positions, LayerNorm, GELU with the tanh approximation,
// tied head); both frameworks run the same weights, read from one safetensors
// file that `--prepare` writes.
//
// A run prefills a 16-token prompt per sequence, takes the greedy token from
// its last position, then decodes 127 more steps of one token per sequence
// (128 new tokens). Prefill tokens/s counts the prompt tokens over the prefill
// time; decode tokens/s counts the decode steps' tokens (batch x 127) over the
// decode time. Medians of --repeats runs after one warm-up run.
//
// forge: infer::Decoder loaded from the file (mapped, zero-copy; with --format,
// its projections packed as bf16 / q8_0 / q4_0), forward(tokens, KvCache), an
// exec scope and no grad per step, argmax of the last logits.
// libtorch: the model written with plain tensor ops under c10::InferenceMode,
// as a libtorch user writes it, with the cache either preallocated per layer
// and written through narrow(...).copy_() ("index"), or grown by torch::cat
// ("cat"). Same thread count for both (ATen's pool and OpenBLAS's).
//
//   build/release/benchmarks/decode_compare --prepare DIR
//   build/release/benchmarks/decode_compare --weights DIR/decoder_f32.safetensors --framework forge|torch
//       [--format f32|bf16|q8_0|q4_0] [--cache index|cat] [--batch 1] [--threads 2] [--repeats 7]
//   build/release/benchmarks/decode_compare --weights DIR/decoder_f32.safetensors --check   (same greedy tokens?)
//   scripts/bench-decode   (every configuration, a table)

#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/infer/decoder.h"
#include "forge/infer/kv_cache.h"
#include "forge/infer/quant.h"
#include "median.h"
#include "process_memory.h"

namespace {

namespace infer = forge::infer;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kVocab = 256, kModel = 256, kLayers = 4, kHeads = 4, kMaxLen = 256;
constexpr std::int64_t kPrompt = 16, kNewTokens = 128;

infer::DecoderConfig bench_config() {
  return {.vocab_size = kVocab,
          .d_model = kModel,
          .n_layers = kLayers,
          .n_heads = kHeads,
          .max_seq_len = kMaxLen,
          .norm = infer::NormKind::layer_norm,
          .positions = infer::PositionKind::learned,
          .mlp = infer::MlpKind::gelu,
          .tied_head = true,
          .bias = true};
}

struct Options {
  std::string framework = "forge", format = "f32", cache = "index", weights, prepare;
  std::int64_t batch = 1;
  int threads = 2;
  int repeats = 7;
  bool check = false;
};

// The prompts: batch rows of kPrompt tokens, different per row.
std::vector<std::int64_t> prompt_tokens(std::int64_t batch) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(batch * kPrompt));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::int64_t>((i * 37 + 11) % kVocab);
  return p;
}

// What one run measured, and the greedy tokens it produced ([batch, kNewTokens], row-major).
struct RunResult {
  double prefill_s = 0, decode_s = 0;
  std::vector<std::int64_t> tokens;
};

// ---- forge ----

class ForgeRunner {
 public:
  ForgeRunner(forge::ExecContext& ctx, const std::string& weights, const std::string& format, std::int64_t batch)
      : ctx_(ctx),
        model_(format == "f32" ? infer::Decoder::load(ctx, weights)
                               : infer::Decoder::load(ctx, weights, infer::parse_weight_format(format))),
        cache_(ctx, model_->config(), batch, kMaxLen),
        batch_(batch) {}

  RunResult run() {
    forge::autograd::NoGradGuard no_grad;
    cache_.reset();
    RunResult r;
    r.tokens.resize(static_cast<std::size_t>(batch_ * kNewTokens));
    std::vector<std::int64_t> next;
    auto t0 = Clock::now();
    {
      auto scope = ctx_.open_exec_scope();
      const forge::Tensor logits = model_->forward(ctx_.from_vector(prompt_tokens(batch_), {batch_, kPrompt}), cache_);
      next = forge::argmax(logits.select(1, kPrompt - 1), -1).to_vector<std::int64_t>();
    }
    r.prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    t0 = Clock::now();
    for (std::int64_t step = 0; step < kNewTokens; ++step) {
      for (std::int64_t b = 0; b < batch_; ++b) r.tokens[static_cast<std::size_t>(b * kNewTokens + step)] = next[b];
      if (step + 1 == kNewTokens) break;
      auto scope = ctx_.open_exec_scope();  // the step's transients go back to the pool together
      const forge::Tensor logits = model_->forward(ctx_.from_vector(next, {batch_, 1}), cache_);
      next = forge::argmax(logits.select(1, 0), -1).to_vector<std::int64_t>();
    }
    r.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  }

  // The logits of the prompts' prefill, [batch, kPrompt, vocab], as values.
  std::vector<float> prefill_logits() {
    forge::autograd::NoGradGuard no_grad;
    cache_.reset();
    auto scope = ctx_.open_exec_scope();
    return model_->forward(ctx_.from_vector(prompt_tokens(batch_), {batch_, kPrompt}), cache_).to_vector<float>();
  }

  std::size_t mapped_bytes() const { return model_->mapped_bytes(); }

 private:
  forge::ExecContext& ctx_;
  std::shared_ptr<infer::Decoder> model_;
  infer::KvCache cache_;
  std::int64_t batch_;
};

// ---- libtorch: the same model in plain tensor ops ----

torch::Tensor to_torch(const forge::Tensor& t) {
  const forge::Tensor f = t.to(forge::DType::f32).contiguous();
  std::vector<std::int64_t> shape(f.shape().begin(), f.shape().end());
  return torch::from_blob(const_cast<float*>(f.data_ptr<float>()), shape, torch::kFloat32).clone();
}

class TorchRunner {
 public:
  TorchRunner(forge::ExecContext& ctx, const std::string& weights, bool cat_cache, std::int64_t batch)
      : cat_cache_(cat_cache), batch_(batch) {
    const forge::io::SafetensorsContents file = forge::io::read_safetensors(ctx, weights);
    config_ = infer::DecoderConfig::from_metadata(file.metadata);
    const auto get = [&](const std::string& name) {
      const auto it = file.tensors.find(name);
      if (it == file.tensors.end()) throw std::runtime_error("decode_compare: no tensor " + name + " in " + weights);
      const torch::Tensor t = to_torch(it->second);
      weight_bytes_ += t.nbytes();
      return t;
    };
    wte_ = get("tok_embed.weight");
    wpe_ = get("pos_embed.weight");
    for (std::int64_t l = 0; l < config_.n_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      Layer layer;
      layer.ln1_w = get(p + "attn_norm.weight");
      layer.ln1_b = get(p + "attn_norm.bias");
      // One fused projection for q, k and v, as a libtorch user writes GPT-2.
      layer.qkv_w = torch::cat({get(p + "attn.q.weight"), get(p + "attn.k.weight"), get(p + "attn.v.weight")});
      layer.qkv_b = torch::cat({get(p + "attn.q.bias"), get(p + "attn.k.bias"), get(p + "attn.v.bias")});
      layer.o_w = get(p + "attn.o.weight");
      layer.o_b = get(p + "attn.o.bias");
      layer.ln2_w = get(p + "mlp_norm.weight");
      layer.ln2_b = get(p + "mlp_norm.bias");
      layer.fc1_w = get(p + "mlp.up.weight");
      layer.fc1_b = get(p + "mlp.up.bias");
      layer.fc2_w = get(p + "mlp.down.weight");
      layer.fc2_b = get(p + "mlp.down.bias");
      layers_.push_back(std::move(layer));
    }
    lnf_w_ = get("norm.weight");
    lnf_b_ = get("norm.bias");
    head_dim_ = config_.d_model / config_.n_heads;
    for (Layer& layer : layers_) {
      layer.k_cache = torch::zeros({batch_, config_.n_heads, kMaxLen, head_dim_});
      layer.v_cache = torch::zeros({batch_, config_.n_heads, kMaxLen, head_dim_});
    }
  }

  RunResult run() {
    c10::InferenceMode guard;
    RunResult r;
    r.tokens.resize(static_cast<std::size_t>(batch_ * kNewTokens));
    auto t0 = Clock::now();
    torch::Tensor prompt = torch::tensor(prompt_tokens(batch_)).view({batch_, kPrompt});
    torch::Tensor next = forward(prompt, 0).select(1, kPrompt - 1).argmax(-1);
    std::vector<std::int64_t> host(next.data_ptr<std::int64_t>(), next.data_ptr<std::int64_t>() + batch_);
    r.prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    t0 = Clock::now();
    for (std::int64_t step = 0; step < kNewTokens; ++step) {
      for (std::int64_t b = 0; b < batch_; ++b) r.tokens[static_cast<std::size_t>(b * kNewTokens + step)] = host[b];
      if (step + 1 == kNewTokens) break;
      next = forward(next.view({batch_, 1}), kPrompt + step).select(1, 0).argmax(-1);
      std::copy(next.data_ptr<std::int64_t>(), next.data_ptr<std::int64_t>() + batch_, host.begin());
    }
    r.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  }

  std::vector<float> prefill_logits() {
    c10::InferenceMode guard;
    const torch::Tensor logits = forward(torch::tensor(prompt_tokens(batch_)).view({batch_, kPrompt}), 0).contiguous();
    return {logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel()};
  }

  std::size_t weight_bytes() const { return weight_bytes_; }

 private:
  struct Layer {
    torch::Tensor ln1_w, ln1_b, qkv_w, qkv_b, o_w, o_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
    torch::Tensor k_cache, v_cache;  // "index": [B, H, kMaxLen, D] preallocated; "cat": [B, H, len, D]
  };

  // tokens [B, T] at positions [pos, pos + T) -> logits [B, T, V].
  torch::Tensor forward(const torch::Tensor& tokens, std::int64_t pos) {
    const std::int64_t b = tokens.size(0), t = tokens.size(1), d = config_.d_model, h = config_.n_heads;
    torch::Tensor x = wte_.index_select(0, tokens.reshape({-1})).view({b, t, d}) + wpe_.narrow(0, pos, t);
    // Bottom-right causal mask: query i (at position pos + i) sees keys j <= pos + i.
    torch::Tensor mask;
    if (t > 1) mask = torch::ones({t, pos + t}, torch::kBool).triu(pos + 1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    for (Layer& layer : layers_) {
      torch::Tensor a = torch::layer_norm(x, {d}, layer.ln1_w, layer.ln1_b, config_.norm_eps);
      const std::vector<torch::Tensor> qkv = torch::linear(a, layer.qkv_w, layer.qkv_b).split(d, -1);
      const torch::Tensor q = qkv[0].view({b, t, h, head_dim_}).transpose(1, 2);
      const torch::Tensor k = qkv[1].view({b, t, h, head_dim_}).transpose(1, 2);
      const torch::Tensor v = qkv[2].view({b, t, h, head_dim_}).transpose(1, 2);
      torch::Tensor keys, values;
      if (cat_cache_) {
        layer.k_cache = pos == 0 ? k : torch::cat({layer.k_cache, k}, 2);
        layer.v_cache = pos == 0 ? v : torch::cat({layer.v_cache, v}, 2);
        keys = layer.k_cache;
        values = layer.v_cache;
      } else {
        layer.k_cache.narrow(2, pos, t).copy_(k);
        layer.v_cache.narrow(2, pos, t).copy_(v);
        keys = layer.k_cache.narrow(2, 0, pos + t);
        values = layer.v_cache.narrow(2, 0, pos + t);
      }
      torch::Tensor scores = torch::matmul(q, keys.transpose(-2, -1)).mul_(scale);
      if (mask.defined()) scores.masked_fill_(mask, -std::numeric_limits<float>::infinity());
      const torch::Tensor y = torch::matmul(scores.softmax(-1), values).transpose(1, 2).reshape({b, t, d});
      x = x + torch::linear(y, layer.o_w, layer.o_b);
      a = torch::layer_norm(x, {d}, layer.ln2_w, layer.ln2_b, config_.norm_eps);
      x = x + torch::linear(torch::gelu(torch::linear(a, layer.fc1_w, layer.fc1_b), "tanh"), layer.fc2_w, layer.fc2_b);
    }
    x = torch::layer_norm(x, {d}, lnf_w_, lnf_b_, config_.norm_eps);
    return torch::linear(x, wte_);
  }

  bool cat_cache_;
  std::int64_t batch_, head_dim_ = 0;
  infer::DecoderConfig config_;
  torch::Tensor wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Layer> layers_;
  std::size_t weight_bytes_ = 0;
};

// ---- the process ----

// Writes the benchmark's model (fresh weights from a fixed seed) as
// DIR/decoder_f32.safetensors, and the same converted to each weight format.
void prepare(const std::string& dir) {
  std::filesystem::create_directories(dir);
  forge::ExecContext ctx({.threads = 1, .seed = 7});
  // The position table drawn from N(0, 1) (nn::Embedding's init) rather than
  // the decoder's N(0, 0.02): with a random tied head, the input token's own
  // embedding would otherwise dominate the last hidden state and greedy
  // decoding would repeat one token; now the choice moves with the position
  // and the context, so a comparison of greedy tokens means something.
  forge::StateDict weights = infer::Decoder(ctx, bench_config()).state_dict();
  weights["pos_embed.weight"] = ctx.randn(weights.at("pos_embed.weight").shape());
  const std::string f32 = dir + "/decoder_f32.safetensors";
  infer::Decoder::from_state_dict(ctx, bench_config(), weights)->save(f32);
  std::printf("wrote %s\n", f32.c_str());
  for (const infer::WeightFormat format :
       {infer::WeightFormat::bf16, infer::WeightFormat::q8_0, infer::WeightFormat::q4_0}) {
    const std::string out = dir + "/decoder_" + infer::format_name(format) + ".safetensors";
    forge::quantize(f32, out, format);
    std::printf("wrote %s\n", out.c_str());
  }
}

// forge f32 and libtorch (both cache variants) from the same file, batch
// o.batch: the greedy tokens must match, and the prefill logits agree.
int check(const Options& o) {
  forge::ExecContext ctx({.threads = o.threads, .seed = 0});
  ForgeRunner f(ctx, o.weights, "f32", o.batch);
  const RunResult fr = f.run();
  const std::vector<float> fl = f.prefill_logits();
  int status = 0;
  for (const bool cat : {false, true}) {
    TorchRunner t(ctx, o.weights, cat, o.batch);
    const RunResult tr = t.run();
    const std::vector<float> tl = t.prefill_logits();
    double max_diff = 0;
    for (std::size_t i = 0; i < fl.size(); ++i) max_diff = std::max(max_diff, std::abs(double{fl[i]} - tl[i]));
    std::size_t first_mismatch = fr.tokens.size();
    for (std::size_t i = 0; i < fr.tokens.size(); ++i)
      if (fr.tokens[i] != tr.tokens[i]) {
        first_mismatch = i;
        break;
      }
    const bool same = first_mismatch == fr.tokens.size();
    std::printf("check batch %lld, libtorch cache %s: greedy tokens %s (%lld x %lld); prefill logits max |diff| %.3g\n",
                static_cast<long long>(o.batch), cat ? "cat" : "index",
                same ? "identical" : ("DIFFER from index " + std::to_string(first_mismatch)).c_str(),
                static_cast<long long>(o.batch), static_cast<long long>(kNewTokens), max_diff);
    if (!same) status = 1;
  }
  std::vector<std::int64_t> distinct = fr.tokens;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::printf("%zu distinct tokens generated; sequence 0 starts", distinct.size());
  for (std::int64_t i = 0; i < 16; ++i)
    std::printf(" %lld", static_cast<long long>(fr.tokens[static_cast<std::size_t>(i)]));
  std::printf("\n");
  return status;
}

int bench(const Options& o) {
  const double startup_rss = current_rss_mb();
  forge::ExecContext ctx({.threads = o.threads, .seed = 0});
  std::function<RunResult()> run;
  std::size_t weight_bytes = 0;
  std::string variant;
  std::unique_ptr<ForgeRunner> forge_runner;
  std::unique_ptr<TorchRunner> torch_runner;
  if (o.framework == "forge") {
    forge_runner = std::make_unique<ForgeRunner>(ctx, o.weights, o.format, o.batch);
    run = [&] { return forge_runner->run(); };
    weight_bytes = forge_runner->mapped_bytes();
    variant = "forge " + o.format;
  } else {
    torch_runner = std::make_unique<TorchRunner>(ctx, o.weights, o.cache == "cat", o.batch);
    run = [&] { return torch_runner->run(); };
    weight_bytes = torch_runner->weight_bytes();
    variant = "libtorch " + o.cache;
  }
  run();  // warm-up
  std::vector<double> prefill, decode;
  for (int i = 0; i < o.repeats; ++i) {
    const RunResult r = run();
    prefill.push_back(static_cast<double>(o.batch * kPrompt) / r.prefill_s);
    decode.push_back(static_cast<double>(o.batch * (kNewTokens - 1)) / r.decode_s);
  }
  const double peak = peak_rss_mb();
  // One parseable line: scripts/bench-decode builds the table from these.
  std::printf(
      "%-15s batch %2lld  %d threads  decode %9.0f tokens/s  prefill %9.0f tokens/s  (medians of %d)  "
      "peak RSS %6.1f MB (%5.1f above startup)  weights %s %.2f MB\n",
      variant.c_str(), static_cast<long long>(o.batch), o.threads, median(decode), median(prefill), o.repeats, peak,
      peak - startup_rss, o.framework == "forge" ? "mapped" : "in memory",
      static_cast<double>(weight_bytes) / (1024.0 * 1024.0));
  return 0;
}

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "%s\nusage: decode_compare --prepare DIR\n"
               "       decode_compare --weights FILE [--framework forge|torch] [--format f32|bf16|q8_0|q4_0]\n"
               "                      [--cache index|cat] [--batch N] [--threads N] [--repeats N] [--check]\n",
               message);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--check") {
      o.check = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--framework")
      o.framework = value;
    else if (flag == "--format")
      o.format = value;
    else if (flag == "--cache")
      o.cache = value;
    else if (flag == "--weights")
      o.weights = value;
    else if (flag == "--prepare")
      o.prepare = value;
    else if (flag == "--batch")
      o.batch = std::stoll(value);
    else if (flag == "--threads")
      o.threads = std::stoi(value);
    else if (flag == "--repeats")
      o.repeats = std::stoi(value);
    else
      usage(("unknown flag " + flag).c_str());
  }
  if (!o.prepare.empty()) {
    prepare(o.prepare);
    return 0;
  }
  if (o.weights.empty()) usage("--weights is required (write the files with --prepare DIR)");
  if ((o.framework != "forge" && o.framework != "torch") || (o.cache != "index" && o.cache != "cat") || o.batch < 1 ||
      o.threads < 1 || o.repeats < 1)
    usage("bad --framework, --cache, --batch, --threads or --repeats");
  at::set_num_threads(o.threads);
  // libtorch 1.13 reaches OpenBLAS through libblas.so.3; its pool is sized apart from ATen's.
  if (auto* set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(o.threads);
  return o.check ? check(o) : bench(o);
} catch (const std::exception& e) {
  std::fprintf(stderr, "decode_compare: %s\n", e.what());
  return 1;
}
