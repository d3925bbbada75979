// Samplers: the loader's shuffle kept bit for bit, and DistributedSampler
// shards as torch.utils.data.DistributedSampler makes them (padding by
// repeating the order's head, or cutting with drop_last).

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "forge/data/dataloader.h"
#include "forge/data/sampler.h"
#include "support.h"

using forge::data::DistributedSampler;
using forge::data::DistributedSamplerOptions;
using forge::data::RandomSampler;
using forge::data::SequentialSampler;
using Indices = std::vector<std::int64_t>;

namespace {

Indices shard(std::int64_t n, DistributedSamplerOptions options, std::int64_t epoch = 0) {
  return DistributedSampler(n, options).indices(epoch);
}

}  // namespace

TEST_CASE("data: SequentialSampler and RandomSampler keep the loader's orders", "[data]") {
  CHECK(SequentialSampler(5).indices(3) == Indices{0, 1, 2, 3, 4});
  CHECK(SequentialSampler(0).indices(0).empty());
  // The order data_test pins for a loader with seed 7 (Fisher-Yates over mt19937_64).
  const RandomSampler random(8, 7);
  CHECK(random.indices(0) == Indices{2, 3, 5, 6, 1, 0, 4, 7});
  CHECK(random.indices(1) == RandomSampler(8, 8).indices(0));  // epoch e seeds with seed + e
  CHECK(random.indices(0) == random.indices(0));
  Indices sorted = RandomSampler(1000, 3).indices(5);
  std::sort(sorted.begin(), sorted.end());
  Indices all(1000);
  std::iota(all.begin(), all.end(), 0);
  CHECK(sorted == all);

  forge_test::TestContext ctx;
  const auto d = forge_test::numbered_dataset(ctx, 8, 1);
  forge::data::DataLoader loader(ctx, d.inputs, d.targets, {.batch_size = 8, .seed = 7});
  CHECK(loader.order(0) == random.indices(0));
  CHECK(loader.order(4) == random.indices(4));
}

TEST_CASE("data: DistributedSampler pads and cuts as torch's", "[data]") {
  // n = 10 over 4 ranks, unshuffled: padded to 12 by repeating 0, 1; rank r
  // takes positions r, r + 4, r + 8.
  const std::vector<Indices> padded = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  const std::vector<Indices> cut = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  for (std::int64_t r = 0; r < 4; ++r) {
    CHECK(shard(10, {.world_size = 4, .rank = r, .shuffle = false}) == padded[static_cast<std::size_t>(r)]);
    CHECK(shard(10, {.world_size = 4, .rank = r, .shuffle = false, .drop_last = true}) ==
          cut[static_cast<std::size_t>(r)]);
  }
  // Fewer examples than ranks: torch repeats the whole order as often as it takes.
  for (std::int64_t r = 0; r < 5; ++r)
    CHECK(shard(2, {.world_size = 5, .rank = r, .shuffle = false}) == Indices{r % 2});
  CHECK(shard(2, {.world_size = 5, .rank = 4, .drop_last = true}).empty());
  // Shuffled: every rank cuts the same permutation (seed + epoch).
  const Indices order = RandomSampler(9, 21).indices(3);
  CHECK(shard(9, {.world_size = 2, .rank = 1, .seed = 21}, 3) ==
        Indices{order[1], order[3], order[5], order[7], order[0]});
  CHECK(DistributedSampler(10, {.world_size = 4}).size() == 3);
  CHECK(DistributedSampler(10, {.world_size = 4, .drop_last = true}).size() == 2);
  CHECK(DistributedSampler(0, {.world_size = 3, .rank = 2}).indices(0).empty());
}

TEST_CASE("data: DistributedSampler shards are disjoint and cover the dataset", "[data]") {
  for (std::int64_t n : {1, 6, 7, 12, 13, 100})
    for (std::int64_t world : {1, 2, 3, 4, 5})
      for (bool shuffle : {false, true})
        for (bool drop_last : {false, true}) {
          INFO("n " << n << ", world " << world << ", shuffle " << shuffle << ", drop_last " << drop_last);
          std::map<std::int64_t, int> count;
          std::size_t per_rank = 0;
          for (std::int64_t r = 0; r < world; ++r) {
            const Indices mine =
                shard(n, {.world_size = world, .rank = r, .shuffle = shuffle, .seed = 5, .drop_last = drop_last}, 2);
            if (r == 0) per_rank = mine.size();
            CHECK(mine.size() == per_rank);  // equal shards
            for (std::int64_t i : mine) {
              REQUIRE((i >= 0 && i < n));
              ++count[i];
            }
          }
          const auto total = static_cast<std::int64_t>(per_rank) * world;
          if (drop_last) {
            CHECK(total == n / world * world);
            CHECK(static_cast<std::int64_t>(count.size()) == total);  // disjoint: each index once
          } else {
            CHECK(total == (n + world - 1) / world * world);
            CHECK(static_cast<std::int64_t>(count.size()) == n);  // covered
            std::int64_t twice = 0;
            for (const auto& [index, times] : count) twice += times - 1;
            CHECK(twice == total - n);  // only the padding repeats
          }
        }
}

TEST_CASE("data: samplers refuse a bad rank, world size, size or epoch", "[data]") {
  FORGE_REQUIRE_ERROR(invalid_argument, "DistributedSampler", DistributedSampler(10, {.world_size = 2, .rank = 2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "DistributedSampler", DistributedSampler(10, {.world_size = 2, .rank = -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "DistributedSampler", DistributedSampler(10, {.world_size = 0}));
  FORGE_REQUIRE_ERROR(invalid_argument, "DistributedSampler", DistributedSampler(-1, {}));
  FORGE_REQUIRE_ERROR(invalid_argument, "DistributedSampler", (void)DistributedSampler(4, {}).indices(-1));
  FORGE_REQUIRE_ERROR(invalid_argument, "RandomSampler", RandomSampler(-3));
  FORGE_REQUIRE_ERROR(invalid_argument, "RandomSampler", (void)RandomSampler(3).indices(-1));
  FORGE_REQUIRE_ERROR(invalid_argument, "SequentialSampler", SequentialSampler(-1));
  const std::string message =
      FORGE_REQUIRE_ERROR(invalid_argument, "DistributedSampler", DistributedSampler(10, {.world_size = 4, .rank = 4}));
  CHECK(message.find("rank 4 is out of range for world_size 4") != std::string::npos);
}
