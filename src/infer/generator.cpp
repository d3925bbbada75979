// Generator: policy in include/forge/infer/generator.h.
//
// One call: validate everything (nothing is computed for a bad request),
// reset the cache, prefill each prompt into its own cache row (only the last
// position's logits are computed), then decode all sequences together, one
// token each per step. A sequence that hit a stop token keeps stepping with
// the others (its outputs are dropped); the loop ends when every sequence is
// done or max_new_tokens is reached. Each step runs inside an ExecScope under
// no grad, so every transient goes back to the pool before the next step and
// a warm pool serves the step without a system allocation. The chosen tokens
// are read back on the host (they are the next step's input anyway) and
// written to the arena at the end.
//
// Sampling, on the step's [B, V] logits, in HF's order: repetition penalty
// (over the prompt and the tokens generated so far: a positive logit divided
// by it, a negative one multiplied), then greedy argmax, or temperature,
// top-k (logits below the k-th largest dropped), top-p (the smallest set of
// most likely tokens whose probability reaches top_p kept; ties with the last
// kept logit kept too) and a draw from the softmax (multinomial, the
// context's generator; a seed reseeds it). The log-probability reported is
// log_softmax of those processed logits at the chosen token.

#include "forge/infer/generator.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "forge/autograd.h"
#include "forge/exec_scope.h"
#include "forge/ops.h"
#include "forge/ops/sort.h"

namespace forge::infer {
namespace {

constexpr const char* kOp = "Generator.generate";

// The generator's cache: max_batch rows of max_len (0: the model's max_seq_len) positions.
KvCache make_cache(const std::shared_ptr<Decoder>& model, std::int64_t max_batch, DType dtype, std::int64_t max_len) {
  FORGE_CHECK(model != nullptr, invalid_argument, "Generator", "the model is null");
  FORGE_CHECK(max_batch > 0, invalid_argument, "Generator", "max_batch must be positive, got ", max_batch);
  FORGE_CHECK(max_len >= 0, invalid_argument, "Generator", "max_len must be >= 0 (0: max_seq_len), got ", max_len);
  return KvCache(model->context(), model->config(), max_batch, max_len == 0 ? model->config().max_seq_len : max_len,
                 dtype);
}

void validate(std::span<const std::vector<std::int64_t>> prompts, const GenerateOptions& o, std::int64_t max_batch,
              std::int64_t max_len, std::int64_t vocab) {
  const auto count = static_cast<std::int64_t>(prompts.size());
  FORGE_CHECK(count > 0, invalid_argument, kOp, "no prompts");
  FORGE_CHECK(count <= max_batch, invalid_argument, kOp, count, " prompts exceed the generator's max_batch ",
              max_batch);
  FORGE_CHECK(o.max_new_tokens >= 0, invalid_argument, kOp, "max_new_tokens must be >= 0, got ", o.max_new_tokens);
  FORGE_CHECK(o.greedy || (o.temperature > 0 && std::isfinite(o.temperature)), invalid_argument, kOp,
              "temperature must be positive and finite, got ", o.temperature, " (or set greedy)");
  FORGE_CHECK(o.top_k >= 0, invalid_argument, kOp, "top_k must be >= 0 (0: off), got ", o.top_k);
  FORGE_CHECK(o.top_p > 0 && o.top_p <= 1, invalid_argument, kOp, "top_p must be in (0, 1], got ", o.top_p);
  FORGE_CHECK(o.repetition_penalty > 0 && std::isfinite(o.repetition_penalty), invalid_argument, kOp,
              "repetition_penalty must be positive and finite, got ", o.repetition_penalty);
  for (const std::int64_t s : o.stop_tokens)
    FORGE_CHECK(s >= 0 && s < vocab, out_of_range, kOp, "stop token ", s, " is outside the vocabulary [0, ", vocab,
                ")");
  for (std::int64_t b = 0; b < count; ++b) {
    const auto& p = prompts[static_cast<std::size_t>(b)];
    const auto len = static_cast<std::int64_t>(p.size());
    FORGE_CHECK(len > 0, invalid_argument, kOp, "prompt ", b, " is empty");
    for (std::size_t i = 0; i < p.size(); ++i)
      FORGE_CHECK(p[i] >= 0 && p[i] < vocab, invalid_argument, kOp, "prompt ", b, " has token ", p[i], " at position ",
                  i, ", outside the vocabulary [0, ", vocab, ")");
    FORGE_CHECK(o.max_new_tokens <= max_len - len, invalid_argument, kOp, "prompt ", b, " of ", len,
                " tokens plus max_new_tokens ", o.max_new_tokens, " exceeds the cache's ", max_len, " positions");
  }
}

// Applies temperature, top-k and top-p to `logits` [B, V] and draws a token per row: i64 [B].
Tensor draw(Tensor& logits, const GenerateOptions& o) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (o.temperature != 1.0) logits = div(logits, o.temperature);
  const std::int64_t V = logits.size(1);
  if (o.top_k > 0 && o.top_k < V) {
    const auto [values, indices] = topk(logits, o.top_k, 1);
    logits = masked_fill(logits, lt(logits, values.narrow(1, o.top_k - 1, 1)), neg_inf);
  }
  if (o.top_p < 1.0) {
    const auto [sorted, indices] = sort(logits, 1, true);
    const Tensor probs = softmax(sorted, 1);
    const Tensor before = sub(cumsum(probs, 1), probs);  // probability of the more likely tokens
    const Tensor kept = sum(lt(before, o.top_p).to(DType::i64), {1}, true);
    logits = masked_fill(logits, lt(logits, gather(sorted, 1, sub(kept, 1))), neg_inf);
  }
  return multinomial(softmax(logits, 1), 1).squeeze(1);
}

struct Choice {
  Tensor tokens;    // i64 [B]
  Tensor logprobs;  // f32 [B], with options.logprobs only
};

Choice choose(const Tensor& raw, const Tensor& seen, const GenerateOptions& o) {
  Tensor logits = raw;
  if (seen.defined()) {
    const double p = o.repetition_penalty;
    logits = where(seen, where(lt(logits, 0.0), mul(logits, p), div(logits, p)), logits);
  }
  const Tensor chosen = o.greedy ? argmax(logits, 1) : draw(logits, o);
  if (!o.logprobs) return {chosen, Tensor()};  // a [B, V] log_softmax per step only when asked for
  return {chosen, gather(log_softmax(logits, 1), 1, chosen.unsqueeze(1)).squeeze(1)};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Generator(std::shared_ptr<Decoder> model, std::int64_t max_batch, DType cache_dtype, std::int64_t max_len)
    : model_(std::move(model)), cache_(make_cache(model_, max_batch, cache_dtype, max_len)) {}

Generated Generator::generate(Arena& arena, std::span<const std::vector<std::int64_t>> prompts,
                              const GenerateOptions& options) try {
  ArenaCall call(kOp, &arena, {});
  FORGE_CHECK(&call.runtime() == &model_->context().runtime() && arena.describe().device.is_cpu(), device, kOp,
              "the arena (", arena.describe().str(), ") must be a host arena of the model's context");
  const DecoderConfig& c = model_->config();
  validate(prompts, options, cache_.batch(), cache_.max_len(), c.vocab_size);
  ExecContext& ctx = model_->context();
  const auto B = static_cast<std::int64_t>(prompts.size());
  const std::int64_t V = c.vocab_size;
  stats_ = {};
  if (options.seed) ctx.manual_seed(*options.seed);
  cache_.reset();
  autograd::NoGradGuard no_grad;

  std::vector<std::vector<std::int64_t>> tokens(static_cast<std::size_t>(B));
  std::vector<std::vector<float>> logprobs(static_cast<std::size_t>(B));
  std::vector<char> done(static_cast<std::size_t>(B), 0);
  for (auto& t : tokens) t.reserve(static_cast<std::size_t>(options.max_new_tokens));
  for (auto& l : logprobs) l.reserve(options.logprobs ? static_cast<std::size_t>(options.max_new_tokens) : 0);

  Tensor seen;  // bool [B, V]: the tokens each sequence has had, for the repetition penalty
  if (options.repetition_penalty != 1.0) {
    seen = ctx.zeros(Shape{B, V}, DType::boolean);
    bool* s = seen.data_ptr<bool>();
    for (std::int64_t b = 0; b < B; ++b)
      for (const std::int64_t t : prompts[static_cast<std::size_t>(b)]) s[b * V + t] = true;
  }

  auto t0 = std::chrono::steady_clock::now();
  Tensor next = ctx.empty(Shape{B, V});  // the logits of each sequence's next token
  for (std::int64_t b = 0; b < B; ++b) {
    ExecScope scope = ctx.open_exec_scope();
    const auto& p = prompts[static_cast<std::size_t>(b)];
    const Tensor prompt = ctx.from_vector(p, Shape{1, static_cast<std::int64_t>(p.size())});
    next.narrow(0, b, 1).copy_(model_->next_logits(prompt, cache_, b));
    stats_.prompt_tokens += static_cast<std::int64_t>(p.size());
  }
  stats_.prefill_seconds = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  std::uint64_t allocations_after_first = 0;
  for (std::int64_t step = 0; step < options.max_new_tokens; ++step) {
    ExecScope scope = ctx.open_exec_scope();
    const Choice choice = choose(next, seen, options);
    const std::int64_t* chosen = choice.tokens.data_ptr<std::int64_t>();
    const float* lp = options.logprobs ? choice.logprobs.data_ptr<float>() : nullptr;
    bool all_done = true;
    for (std::int64_t b = 0; b < B; ++b) {
      if (done[static_cast<std::size_t>(b)]) continue;
      const std::int64_t t = chosen[b];
      tokens[static_cast<std::size_t>(b)].push_back(t);
      if (options.logprobs) logprobs[static_cast<std::size_t>(b)].push_back(lp[b]);
      if (seen.defined()) seen.data_ptr<bool>()[b * V + t] = true;
      for (const std::int64_t s : options.stop_tokens) done[static_cast<std::size_t>(b)] |= static_cast<char>(s == t);
      all_done = all_done && done[static_cast<std::size_t>(b)];
    }
    if (all_done || step + 1 == options.max_new_tokens) break;
    Tensor input = ctx.empty(Shape{B, 1}, DType::i64);
    std::copy(chosen, chosen + B, input.data_ptr<std::int64_t>());
    next = model_->next_logits(input, cache_, 0);
    ++stats_.decode_steps;
    if (stats_.decode_steps == 1) allocations_after_first = ctx.stats().system_allocations;
  }
  if (stats_.decode_steps > 1)
    stats_.decode_system_allocations = ctx.stats().system_allocations - allocations_after_first;
  stats_.decode_seconds = seconds_since(t0);

  std::int64_t total = 0;
  for (const auto& t : tokens) total += static_cast<std::int64_t>(t.size());
  stats_.generated_tokens = total;
  call.reserve(ArenaCall::bytes_for(Shape{total}, DType::i64) + ArenaCall::bytes_for(Shape{B + 1}, DType::i64) +
               (options.logprobs ? ArenaCall::bytes_for(Shape{total}, DType::f32) : 0));
  Tensor values = call.allocate(Shape{total}, DType::i64);
  Tensor offsets = call.allocate(Shape{B + 1}, DType::i64);
  Tensor lp_values = options.logprobs ? call.allocate(Shape{total}, DType::f32) : Tensor();
  std::int64_t* v = values.data_ptr<std::int64_t>();
  std::int64_t* off = offsets.data_ptr<std::int64_t>();
  float* lpv = options.logprobs ? lp_values.data_ptr<float>() : nullptr;
  off[0] = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& t = tokens[static_cast<std::size_t>(b)];
    std::copy(t.begin(), t.end(), v + off[b]);
    if (lpv != nullptr)
      std::copy(logprobs[static_cast<std::size_t>(b)].begin(), logprobs[static_cast<std::size_t>(b)].end(),
                lpv + off[b]);
    off[b + 1] = off[b] + static_cast<std::int64_t>(t.size());
  }
  Generated out{TapeView(values, offsets), options.logprobs ? TapeView(lp_values, offsets) : TapeView()};
  call.commit();
  return out;
}
FORGE_CATCH_OOM("Generator.generate")

}  // namespace forge::infer
