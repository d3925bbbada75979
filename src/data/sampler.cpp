// Samplers (include/forge/data/sampler.h). Each epoch's indices are a pure
// function of (n, options, epoch): nothing carries over between calls, so
// epochs can be asked for in any order and a resumed run sees the same ones.

#include "forge/data/sampler.h"

#include <random>

#include "forge/error.h"

namespace forge::data {
namespace {

// A uniform draw from [0, bound) without modulo bias, from a generator whose
// output sequence the standard fixes (std::uniform_int_distribution's is not).
std::uint64_t draw_below(std::mt19937_64& gen, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  std::uint64_t r;
  do r = gen();
  while (r < threshold);
  return r % bound;
}

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  return order;
}

// 0..n-1 shuffled by Fisher-Yates from seed + epoch. The DataLoader's
// shuffle has always been this sequence: keep it bit for bit (a test pins it).
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> order = iota(n);
  std::mt19937_64 gen(seed + static_cast<std::uint64_t>(epoch));
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[draw_below(gen, i)]);
  return order;
}

void check_size(const char* op, std::int64_t n) {
  FORGE_CHECK(n >= 0, invalid_argument, op, "dataset size must be non-negative, got ", n);
}

void check_epoch(const char* op, std::int64_t epoch) {
  FORGE_CHECK(epoch >= 0, invalid_argument, op, "epoch must be non-negative, got ", epoch);
}

}  // namespace

SequentialSampler::SequentialSampler(std::int64_t n) : n_(n) { check_size("SequentialSampler", n); }

std::vector<std::int64_t> SequentialSampler::indices(std::int64_t epoch) const {
  check_epoch("SequentialSampler", epoch);
  return iota(n_);
}

RandomSampler::RandomSampler(std::int64_t n, std::uint64_t seed) : n_(n), seed_(seed) {
  check_size("RandomSampler", n);
}

std::vector<std::int64_t> RandomSampler::indices(std::int64_t epoch) const {
  check_epoch("RandomSampler", epoch);
  return permutation(n_, seed_, epoch);
}

DistributedSampler::DistributedSampler(std::int64_t n, DistributedSamplerOptions options) : n_(n), options_(options) {
  constexpr const char* kOp = "DistributedSampler";
  check_size(kOp, n);
  const std::int64_t world = options_.world_size;
  FORGE_CHECK(world >= 1, invalid_argument, kOp, "world_size must be at least 1, got ", world);
  FORGE_CHECK(options_.rank >= 0 && options_.rank < world, invalid_argument, kOp, "rank ", options_.rank,
              " is out of range for world_size ", world);
  // torch: ceil(n / world) with padding, floor(n / world) with drop_last.
  per_rank_ = options_.drop_last ? n / world : (n + world - 1) / world;
}

std::vector<std::int64_t> DistributedSampler::indices(std::int64_t epoch) const {
  check_epoch("DistributedSampler", epoch);
  const std::vector<std::int64_t> order = options_.shuffle ? permutation(n_, options_.seed, epoch) : iota(n_);
  // Position p of the padded (or cut) order is order[p % n]: torch pads by
  // repeating the order's head, as many times as it takes.
  std::vector<std::int64_t> mine(static_cast<std::size_t>(per_rank_));
  for (std::int64_t k = 0; k < per_rank_; ++k) {
    const std::int64_t p = options_.rank + k * options_.world_size;
    mine[static_cast<std::size_t>(k)] = order[static_cast<std::size_t>(p % n_)];
  }
  return mine;
}

}  // namespace forge::data
