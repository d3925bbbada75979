// Generates text with a decoder checkpoint: the one examples/train_char_gpt
// writes (its character vocabulary in the metadata key "forge.vocab": the
// characters, UTF-8, in id order), loaded mapped and zero-copy, or packed on
// load as bf16, q8_0 or q4_0. Tokenizes the prompt character by character,
// prefills it, decodes with a KvCache, and prints the text, the tokens/s of
// prefill and decode, and the pool's figures. The call runs --runs times: the
// first warms the pool, after which a decode step makes no system allocation.
//
//   build/release/examples/generate --checkpoint char_gpt.safetensors [--prompt "text" | prompt on stdin]
//       [--format f32|bf16|q8_0|q4_0] [--max-new 200] [--temperature 0.8] [--top-k 20] [--top-p 1]
//       [--repetition-penalty 1] [--greedy] [--seed S] [--batch 1] [--cache-dtype f32|f16|bf16]
//       [--runs 2] [--threads 0]

#include <forge/forge.h>
#include <forge/infer/decoder.h>
#include <forge/infer/generator.h>
#include <forge/infer/quant.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace infer = forge::infer;

struct Flags {
  std::string checkpoint;
  std::optional<std::string> prompt;
  std::optional<infer::WeightFormat> format;
  infer::GenerateOptions options{.max_new_tokens = 200, .temperature = 0.8, .top_k = 20};
  std::int64_t batch = 1;
  forge::DType cache_dtype = forge::DType::f32;
  int runs = 2;
  int threads = 0;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "generate: %s\nusage: generate --checkpoint FILE [--prompt TEXT] [--format f32|bf16|q8_0|q4_0]\n"
               "  [--max-new N] [--temperature T] [--top-k K] [--top-p P] [--repetition-penalty R] [--greedy]\n"
               "  [--seed S] [--batch B] [--cache-dtype f32|f16|bf16] [--runs N] [--threads N]\n",
               problem.c_str());
  std::exit(2);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--greedy") {
      f.options.greedy = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    try {
      if (flag == "--checkpoint")
        f.checkpoint = value;
      else if (flag == "--prompt")
        f.prompt = value;
      else if (flag == "--format")
        f.format = infer::parse_weight_format(value);
      else if (flag == "--max-new")
        f.options.max_new_tokens = std::stoll(value);
      else if (flag == "--temperature")
        f.options.temperature = std::stod(value);
      else if (flag == "--top-k")
        f.options.top_k = std::stoll(value);
      else if (flag == "--top-p")
        f.options.top_p = std::stod(value);
      else if (flag == "--repetition-penalty")
        f.options.repetition_penalty = std::stod(value);
      else if (flag == "--seed")
        f.options.seed = std::stoull(value);
      else if (flag == "--batch")
        f.batch = std::stoll(value);
      else if (flag == "--runs")
        f.runs = std::stoi(value);
      else if (flag == "--threads")
        f.threads = std::stoi(value);
      else if (flag == "--cache-dtype") {
        const std::map<std::string, forge::DType> dtypes{
            {"f32", forge::DType::f32}, {"f16", forge::DType::f16}, {"bf16", forge::DType::bf16}};
        if (!dtypes.count(value)) usage("--cache-dtype takes f32, f16 or bf16, not " + value);
        f.cache_dtype = dtypes.at(value);
      } else {
        usage("unknown flag " + flag);
      }
    } catch (const forge::Error& e) {
      usage(e.what());
    } catch (const std::exception&) {
      usage("bad value '" + value + "' for " + flag);
    }
  }
  if (f.checkpoint.empty()) usage("--checkpoint is required");
  if (f.runs < 1) usage("--runs must be at least 1");
  return f;
}

// UTF-8 to code points (a malformed byte becomes U+FFFD), and back.
std::u32string decode_utf8(const std::string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += cp;
    i += n;
  }
  return out;
}

std::string encode_utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) try {
  const Flags flags = parse(argc, argv);
  forge::ExecContext ctx(forge::ExecContextOptions{.threads = flags.threads});
  const auto model = infer::Decoder::load(ctx, flags.checkpoint, flags.format);
  const infer::DecoderConfig& c = model->config();
  const auto vocab_it = model->metadata().find("forge.vocab");
  if (vocab_it == model->metadata().end())
    usage(flags.checkpoint + " has no \"forge.vocab\" metadata (a character vocabulary)");
  const std::u32string chars = decode_utf8(vocab_it->second);
  std::map<char32_t, std::int64_t> ids;
  for (std::size_t i = 0; i < chars.size(); ++i) ids.emplace(chars[i], static_cast<std::int64_t>(i));
  std::printf(
      "model: %lld layers, d_model %lld, %lld heads, vocabulary %lld, max_seq_len %lld; weights %s, %.2f MiB "
      "mapped\n",
      static_cast<long long>(c.n_layers), static_cast<long long>(c.d_model), static_cast<long long>(c.n_heads),
      static_cast<long long>(c.vocab_size), static_cast<long long>(c.max_seq_len),
      model->weight_format() ? infer::format_name(*model->weight_format()) : "f32", mib(model->mapped_bytes()));

  std::string text;
  if (flags.prompt) {
    text = *flags.prompt;
  } else {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::vector<std::int64_t> prompt;
  for (const char32_t ch : decode_utf8(text)) {
    const auto it = ids.find(ch);
    if (it == ids.end()) usage("the prompt's character '" + encode_utf8(ch) + "' is not in the model's vocabulary");
    prompt.push_back(it->second);
  }
  const std::vector<std::vector<std::int64_t>> prompts(static_cast<std::size_t>(flags.batch), prompt);

  infer::Generator generator(model, flags.batch, flags.cache_dtype);
  forge::Arena arena(ctx);
  for (int run = 0; run < flags.runs; ++run) {
    const infer::Generated out = generator.generate(arena, prompts, flags.options);
    const infer::GenerateStats& s = generator.last_stats();
    if (run == 0) {
      for (std::int64_t b = 0; b < out.tokens.count(); ++b) {
        std::string generated;
        for (const std::int64_t t : out.tokens.item(b).to_vector<std::int64_t>()) generated += encode_utf8(chars[t]);
        std::printf("---- sequence %lld ----\n%s%s\n", static_cast<long long>(b), text.c_str(), generated.c_str());
      }
      std::printf("----\n");
    }
    std::printf(
        "run %d: prefill %lld tokens, %.0f tokens/s; decode %lld tokens in %lld steps, %.0f tokens/s; "
        "%llu system allocations in decode steps after the first\n",
        run + 1, static_cast<long long>(s.prompt_tokens),
        s.prefill_seconds > 0 ? static_cast<double>(s.prompt_tokens) / s.prefill_seconds : 0.0,
        static_cast<long long>(s.generated_tokens), static_cast<long long>(s.decode_steps),
        s.decode_seconds > 0 ? static_cast<double>(s.generated_tokens) / s.decode_seconds : 0.0,
        static_cast<unsigned long long>(s.decode_system_allocations));
  }
  const forge::PoolStats p = ctx.stats();
  const forge::ArenaStats a = arena.stats();
  std::printf(
      "pool: %llu acquires, %.2f%% hits, %llu system allocations; peak live %.2f MiB, cached %.2f MiB; "
      "KV cache %.2f MiB (%s, owned); arena %.1f KiB, %llu system allocations\n",
      static_cast<unsigned long long>(p.acquires),
      p.acquires ? 100.0 * static_cast<double>(p.hits) / static_cast<double>(p.acquires) : 0.0,
      static_cast<unsigned long long>(p.system_allocations), mib(p.peak_live_bytes), mib(p.cached_bytes),
      mib(generator.cache().bytes()), std::string(forge::dtype_name(flags.cache_dtype)).c_str(),
      static_cast<double>(a.capacity_bytes) / 1024, static_cast<unsigned long long>(a.system_allocations));
  return 0;
} catch (const forge::Error& e) {
  std::fprintf(stderr, "generate: %s\n", e.what());
  return 1;
}
