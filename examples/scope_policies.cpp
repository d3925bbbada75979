// What each exec-scope policy costs on a small GPT-style transformer trained
// with one scope per step (docs/MEMORY.md, "Scope policies"): token and
// position embeddings, pre-norm transformer blocks (each one ExecScope::run),
// a final LayerNorm and a linear head, Adam, on random token windows. For
// each policy, and for no scope at all, on a fresh context with the same seed:
// the peak live bytes of a step, the bytes the scope held, the inputs its
// checkpoints kept, the median step time, the recompute time per step and
// the loss after the last step (equal across policies).
//
//   build/release/examples/scope_policies [--steps 8] [--threads 2] [--batch-size 8] [--context 128]
//       [--d-model 128] [--layers 4] [--heads 4]

#include <forge/forge.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Flags {
  int steps = 8;
  int threads = 2;
  std::int64_t batch_size = 8, context = 128, d_model = 128, layers = 4, heads = 4, vocab = 96;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (flag == "--steps")
      f.steps = static_cast<int>(value);
    else if (flag == "--threads")
      f.threads = static_cast<int>(value);
    else if (flag == "--batch-size")
      f.batch_size = value;
    else if (flag == "--context")
      f.context = value;
    else if (flag == "--d-model")
      f.d_model = value;
    else if (flag == "--layers")
      f.layers = value;
    else if (flag == "--heads")
      f.heads = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  if (f.steps < 2 || f.batch_size < 1 || f.context < 2 || f.layers < 1 || f.heads < 1 || f.d_model % f.heads != 0) {
    std::fprintf(stderr, "steps >= 2, positive sizes, --d-model a multiple of --heads\n");
    std::exit(2);
  }
  return f;
}

struct Gpt {
  std::shared_ptr<forge::nn::Embedding> tokens, positions;
  std::vector<std::shared_ptr<forge::nn::TransformerBlock>> blocks;
  std::shared_ptr<forge::nn::LayerNorm> norm;
  std::shared_ptr<forge::nn::Linear> head;
  forge::Tensor position_ids;

  Gpt(forge::ExecContext& ctx, const Flags& f)
      : tokens(std::make_shared<forge::nn::Embedding>(ctx, f.vocab, f.d_model)),
        positions(std::make_shared<forge::nn::Embedding>(ctx, f.context, f.d_model)),
        norm(std::make_shared<forge::nn::LayerNorm>(ctx, f.d_model)),
        head(std::make_shared<forge::nn::Linear>(ctx, f.d_model, f.vocab)),
        position_ids(ctx.arange(0, static_cast<double>(f.context), 1, forge::DType::i64)) {
    for (std::int64_t i = 0; i < f.layers; ++i)
      blocks.push_back(std::make_shared<forge::nn::TransformerBlock>(
          ctx, f.d_model, f.heads, forge::nn::TransformerBlockOptions{.causal = true}));
  }
  std::vector<forge::Tensor> parameters() const {
    std::vector<forge::Tensor> all;
    const std::vector<const forge::nn::Module*> modules = {tokens.get(), positions.get(), norm.get(), head.get()};
    for (const forge::nn::Module* m : modules)
      for (const forge::Tensor& p : m->parameters()) all.push_back(p);
    for (const auto& b : blocks)
      for (const forge::Tensor& p : b->parameters()) all.push_back(p);
    return all;
  }
  // x: [B, T] token ids; y: [B * T] next tokens. Each block is one run():
  // a checkpoint under ScopePolicy::recompute, a plain call otherwise.
  forge::Tensor loss(forge::ExecScope* scope, const forge::Tensor& x, const forge::Tensor& y) {
    forge::Tensor h = tokens->forward(x) + positions->forward(position_ids);
    for (const auto& block : blocks) {
      const auto fn = [&block](const std::vector<forge::Tensor>& in) { return block->forward(in[0]); };
      h = scope ? scope->run(fn, {h}) : fn({h});
    }
    const forge::Tensor logits = head->forward(norm->forward(h));
    return forge::cross_entropy(logits.reshape({-1, logits.size(-1)}), y);
  }
};

struct Row {
  std::size_t peak = 0, held = 0, kept = 0;
  double step_ms = 0, recompute_ms = 0;
  float loss = 0;
};

// Trains `f.steps` steps (the first warms the pool and is not timed) under
// `policy`, or without a scope.
Row measure(const Flags& f, std::optional<forge::ScopePolicy> policy) {
  forge::ExecContext ctx({.threads = f.threads, .seed = 5});
  Gpt model(ctx, f);
  forge::optim::AdamW adamw(model.parameters(), {.lr = 1e-3});
  const forge::Tensor x = ctx.randint(0, f.vocab, {f.batch_size, f.context});
  const forge::Tensor y = ctx.randint(0, f.vocab, {f.batch_size * f.context});
  Row row;
  std::vector<double> times;
  for (int step = 0; step < f.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    std::optional<forge::ExecScope> scope;
    std::size_t saved_window = 0;
    if (policy)
      scope.emplace(ctx.open_exec_scope(*policy));
    else
      saved_window = ctx.pool().open_peak_window();
    forge::Tensor loss = model.loss(scope ? &*scope : nullptr, x, y);
    loss.backward();
    adamw.step();
    adamw.zero_grad();
    row.loss = loss.item<float>();
    loss = forge::Tensor();
    std::size_t peak = 0;
    if (scope) {
      scope->close();
      const forge::ExecScopeStats s = scope->stats();
      peak = s.peak_live_bytes;
      row.held = std::max(row.held, s.bytes);
      row.kept = std::max(row.kept, s.checkpoint_bytes);
      if (step > 0) row.recompute_ms += s.recompute_seconds * 1e3 / (f.steps - 1);
    } else {
      peak = ctx.pool().close_peak_window(saved_window);
    }
    row.peak = std::max(row.peak, peak);
    if (step > 0)
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  row.step_ms = times[times.size() / 2];
  return row;
}

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  std::printf(
      "GPT: %lld layers, d_model %lld, %lld heads, batch %lld x context %lld, vocab %lld; %d threads, %d steps\n",
      (long long)f.layers, (long long)f.d_model, (long long)f.heads, (long long)f.batch_size, (long long)f.context,
      (long long)f.vocab, f.threads, f.steps);
  std::printf("%-10s %14s %10s %12s %10s %14s %10s\n", "policy", "peak live MiB", "held MiB", "kept MiB", "step ms",
              "recompute ms", "loss");
  const std::optional<forge::ScopePolicy> policies[] = {std::nullopt, forge::ScopePolicy::hold,
                                                        forge::ScopePolicy::release, forge::ScopePolicy::recompute};
  for (const auto& policy : policies) {
    const Row r = measure(f, policy);
    std::printf("%-10s %14.1f %10.1f %12.1f %10.1f %14.1f %10.4f\n", policy ? forge::to_string(*policy) : "no scope",
                mib(r.peak), mib(r.held), mib(r.kept), r.step_ms, r.recompute_ms, r.loss);
  }
}
