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

#include "utf8.h"

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
  const std::u32string chars = utf8::decode(vocab_it->second);
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
  for (const char32_t ch : utf8::decode(text)) {
    const auto it = ids.find(ch);
    if (it == ids.end()) {
      std::string shown;
      utf8::append(shown, ch);
      usage("the prompt's character '" + shown + "' is not in the model's vocabulary");
    }
    prompt.push_back(it->second);
  }
  // The cache holds max_seq_len positions: more new tokens than fit after the
  // prompt are clamped (the Generator itself refuses them).
  infer::GenerateOptions options = flags.options;
  const std::int64_t room = c.max_seq_len - static_cast<std::int64_t>(prompt.size());
  if (room < 1) usage("the prompt is longer than the model's context of " + std::to_string(c.max_seq_len));
  if (options.max_new_tokens > room) {
    std::printf("(--max-new %lld clamped to %lld: the model's context is %lld positions)\n",
                static_cast<long long>(options.max_new_tokens), static_cast<long long>(room),
                static_cast<long long>(c.max_seq_len));
    options.max_new_tokens = room;
  }
  const std::vector<std::vector<std::int64_t>> prompts(static_cast<std::size_t>(flags.batch), prompt);

  infer::Generator generator(model, flags.batch, flags.cache_dtype);
  forge::Arena arena(ctx);
  for (int run = 0; run < flags.runs; ++run) {
    const infer::Generated out = generator.generate(arena, prompts, options);
    const infer::GenerateStats& s = generator.last_stats();
    if (run == 0) {
      for (std::int64_t b = 0; b < out.tokens.count(); ++b) {
        std::string generated;
        for (const std::int64_t t : out.tokens.item(b).to_vector<std::int64_t>()) utf8::append(generated, chars[t]);
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
