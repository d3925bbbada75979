#pragma once
// Generator: prompts in, generated tokens out, into a caller's Arena.
//
// Each prompt is prefilled into its own row of a KvCache the generator owns
// (built once, max_batch rows of max_len positions), then all sequences decode
// together, one token per step. Sampling (greedy, temperature, top-k, top-p,
// repetition penalty as HF applies it) runs through forge ops on the step's
// logits. The generated tokens are written to the arena as a TapeView (one
// offset more than prompts; stop tokens included when hit), and the
// log-probabilities of the chosen tokens beside them on request. Each step
// runs in an ExecScope without grad, so after warm-up a decode step takes all
// its memory from the pool's cache: no system allocation.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "forge/arena.h"
#include "forge/dtype.h"
#include "forge/infer/decoder.h"
#include "forge/infer/kv_cache.h"

namespace forge::infer {

struct GenerateOptions {
  std::int64_t max_new_tokens = 64;
  double temperature = 1.0;  // > 0; ignored when greedy
  std::int64_t top_k = 0;    // 0: off
  double top_p = 1.0;        // in (0, 1]; 1: off
  double repetition_penalty = 1.0;
  std::vector<std::int64_t> stop_tokens = {};
  std::optional<std::uint64_t> seed = std::nullopt;  // reseeds the context's generator before sampling
  bool greedy = false;
  bool logprobs = false;  // log-probabilities of the chosen tokens, after temperature and filters
};

struct Generated {
  TapeView tokens;    // i64, one item per prompt
  TapeView logprobs;  // f32, same offsets; undefined unless options.logprobs
};

// Figures of the last generate() call.
struct GenerateStats {
  std::int64_t prompt_tokens = 0, generated_tokens = 0, decode_steps = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  // The pool's system allocations during the decode steps after the first
  // (0 once the pool has seen a call of the same shape).
  std::uint64_t decode_system_allocations = 0;
};

class Generator {
 public:
  // The cache holds max_batch sequences of max_len positions (0: the model's max_seq_len).
  explicit Generator(std::shared_ptr<Decoder> model, std::int64_t max_batch = 1, DType cache_dtype = DType::f32,
                     std::int64_t max_len = 0);
  Generated generate(Arena& arena, std::span<const std::vector<std::int64_t>> prompts, const GenerateOptions& options);

  const Decoder& model() const noexcept { return *model_; }
  const KvCache& cache() const noexcept { return cache_; }
  std::shared_ptr<Decoder> model_ptr() const noexcept { return model_; }
  std::int64_t max_batch() const noexcept { return cache_.batch(); }
  const GenerateStats& last_stats() const noexcept { return stats_; }

 private:
  std::shared_ptr<Decoder> model_;
  KvCache cache_;
  GenerateStats stats_;
};

}  // namespace forge::infer
