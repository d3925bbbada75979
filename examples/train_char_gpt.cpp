// Trains a small GPT character by character on English text with forge: the
// fortunes that Debian's `fortunes` package ships (about 2.6 MB of quotations,
// jokes and poems under /usr/share/games/fortunes), split fortune by fortune
// into a training and a held-out validation set.
//
// The model is an infer::Decoder (learned positions, LayerNorm, GELU MLP,
// the head tied to the token embedding), the same class examples/generate
// decodes with. Each step draws random windows of --context characters,
// takes the cross-entropy of the next character at every position, and steps
// AdamW with a warm-up and a cosine learning rate, in one exec scope. Prints a
// progress bar, the validation loss every --eval-every steps beside the
// unigram baseline (the entropy of the characters' frequencies, which any
// model that learns nothing about context stays at), training tokens/s, and
// a sample; writes the train and validation loss curves as an SVG and the
// model as a safetensors checkpoint with its vocabulary in the metadata key
// "forge.vocab" (the characters, UTF-8, in id order).
//
//   build/release/examples/train_char_gpt [--steps 1500] [--batch-size 8] [--context 128]
//       [--d-model 128] [--layers 4] [--heads 4] [--lr 3e-3] [--eval-every 200] [--eval-tokens 16384]
//       [--sample-tokens 200] [--threads 0] [--data DIR] [--out DIR] [--seed S]
//   build/release/examples/generate --checkpoint DIR/char_gpt.safetensors --prompt "..." --max-new 100

#include <forge/forge.h>
#include <forge/infer/decoder.h>
#include <forge/infer/generator.h>
#include <forge/infer/kv_cache.h>
#include <forge/infer/quant.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "progress.h"
#include "utf8.h"

namespace {

namespace fs = std::filesystem;
namespace infer = forge::infer;

constexpr const char* kDefaultDataDir = "/usr/share/games/fortunes";

struct Flags {
  std::int64_t steps = 1500;
  std::int64_t batch_size = 8;
  std::int64_t context = 128;
  std::int64_t d_model = 128;
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  double lr = 3e-3;
  std::int64_t eval_every = 200;
  std::int64_t eval_tokens = 16384;  // validation characters scored at each evaluation
  std::int64_t sample_tokens = 200;  // characters of the sample printed at the end (0: none)
  int threads = 0;
  std::string data = kDefaultDataDir;
  std::string out = "build/char_gpt";
  std::uint64_t seed = 1;
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "%s\nusage: train_char_gpt [--steps N] [--batch-size N] [--context N] [--d-model N] [--layers N]\n"
               "                      [--heads N] [--lr X] [--eval-every N] [--eval-tokens N] [--sample-tokens N]\n"
               "                      [--threads N] [--data DIR] [--out DIR] [--seed N]\n",
               message);
  std::exit(2);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("Trains a character-level GPT on the fortunes.");
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--steps")
      f.steps = std::stoll(value);
    else if (flag == "--batch-size")
      f.batch_size = std::stoll(value);
    else if (flag == "--context")
      f.context = std::stoll(value);
    else if (flag == "--d-model")
      f.d_model = std::stoll(value);
    else if (flag == "--layers")
      f.layers = std::stoll(value);
    else if (flag == "--heads")
      f.heads = std::stoll(value);
    else if (flag == "--lr")
      f.lr = std::stod(value);
    else if (flag == "--eval-every")
      f.eval_every = std::stoll(value);
    else if (flag == "--eval-tokens")
      f.eval_tokens = std::stoll(value);
    else if (flag == "--sample-tokens")
      f.sample_tokens = std::stoll(value);
    else if (flag == "--threads")
      f.threads = std::stoi(value);
    else if (flag == "--data")
      f.data = value;
    else if (flag == "--out")
      f.out = value;
    else if (flag == "--seed")
      f.seed = std::stoull(value);
    else
      usage(("unknown flag " + flag).c_str());
  }
  if (f.steps < 1 || f.batch_size < 1 || f.context < 2 || f.d_model < 1 || f.layers < 1 || f.heads < 1 || !(f.lr > 0) ||
      f.eval_every < 1 || f.eval_tokens < 1 || f.sample_tokens < 0 || f.threads < 0)
    usage("steps, batch size, sizes, lr and eval counts must be positive (context at least 2); threads non-negative");
  if (f.d_model % f.heads != 0) usage("--d-model must be a multiple of --heads");
  return f;
}

// ---- the text: UTF-8 code points, fortune by fortune ----

struct Corpus {
  std::u32string train, validation;
  std::size_t files = 0, fortunes = 0, validation_fortunes = 0;
};

// The fortune files of `dir`: its regular files, in name order, leaving out
// the strfile indexes (*.dat), the *.u8 links to the same files and any
// subdirectory (Debian puts the offensive collection in off/). A file holds
// fortunes separated by lines holding only "%"; every 20th fortune (counted
// over all files) goes to the validation set, each fortune keeps its
// terminating "%\n" so that the model learns where one ends.
Corpus load_fortunes(const std::string& dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const fs::path& p = e.path();
    if (!e.is_regular_file() || e.is_symlink() || p.extension() == ".dat" || p.extension() == ".u8") continue;
    files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  Corpus c;
  c.files = files.size();
  for (const fs::path& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::u32string text = utf8::decode(buffer.str());
    std::size_t begin = 0;
    while (begin < text.size()) {
      std::size_t end = text.find(U"\n%\n", begin);
      end = end == std::u32string::npos ? text.size() : end + 3;
      std::u32string fortune = text.substr(begin, end - begin);
      begin = end;
      if (fortune.find_first_not_of(U" \t\n%") == std::u32string::npos) continue;
      if (fortune.size() < 3 || fortune.compare(fortune.size() - 3, 3, U"\n%\n") != 0) fortune += U"\n%\n";
      const bool held_out = c.fortunes++ % 20 == 19;
      (held_out ? c.validation : c.train) += fortune;
      c.validation_fortunes += held_out ? 1 : 0;
    }
  }
  return c;
}

// The characters of both splits, by code point; a character's id is its rank.
struct Vocabulary {
  std::vector<char32_t> chars;
  std::map<char32_t, std::int64_t> ids;

  explicit Vocabulary(const Corpus& c) {
    for (const std::u32string* s : {&c.train, &c.validation})
      for (char32_t ch : *s) ids.emplace(ch, 0);
    for (auto& [ch, id] : ids) {
      id = static_cast<std::int64_t>(chars.size());
      chars.push_back(ch);
    }
  }
  std::int64_t size() const { return static_cast<std::int64_t>(chars.size()); }
  std::vector<std::int32_t> encode(const std::u32string& text) const {
    std::vector<std::int32_t> out;
    out.reserve(text.size());
    for (char32_t ch : text) out.push_back(static_cast<std::int32_t>(ids.at(ch)));
    return out;
  }
  std::string decode(const std::vector<std::int64_t>& tokens) const {
    std::string out;
    for (std::int64_t t : tokens) utf8::append(out, chars.at(static_cast<std::size_t>(t)));
    return out;
  }
  std::string utf8() const {  // the "forge.vocab" metadata value
    std::string out;
    for (char32_t ch : chars) utf8::append(out, ch);
    return out;
  }
};

// The cross-entropy, in nats, of the validation characters under the training
// set's character frequencies (add-one smoothed): what a model that ignores
// context reaches at best.
double unigram_loss(const std::vector<std::int32_t>& train, const std::vector<std::int32_t>& validation,
                    std::int64_t vocab) {
  std::vector<double> count(static_cast<std::size_t>(vocab), 1.0);
  for (std::int32_t t : train) count[static_cast<std::size_t>(t)] += 1;
  const double total = static_cast<double>(train.size()) + static_cast<double>(vocab);
  double nats = 0;
  for (std::int32_t t : validation) nats -= std::log(count[static_cast<std::size_t>(t)] / total);
  return nats / static_cast<double>(validation.size());
}

// ---- batches ----

// Inputs [B, T] and next-character targets [B, T], i64, from windows of
// `tokens` starting at `starts`.
struct Batch {
  forge::Tensor input, target;
};

Batch make_batch(forge::ExecContext& ctx, const std::vector<std::int32_t>& tokens,
                 const std::vector<std::size_t>& starts, std::int64_t context) {
  const auto t = static_cast<std::size_t>(context);
  std::vector<std::int64_t> input(starts.size() * t), target(starts.size() * t);
  for (std::size_t b = 0; b < starts.size(); ++b)
    for (std::size_t i = 0; i < t; ++i) {
      input[b * t + i] = tokens[starts[b] + i];
      target[b * t + i] = tokens[starts[b] + i + 1];
    }
  const forge::Shape shape{static_cast<std::int64_t>(starts.size()), context};
  return {ctx.from_vector(input, shape), ctx.from_vector(target, shape)};
}

// The mean next-character loss of logits [B, T, V] against targets [B, T].
forge::Tensor next_char_loss(const forge::Tensor& logits, const forge::Tensor& target) {
  return forge::cross_entropy(logits.transpose(1, 2), target);
}

// How far a packed model's held-out loss may rise above f32's (relative), by
// WeightFormat: f32, bf16, q8_0, q4_0.
constexpr double kLossBound[] = {0.0, 0.005, 0.01, 0.05};

// The mean loss over the first `tokens` predictions of the validation text,
// in windows of `context` taken end to end (each character predicted once,
// from the characters before it in its window), `batch` windows at a time.
// With `cached`, the windows go through the decoding path instead (a prefill
// of each window into an empty KvCache), which is how a model packed to
// bf16 / q8_0 / q4_0 on load runs.
double evaluate(infer::Decoder& model, forge::ExecContext& ctx, const std::vector<std::int32_t>& validation,
                std::int64_t context, std::int64_t tokens, std::int64_t batch, bool cached = false) {
  const auto t = static_cast<std::size_t>(context);
  const std::size_t windows =
      std::max<std::size_t>(1, std::min(static_cast<std::size_t>(tokens), validation.size() - 1) / t);
  forge::autograd::NoGradGuard no_grad;
  std::optional<infer::KvCache> cache;
  if (cached) cache.emplace(ctx, model.config(), batch, context);
  double nats = 0;
  for (std::size_t first = 0; first < windows; first += static_cast<std::size_t>(batch)) {
    std::vector<std::size_t> starts;
    for (std::size_t w = first; w < std::min(windows, first + static_cast<std::size_t>(batch)); ++w)
      starts.push_back(w * t);
    auto scope = ctx.open_exec_scope();
    const Batch b = make_batch(ctx, validation, starts, context);
    if (cache) cache->reset();
    const forge::Tensor logits = cache ? model.forward(b.input, *cache, 0) : model.forward(b.input);
    nats += next_char_loss(logits, b.target).item<float>() * static_cast<double>(starts.size());
  }
  return nats / static_cast<double>(windows);
}

// ---- the progress bar ----

// One line, redrawn in place: bar, step/total, loss, last validation loss, tokens/s, ETA.
void draw_progress(std::int64_t step, std::int64_t steps, double loss, double val_loss, double tokens_per_s,
                   double eta_s) {
  std::printf("\r[%s] %lld/%lld  loss %.4f  val %.4f  %.0f tokens/s  ETA %s   ", progress::bar(step, steps).c_str(),
              static_cast<long long>(step), static_cast<long long>(steps), loss, val_loss, tokens_per_s,
              progress::clock_time(eta_s).c_str());
  std::fflush(stdout);
}

// ---- the loss curves as a hand-written SVG ----

struct Panel {
  double x0, y0, width, height;  // plot area in pixels
  double xmin, xmax, ymin, ymax;
  double px(double x) const { return x0 + (x - xmin) / (xmax - xmin) * width; }
  double py(double y) const { return y0 + height - (std::clamp(y, ymin, ymax) - ymin) / (ymax - ymin) * height; }
};

void polyline(std::ostream& svg, const Panel& p, const std::vector<double>& xs, const std::vector<double>& ys,
              const char* color, double width, const char* dash = nullptr) {
  svg << "<polyline fill='none' stroke='" << color << "' stroke-width='" << width << "'";
  if (dash) svg << " stroke-dasharray='" << dash << "'";
  svg << " points='";
  for (std::size_t i = 0; i < xs.size(); ++i) svg << p.px(xs[i]) << ',' << p.py(ys[i]) << ' ';
  svg << "'/>\n";
}

// Training loss per step (light) and its mean over the last 20 steps (dark),
// validation loss at each evaluation (red, with dots), the unigram baseline
// (dashed).
void write_curves(const std::string& path, const std::vector<double>& step_loss,
                  const std::vector<std::pair<std::int64_t, double>>& val_loss, double unigram) {
  std::ofstream svg(path);
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='720' height='440' font-family='sans-serif'>\n"
      << "<rect width='720' height='440' fill='#fafafa'/>\n";
  std::vector<double> xs, smooth;
  double window_sum = 0;
  constexpr std::size_t kWindow = 20;
  for (std::size_t i = 0; i < step_loss.size(); ++i) {
    xs.push_back(static_cast<double>(i + 1));
    window_sum += step_loss[i] - (i >= kWindow ? step_loss[i - kWindow] : 0.0);
    smooth.push_back(window_sum / static_cast<double>(std::min(i + 1, kWindow)));
  }
  double top = unigram;
  for (double v : smooth) top = std::max(top, v);
  top = std::ceil(top * 2 + 0.5) / 2;
  double bottom = unigram;
  for (double v : smooth) bottom = std::min(bottom, v);
  for (const auto& [step, v] : val_loss) bottom = std::min(bottom, v);
  bottom = std::max(0.0, std::floor(bottom * 2 - 0.5) / 2);
  const Panel p{70, 40, 610, 330, 0, std::max(1.0, static_cast<double>(step_loss.size())), bottom, top};

  // Axes, ticks and titles.
  svg << "<rect x='" << p.x0 << "' y='" << p.y0 << "' width='" << p.width << "' height='" << p.height
      << "' fill='white' stroke='#444'/>\n"
      << "<text x='" << p.x0 + p.width / 2 << "' y='" << p.y0 - 14
      << "' text-anchor='middle' font-size='15'>character-level GPT on the fortunes: loss (nats per character)</text>\n"
      << "<text x='" << p.x0 + p.width / 2 << "' y='" << p.y0 + p.height + 38
      << "' text-anchor='middle' font-size='12'>step</text>\n";
  char label[32];
  constexpr int kTicks = 5;
  for (int i = 0; i <= kTicks; ++i) {
    const double x = p.xmin + (p.xmax - p.xmin) * i / kTicks, X = p.px(x);
    std::snprintf(label, sizeof label, "%.0f", x);
    svg << "<line x1='" << X << "' y1='" << p.y0 + p.height << "' x2='" << X << "' y2='" << p.y0 + p.height + 5
        << "' stroke='#444'/><text x='" << X << "' y='" << p.y0 + p.height + 18
        << "' text-anchor='middle' font-size='11'>" << label << "</text>\n";
    const double y = p.ymin + (p.ymax - p.ymin) * i / kTicks, Y = p.py(y);
    std::snprintf(label, sizeof label, "%.2f", y);
    svg << "<line x1='" << p.x0 << "' y1='" << Y << "' x2='" << p.x0 + p.width << "' y2='" << Y
        << "' stroke='#eee'/><text x='" << p.x0 - 6 << "' y='" << Y + 4 << "' text-anchor='end' font-size='11'>"
        << label << "</text>\n";
  }

  polyline(svg, p, {p.xmin, p.xmax}, {unigram, unigram}, "#666", 1.2, "6,4");
  polyline(svg, p, xs, step_loss, "#9ecae1", 0.7);
  polyline(svg, p, xs, smooth, "#08519c", 2);
  std::vector<double> vx, vy;
  for (const auto& [step, v] : val_loss) {
    vx.push_back(static_cast<double>(step));
    vy.push_back(v);
  }
  polyline(svg, p, vx, vy, "#a50f15", 2);
  for (std::size_t i = 0; i < vx.size(); ++i)
    svg << "<circle cx='" << p.px(vx[i]) << "' cy='" << p.py(vy[i]) << "' r='3' fill='#a50f15'/>\n";

  // Legend, top right.
  const double lx = p.x0 + p.width - 230, ly = p.y0 + 18;
  const struct {
    const char* color;
    const char* dash;
    const char* text;
  } legend[] = {{"#08519c", nullptr, "training (mean of the last 20 steps)"},
                {"#a50f15", nullptr, "validation (held-out fortunes)"},
                {"#666", "6,4", "unigram baseline (validation)"}};
  for (int i = 0; i < 3; ++i) {
    const double y = ly + 18 * i;
    svg << "<line x1='" << lx << "' y1='" << y - 4 << "' x2='" << lx + 24 << "' y2='" << y - 4 << "' stroke='"
        << legend[i].color << "' stroke-width='2'" << (legend[i].dash ? " stroke-dasharray='6,4'" : "") << "/><text x='"
        << lx + 30 << "' y='" << y << "' font-size='11'>" << legend[i].text << "</text>\n";
  }
  svg << "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  const Flags flags = parse(argc, argv);
  forge::ExecContext ctx({.threads = flags.threads, .seed = flags.seed});

  if (!fs::is_directory(flags.data)) {
    std::fprintf(stderr, "train_char_gpt: no directory %s (scripts/setup installs the package `fortunes`)\n",
                 flags.data.c_str());
    return 1;
  }
  const Corpus corpus = load_fortunes(flags.data);
  const Vocabulary vocab(corpus);
  const std::vector<std::int32_t> train = vocab.encode(corpus.train);
  const std::vector<std::int32_t> validation = vocab.encode(corpus.validation);
  if (train.size() <= static_cast<std::size_t>(flags.context) + 1 ||
      validation.size() <= static_cast<std::size_t>(flags.context) + 1) {
    std::fprintf(stderr, "train_char_gpt: %s holds too little text for a context of %lld\n", flags.data.c_str(),
                 static_cast<long long>(flags.context));
    return 1;
  }
  const double unigram = unigram_loss(train, validation, vocab.size());
  std::printf(
      "fortunes: %zu files, %zu fortunes, %zu training and %zu validation characters (%zu held-out fortunes), "
      "vocabulary %lld\nunigram baseline: %.4f nats per character on the validation set\n",
      corpus.files, corpus.fortunes, train.size(), validation.size(), corpus.validation_fortunes,
      static_cast<long long>(vocab.size()), unigram);

  const infer::DecoderConfig config{.vocab_size = vocab.size(),
                                    .d_model = flags.d_model,
                                    .n_layers = flags.layers,
                                    .n_heads = flags.heads,
                                    .max_seq_len = flags.context,
                                    .norm = infer::NormKind::layer_norm,
                                    .positions = infer::PositionKind::learned,
                                    .mlp = infer::MlpKind::gelu,
                                    .tied_head = true};
  const auto model = std::make_shared<infer::Decoder>(ctx, config);
  std::int64_t parameters = 0;
  for (const forge::Tensor& p : model->parameters()) parameters += p.numel();
  std::printf(
      "model: d_model %lld, %lld layers, %lld heads, context %lld, %lld parameters; %d threads, batch %lld, "
      "AdamW lr %g (warm-up, cosine), %lld steps\n",
      static_cast<long long>(flags.d_model), static_cast<long long>(flags.layers), static_cast<long long>(flags.heads),
      static_cast<long long>(flags.context), static_cast<long long>(parameters), ctx.threads(),
      static_cast<long long>(flags.batch_size), flags.lr, static_cast<long long>(flags.steps));

  forge::optim::AdamW adamw(model->parameters(), {.lr = flags.lr, .beta2 = 0.99, .weight_decay = 0.01});
  // A linear warm-up over the first 5% of the steps, then a cosine down to a tenth of --lr.
  const std::int64_t warmup = std::max<std::int64_t>(1, flags.steps / 20);
  auto lr_at = [&](std::int64_t step) {
    if (step < warmup) return flags.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    const double progress = static_cast<double>(step - warmup) / static_cast<double>(flags.steps - warmup);
    return flags.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * progress)));
  };

  std::mt19937_64 rng(flags.seed);
  std::uniform_int_distribution<std::size_t> window_start(0,
                                                          train.size() - static_cast<std::size_t>(flags.context) - 1);
  std::vector<double> step_loss;
  std::vector<std::pair<std::int64_t, double>> val_loss;
  val_loss.emplace_back(0, evaluate(*model, ctx, validation, flags.context, flags.eval_tokens, flags.batch_size));
  std::printf("step 0: validation loss %.4f\n", val_loss.back().second);

  const std::int64_t tokens_per_step = flags.batch_size * flags.context;
  double train_seconds = 0;  // steps only, evaluations left out
  auto last_draw = Clock::now();
  std::vector<std::size_t> starts(static_cast<std::size_t>(flags.batch_size));
  for (std::int64_t step = 1; step <= flags.steps; ++step) {
    const auto start = Clock::now();
    for (std::size_t& s : starts) s = window_start(rng);
    adamw.set_lr(lr_at(step - 1));
    {
      auto scope = ctx.open_exec_scope();  // the step's activations and tape, released together
      const Batch batch = make_batch(ctx, train, starts, flags.context);
      forge::Tensor loss = next_char_loss(model->forward(batch.input), batch.target);
      loss.backward();
      forge::optim::clip_grad_norm_(model->parameters(), 1.0);
      adamw.step();
      adamw.zero_grad();
      step_loss.push_back(loss.item<float>());
    }
    const auto now = Clock::now();
    train_seconds += std::chrono::duration<double>(now - start).count();
    const double tokens_per_s = static_cast<double>(step * tokens_per_step) / train_seconds;
    const bool eval_now = step % flags.eval_every == 0 || step == flags.steps;
    if (now - last_draw > std::chrono::milliseconds(200) || eval_now) {
      draw_progress(step, flags.steps, step_loss.back(), val_loss.back().second, tokens_per_s,
                    train_seconds / static_cast<double>(step) * static_cast<double>(flags.steps - step));
      last_draw = now;
    }
    if (eval_now) {
      val_loss.emplace_back(step,
                            evaluate(*model, ctx, validation, flags.context, flags.eval_tokens, flags.batch_size));
      double recent = 0;
      const std::size_t n = std::min<std::size_t>(step_loss.size(), static_cast<std::size_t>(flags.eval_every));
      for (std::size_t i = step_loss.size() - n; i < step_loss.size(); ++i) recent += step_loss[i];
      std::printf("\nstep %lld: training loss %.4f (mean of the last %zu steps), validation loss %.4f\n",
                  static_cast<long long>(step), recent / static_cast<double>(n), n, val_loss.back().second);
    }
  }
  const double final_val = val_loss.back().second;
  std::printf(
      "trained %lld steps in %.1f s: %.0f training tokens/s (%lld tokens per step)\n"
      "validation loss %.4f nats per character (%.3f bits), unigram baseline %.4f (%.3f bits)\n",
      static_cast<long long>(flags.steps), train_seconds,
      static_cast<double>(flags.steps * tokens_per_step) / train_seconds, static_cast<long long>(tokens_per_step),
      final_val, final_val / std::log(2.0), unigram, unigram / std::log(2.0));

  fs::create_directories(flags.out);
  const std::string checkpoint = flags.out + "/char_gpt.safetensors";
  model->save(checkpoint, {{"forge.vocab", vocab.utf8()}});
  std::printf("checkpoint: %s\n", checkpoint.c_str());
  // The checkpoint mapped back in each weight format: the held-out loss the
  // packed model reaches beside f32's (docs/INFERENCE.md states the bounds).
  std::printf("held-out loss by weight format (the checkpoint mapped, decoding path):\n");
  const double f32_loss = evaluate(*infer::Decoder::load(ctx, checkpoint), ctx, validation, flags.context,
                                   flags.eval_tokens, flags.batch_size, true);
  bool within = true;
  for (const infer::WeightFormat format :
       {infer::WeightFormat::f32, infer::WeightFormat::bf16, infer::WeightFormat::q8_0, infer::WeightFormat::q4_0}) {
    const auto packed = infer::Decoder::load(ctx, checkpoint, format);
    const double loss = format == infer::WeightFormat::f32 ? f32_loss
                                                           : evaluate(*packed, ctx, validation, flags.context,
                                                                      flags.eval_tokens, flags.batch_size, true);
    const double rise = (loss - f32_loss) / f32_loss;
    const double bound = kLossBound[static_cast<int>(format)];
    within = within && rise <= bound;
    std::printf("  %-5s %.4f nats (perplexity %.3f), %+.2f%% against f32 (bound %.1f%%)\n", infer::format_name(format),
                loss, std::exp(loss), 100 * rise, 100 * bound);
  }
  const std::string curves = flags.out + "/char_gpt_loss.svg";
  write_curves(curves, step_loss, val_loss, unigram);
  std::printf("curves: %s\n", curves.c_str());

  // A sample from the trained model: the start of a held-out fortune, continued.
  if (flags.sample_tokens > 0) {
    infer::Generator generator(model);
    forge::Arena arena(ctx);
    const std::u32string prompt_text = corpus.validation.substr(0, 24);
    std::vector<std::int64_t> prompt;
    for (std::int32_t t : vocab.encode(prompt_text)) prompt.push_back(t);
    const std::vector<std::vector<std::int64_t>> prompts{prompt};
    const infer::Generated out = generator.generate(
        arena, prompts,
        {.max_new_tokens = std::min(flags.sample_tokens, flags.context - static_cast<std::int64_t>(prompt.size())),
         .temperature = 0.8,
         .top_k = 20,
         .seed = flags.seed});
    const forge::Tensor tokens = out.tokens.item(0);
    std::printf("sample (temperature 0.8, top-k 20), prompt in brackets:\n[%s]%s\n", vocab.decode(prompt).c_str(),
                vocab.decode(tokens.to_vector<std::int64_t>()).c_str());
  }

  const forge::PoolStats s = ctx.stats();
  std::printf("pool: %llu acquires, %.2f%% hits, %llu system allocations; peak live %.1f MiB, cached %.1f MiB\n",
              static_cast<unsigned long long>(s.acquires),
              s.acquires ? 100.0 * static_cast<double>(s.hits) / static_cast<double>(s.acquires) : 0.0,
              static_cast<unsigned long long>(s.system_allocations), static_cast<double>(s.peak_live_bytes) / (1 << 20),
              static_cast<double>(s.cached_bytes) / (1 << 20));
  if (!within) std::printf("a packed model's held-out loss rose past its bound\n");
  return final_val < unigram && within ? 0 : 1;
}
