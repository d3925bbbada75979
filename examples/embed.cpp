// Embeds sentences with a sentence-transformers model directory (by default
// the all-MiniLM-L6-v2 that scripts/setup-reference exports): the sentences
// given on the command line, or one per line of stdin. Prints each
// embedding's first values, the cosine similarities between the inputs (up
// to 8 of them), sentences/s, and the pool and arena figures.
//
//   build/release/examples/embed [--model DIR] [--batch-size 32] [--threads 0]
//       [--out FILE] [--ids] [--no-sort] [--quiet] [sentence ...]
//
// As sentence-transformers' encode() does, the sentences are batched in order
// of length, longest first (--no-sort keeps the input order), so a batch pads
// little; the output keeps the input order. --out writes the embeddings as raw
// little-endian f32 rows (hidden values each); --ids prints each sentence's
// token ids instead of embedding. scripts/check-embeddings uses both.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/infer/encoder.h"

namespace {

struct Flags {
  std::string model = "models/all-MiniLM-L6-v2";
  std::int64_t batch_size = 32;
  int threads = 0;
  std::string out;
  bool quiet = false;
  bool ids = false;
  bool sort = true;
  std::vector<std::string> sentences;
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "%s\nusage: embed [--model DIR] [--batch-size N] [--threads N] [--out FILE] [--quiet] "
               "[sentence ...]\n(no sentence: one per line of stdin)\n",
               message);
  std::exit(2);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("Embeds sentences with a sentence-transformers model.");
    if (flag == "--quiet" || flag == "--ids" || flag == "--no-sort") {
      (flag == "--quiet" ? f.quiet : flag == "--ids" ? f.ids : f.sort) = flag != "--no-sort";
      continue;
    }
    if (flag.rfind("--", 0) != 0) {
      f.sentences.push_back(flag);
      continue;
    }
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--model")
      f.model = value;
    else if (flag == "--batch-size")
      f.batch_size = std::stoll(value);
    else if (flag == "--threads")
      f.threads = std::stoi(value);
    else if (flag == "--out")
      f.out = value;
    else
      usage(("unknown flag " + flag).c_str());
  }
  if (f.batch_size < 1) usage("--batch-size must be positive");
  if (f.sentences.empty())
    for (std::string line; std::getline(std::cin, line);) f.sentences.push_back(line);
  if (f.sentences.empty()) usage("no sentences given");
  return f;
}

double cosine(const float* a, const float* b, std::int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags flags = parse(argc, argv);
  forge::ExecContext ctx(forge::ExecContextOptions{.threads = flags.threads});
  const auto load_start = std::chrono::steady_clock::now();
  const forge::infer::SentenceEncoder encoder = forge::infer::SentenceEncoder::load(ctx, flags.model);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const std::int64_t dim = encoder.dimension();
  const auto n = static_cast<std::int64_t>(flags.sentences.size());
  if (flags.ids) {
    for (const std::string& s : flags.sentences) {
      for (std::int64_t id : encoder.tokenizer().encode(s)) std::printf("%lld ", static_cast<long long>(id));
      std::printf("\n");
    }
    return 0;
  }
  std::fprintf(stderr,
               "model %s: %lld layers, hidden %lld, max %lld tokens, %.1f MB of weights (%.1f MB copied), "
               "loaded in %.0f ms; %d threads\n",
               flags.model.c_str(), static_cast<long long>(encoder.config().num_layers), static_cast<long long>(dim),
               static_cast<long long>(encoder.tokenizer().options().max_length), encoder.weight_bytes() / 1e6,
               encoder.owned_weight_bytes() / 1e6, load_s * 1e3, ctx.threads());

  // Every embedding, gathered across batches (the arena's rows are stale after the next call).
  std::vector<float> all(static_cast<std::size_t>(n * dim));
  forge::Arena arena{ctx};
  std::uint64_t system_after_first = 0;
  const auto start = std::chrono::steady_clock::now();
  // The order to batch in: by length in characters, longest first, as sentence-transformers does.
  std::vector<std::size_t> order(flags.sentences.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (flags.sort)
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return flags.sentences[a].size() > flags.sentences[b].size();
    });
  std::vector<std::string> batch;
  for (std::int64_t first = 0; first < n; first += flags.batch_size) {
    const std::int64_t count = std::min(flags.batch_size, n - first);
    batch.clear();
    for (std::int64_t r = 0; r < count; ++r) batch.push_back(flags.sentences[order[first + r]]);
    const forge::RowsView rows = encoder.embed(arena, batch);
    for (std::int64_t r = 0; r < count; ++r) {
      const auto* row = reinterpret_cast<const float*>(static_cast<const char*>(rows.data()) +
                                                       r * static_cast<std::int64_t>(rows.row_stride_bytes()));
      std::copy(row, row + dim, all.begin() + static_cast<std::int64_t>(order[first + r]) * dim);
    }
    if (first == 0) system_after_first = ctx.stats().system_allocations + arena.stats().system_allocations;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (!flags.out.empty()) {
    std::ofstream out(flags.out, std::ios::binary);
    out.write(reinterpret_cast<const char*>(all.data()), static_cast<std::streamsize>(all.size() * sizeof(float)));
    if (!out) throw std::runtime_error("cannot write " + flags.out);
  }
  if (!flags.quiet) {
    for (std::int64_t i = 0; i < std::min<std::int64_t>(n, 8); ++i) {
      std::printf("[%lld] %s\n     ", static_cast<long long>(i), flags.sentences[static_cast<std::size_t>(i)].c_str());
      for (std::int64_t j = 0; j < std::min<std::int64_t>(dim, 6); ++j) std::printf(" %+.5f", all[i * dim + j]);
      std::printf(" ...\n");
    }
    if (n >= 2) {
      const std::int64_t m = std::min<std::int64_t>(n, 8);
      std::printf("cosine similarity:\n     ");
      for (std::int64_t j = 0; j < m; ++j) std::printf(" %6lld", static_cast<long long>(j));
      std::printf("\n");
      for (std::int64_t i = 0; i < m; ++i) {
        std::printf("[%lld] ", static_cast<long long>(i));
        for (std::int64_t j = 0; j < m; ++j) std::printf(" %6.3f", cosine(&all[i * dim], &all[j * dim], dim));
        std::printf("\n");
      }
    }
  }
  const forge::PoolStats pool = ctx.stats();
  const forge::ArenaStats a = arena.stats();
  std::printf("%lld sentences in %.3f s at batch %lld: %.1f sentences/s\n", static_cast<long long>(n), seconds,
              static_cast<long long>(flags.batch_size), n / seconds);
  std::printf(
      "pool: %llu acquires, %llu system allocations (%llu after the first batch), peak live %.1f MB; "
      "arena: %llu calls, %llu system allocations, high water %.1f KB\n",
      static_cast<unsigned long long>(pool.acquires), static_cast<unsigned long long>(pool.system_allocations),
      static_cast<unsigned long long>(pool.system_allocations + a.system_allocations - system_after_first),
      pool.peak_live_bytes / 1e6, static_cast<unsigned long long>(a.calls),
      static_cast<unsigned long long>(a.system_allocations), a.high_water_bytes / 1e3);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "embed: %s\n", e.what());
  return 1;
}
