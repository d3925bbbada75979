// DataLoader over any Dataset: TensorDataset rows, worker threads giving the
// batches of the calling thread, resuming at (epoch, batch), custom collates,
// and failures (mismatched examples, a throwing dataset, bad samplers) that
// leave the loader usable and the pool at its baseline.

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "forge/data/dataloader.h"
#include "forge/forge.h"
#include "heap_fault.h"
#include "support.h"

using forge::DType;
using forge::Tensor;
using forge::data::Batch;
using forge::data::DataLoader;
using forge::data::DataLoaderOptions;
using forge::data::Example;
using forge::data::Position;
using forge_test::numbered_dataset;
using forge_test::TestContext;

namespace {

// Every batch of epochs [0, epochs) as numbers: the input values, then the target values.
using Flat = std::vector<std::vector<double>>;

std::vector<double> values(const Tensor& t) {
  if (!t.defined()) return {};
  return t.to(DType::f64).to_vector<double>();
}

Flat batches_of(DataLoader& loader, std::int64_t epoch, std::int64_t start = 0) {
  Flat out;
  for (const Batch& b : loader.epoch(epoch, start)) {
    out.push_back(values(b.input));
    out.push_back(values(b.target));
  }
  return out;
}

// Example i: input [i, i + 0.5, ...] (width values, or `odd_width` for example `odd`),
// target i as i64; optionally sleeps so that workers finish out of order.
class Numbers : public forge::data::Dataset {
 public:
  explicit Numbers(std::int64_t n, std::int64_t width = 3) : n_(n), width_(width) {}
  std::int64_t size() const override { return n_; }
  void fill(std::int64_t i, Example& out) const override {
    if (jitter_ && i % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    const std::int64_t width = i == odd_ ? odd_width_ : width_;
    auto* x = reinterpret_cast<float*>(out.input.reset({width}, DType::f32));
    for (std::int64_t j = 0; j < width; ++j) x[j] = static_cast<float>(i) + 0.5f * static_cast<float>(j);
    *reinterpret_cast<std::int64_t*>(out.target.reset({}, DType::i64)) = i;
  }
  Numbers& jitter() {
    jitter_ = true;
    return *this;
  }
  Numbers& odd(std::int64_t index, std::int64_t width) {
    odd_ = index;
    odd_width_ = width;
    return *this;
  }

 private:
  std::int64_t n_, width_;
  bool jitter_ = false;
  std::int64_t odd_ = -1, odd_width_ = 0;
};

// Throws from fill() for example `bad`: the first `times` calls (-1: always).
class Flaky : public forge::data::Dataset {
 public:
  Flaky(std::int64_t n, std::int64_t bad, int times) : inner_(n), bad_(bad), left_(times) {}
  std::int64_t size() const override { return inner_.size(); }
  void fill(std::int64_t i, Example& out) const override {
    if (i == bad_ && (left_.load() < 0 || left_.fetch_sub(1) > 0)) throw std::runtime_error("flaky example");
    inner_.fill(i, out);
  }
  int left() const { return left_.load(); }

 private:
  Numbers inner_;
  std::int64_t bad_;
  mutable std::atomic<int> left_;
};

// A sampler handing out fixed indices.
class Fixed : public forge::data::Sampler {
 public:
  Fixed(std::vector<std::int64_t> indices, std::int64_t size) : indices_(std::move(indices)), size_(size) {}
  std::int64_t size() const override { return size_; }
  std::vector<std::int64_t> indices(std::int64_t) const override { return indices_; }

 private:
  std::vector<std::int64_t> indices_;
  std::int64_t size_;
};

}  // namespace

TEST_CASE("data: TensorDataset examples are the rows of its tensors", "[data]") {
  TestContext ctx;
  const auto d = numbered_dataset(ctx, 6, 4);
  // A strided view is packed once; targets [N, 2].
  const Tensor inputs = d.inputs.t().contiguous().t();
  REQUIRE_FALSE(inputs.is_contiguous());
  const Tensor targets = ctx.arange(12).to(DType::i64).reshape({6, 2});
  const forge::data::TensorDataset dataset(inputs, targets);
  CHECK(dataset.size() == 6);
  const Example e = dataset.get(4);
  CHECK(e.input.shape() == forge::Shape{4});
  CHECK(e.input.to_vector<float>() == std::vector<float>{4, 4, 4, 4});
  CHECK(e.target.shape() == forge::Shape{2});
  CHECK(e.target.to_vector<std::int64_t>() == std::vector<std::int64_t>{8, 9});
  FORGE_REQUIRE_ERROR(out_of_range, "Dataset", (void)dataset.get(6));
  FORGE_REQUIRE_ERROR(out_of_range, "Dataset", (void)dataset.get(-1));
  FORGE_REQUIRE_ERROR(dtype, "HostArray", (void)e.input.to_vector<double>());

  const forge::data::TensorDataset no_targets(d.inputs);
  CHECK_FALSE(no_targets.get(0).target.defined());
  FORGE_REQUIRE_ERROR(shape, "TensorDataset", forge::data::TensorDataset(d.inputs, targets.narrow(0, 0, 5)));
  FORGE_REQUIRE_ERROR(invalid_argument, "TensorDataset", forge::data::TensorDataset{Tensor()});
}

TEST_CASE("data: a refilled example reuses its memory", "[data]") {
  TestContext ctx;
  const auto d = numbered_dataset(ctx, 50, 16);
  const forge::data::TensorDataset dataset(d.inputs, d.targets);
  Example e;
  dataset.fill(0, e);
  const std::uint64_t before = forge_test::heap::allocations();
  for (std::int64_t i = 1; i < 50; ++i) dataset.fill(i, e);
  CHECK(forge_test::heap::allocations() == before);  // a steady gather allocates nothing
  CHECK(e.input.to_vector<float>() == std::vector<float>(16, 49.0f));
}

TEST_CASE("data: 1 and 2 worker threads give exactly the batches of 0", "[data]") {
  TestContext ctx;
  auto numbers = std::make_shared<Numbers>(101);
  numbers->jitter();  // workers finish out of order
  const auto twice = [](const Tensor& x) { return x * 2.0; };
  for (bool drop_last : {false, true})
    for (bool shuffle : {false, true}) {
      INFO("drop_last " << drop_last << ", shuffle " << shuffle);
      auto all = [&](int workers) {
        DataLoader loader(ctx, numbers,
                          {.batch_size = 8,
                           .shuffle = shuffle,
                           .drop_last = drop_last,
                           .seed = 11,
                           .transform = twice,
                           .num_workers = workers});
        CHECK(loader.num_workers() == workers);
        Flat out;
        for (std::int64_t e = 0; e < 3; ++e) {
          const Flat epoch = batches_of(loader, e);
          out.insert(out.end(), epoch.begin(), epoch.end());
        }
        return out;
      };
      const Flat zero = all(0);
      CHECK(zero.size() == 2 * 3 * (drop_last ? 12 : 13));
      CHECK(all(1) == zero);
      CHECK(all(2) == zero);
    }
  // prefetch off is 0 workers whatever num_workers says.
  DataLoader off(ctx, numbers, {.prefetch = false, .num_workers = 3});
  CHECK(off.num_workers() == 0);
}

TEST_CASE("data: resuming at (epoch, batch) gives the remaining batches exactly", "[data]") {
  TestContext ctx;
  const auto d = numbered_dataset(ctx, 45, 2);
  for (int workers : {0, 2}) {
    INFO(workers << " workers");
    DataLoader full(ctx, d.inputs, d.targets, {.batch_size = 4, .seed = 3, .num_workers = workers});
    REQUIRE(full.size() == 12);
    const Flat epoch1 = batches_of(full, 1);
    CHECK(full.position() == Position{1, 12});

    // A run stopped after 5 batches of epoch 1 and restarted in a fresh loader.
    DataLoader first(ctx, d.inputs, d.targets, {.batch_size = 4, .seed = 3, .num_workers = workers});
    CHECK(first.position() == Position{0, 0});
    first.begin_epoch(1);
    for (int k = 0; k < 5; ++k) REQUIRE(first.next());
    const Position saved = first.position();
    CHECK(saved == Position{1, 5});
    DataLoader resumed(ctx, d.inputs, d.targets, {.batch_size = 4, .seed = 3, .num_workers = workers});
    resumed.begin_epoch(saved.epoch, saved.batch);
    std::int64_t index = saved.batch;
    Flat rest;
    while (auto b = resumed.next()) {
      CHECK(b->index == index++);
      rest.push_back(values(b->input));
      rest.push_back(values(b->target));
    }
    CHECK(rest == Flat(epoch1.begin() + 2 * 5, epoch1.end()));
    CHECK(batches_of(resumed, 1, 12).empty());  // resumed at the epoch's end
    FORGE_REQUIRE_ERROR(out_of_range, "DataLoader", resumed.begin_epoch(1, 13));
    FORGE_REQUIRE_ERROR(out_of_range, "DataLoader", resumed.begin_epoch(1, -1));
  }
}

TEST_CASE("data: a custom collate pads examples of varying length on the calling thread", "[data]") {
  TestContext ctx;
  // Example i: i + 1 values, all i.
  class Ragged : public forge::data::Dataset {
   public:
    std::int64_t size() const override { return 9; }
    void fill(std::int64_t i, Example& out) const override {
      auto* x = reinterpret_cast<std::int64_t*>(out.input.reset({i + 1}, DType::i64));
      std::fill(x, x + i + 1, i);
      out.target.clear();
    }
  };
  auto pad = [](forge::ExecContext& c, std::span<const Example> examples) {
    std::int64_t longest = 0;
    for (const Example& e : examples) longest = std::max(longest, e.input.numel());
    std::vector<std::int64_t> rows, lengths;
    for (const Example& e : examples) {
      const auto v = e.input.to_vector<std::int64_t>();
      rows.insert(rows.end(), v.begin(), v.end());
      rows.resize(rows.size() + static_cast<std::size_t>(longest - e.input.numel()), -1);
      lengths.push_back(e.input.numel());
    }
    const auto b = static_cast<std::int64_t>(examples.size());
    return Batch{c.from_vector(rows, {b, longest}), c.from_vector(lengths, {b})};
  };
  for (int workers : {0, 2}) {
    DataLoader loader(ctx, std::make_shared<Ragged>(),
                      {.batch_size = 4, .shuffle = false, .num_workers = workers, .collate = pad});
    std::vector<Batch> got;
    for (const Batch& b : loader.epoch(0)) got.push_back(b);
    REQUIRE(got.size() == 3);
    CHECK(got[0].input.shape() == forge::Shape{4, 4});
    CHECK(got[0].input.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, -1, -1, -1, 1, 1, -1, -1, 2, 2, 2, -1, 3, 3, 3, 3});
    CHECK(got[1].target.to_vector<std::int64_t>() == std::vector<std::int64_t>{5, 6, 7, 8});
    CHECK(got[2].input.shape() == forge::Shape{1, 9});
    CHECK(got[2].index == 2);
  }
  // The same examples through the default collate cannot be stacked.
  DataLoader stacked(ctx, std::make_shared<Ragged>(), {.batch_size = 4, .shuffle = false});
  stacked.begin_epoch(0);
  FORGE_REQUIRE_ERROR(shape, "DataLoader", (void)stacked.next());
}

TEST_CASE("data: mismatched example shapes in a batch are a shape error naming both", "[data]") {
  TestContext ctx;
  auto numbers = std::make_shared<Numbers>(20);
  numbers->odd(6, 5);  // example 6 has 5 values, the others 3
  for (int workers : {0, 2}) {
    INFO(workers << " workers");
    DataLoader loader(ctx, numbers, {.batch_size = 4, .shuffle = false, .num_workers = workers});
    loader.begin_epoch(0);
    REQUIRE(loader.next());
    const std::int64_t outstanding = ctx.stats().outstanding;
    for (int attempt = 0; attempt < 2; ++attempt) {  // the batch is not consumed: it fails again
      const std::string message = FORGE_REQUIRE_ERROR(shape, "DataLoader", (void)loader.next());
      CHECK(message.find("batch 1 of epoch 0") != std::string::npos);
      CHECK(message.find("example 6 has input [5] of f32") != std::string::npos);
      CHECK(message.find("example 4 has [3] of f32") != std::string::npos);
      CHECK(ctx.stats().outstanding == outstanding);
      CHECK(loader.position() == Position{0, 1});
    }
    loader.begin_epoch(0, loader.position().batch + 1);  // skip it
    const auto b = loader.next();
    REQUIRE(b);
    CHECK(b->index == 2);
    CHECK(values(b->target) == std::vector<double>{8, 9, 10, 11});
  }
  // default_collate alone names the positions.
  Example a, b;
  numbers->fill(0, a);
  numbers->fill(6, b);
  const std::vector<Example> pair = {a, b};
  const std::string message = FORGE_REQUIRE_ERROR(shape, "default_collate", forge::data::default_collate(ctx, pair));
  CHECK(message.find("example 1 has input [5] of f32, example 0 has [3] of f32") != std::string::npos);
  b.target.clear();
  b.input = a.input;
  const std::vector<Example> no_target = {a, b};
  CHECK(FORGE_REQUIRE_ERROR(shape, "default_collate", forge::data::default_collate(ctx, no_target))
            .find("has target none") != std::string::npos);
  FORGE_REQUIRE_ERROR(invalid_argument, "default_collate", forge::data::default_collate(ctx, {}));
}

TEST_CASE("data: a dataset that throws reaches next() and the batch is tried again", "[data]") {
  TestContext ctx;
  for (int workers : {0, 1, 2}) {
    INFO(workers << " workers");
    {                                                   // a failure that passes
      auto flaky = std::make_shared<Flaky>(30, 13, 2);  // example 13 fails twice, then reads
      DataLoader loader(ctx, flaky, {.batch_size = 5, .shuffle = false, .num_workers = workers});
      const std::int64_t outstanding = ctx.stats().outstanding;
      loader.begin_epoch(0);
      REQUIRE(loader.next());
      REQUIRE(loader.next());
      CHECK_THROWS_WITH(loader.next(), "flaky example");  // batch 2 holds example 13
      CHECK(loader.position() == Position{0, 2});
      CHECK(ctx.stats().outstanding == outstanding);
      CHECK_THROWS_WITH(loader.next(), "flaky example");
      const auto b = loader.next();  // the third gather reads it
      REQUIRE(b);
      CHECK(b->index == 2);
      CHECK(values(b->target) == std::vector<double>{10, 11, 12, 13, 14});
      CHECK(flaky->left() < 0);
      std::int64_t rest = 0;
      while (auto more = loader.next()) rest += more->input.size(0);
      CHECK(rest == 15);
    }
    {  // a failure that stays, skipped by the caller
      DataLoader loader(ctx, std::make_shared<Flaky>(30, 13, -1),
                        {.batch_size = 5, .shuffle = false, .num_workers = workers});
      std::vector<double> seen;
      loader.begin_epoch(0);
      for (;;) {
        try {
          const auto b = loader.next();
          if (!b) break;
          const auto ids = values(b->target);
          seen.insert(seen.end(), ids.begin(), ids.end());
        } catch (const std::runtime_error&) {
          loader.begin_epoch(0, loader.position().batch + 1);
        }
      }
      CHECK(seen.size() == 25);
      CHECK(std::find(seen.begin(), seen.end(), 13.0) == seen.end());
    }
  }
}

TEST_CASE("data: a transform that throws leaves its batch to the next call", "[data]") {
  TestContext ctx;
  const auto d = numbered_dataset(ctx, 12, 2);
  for (int workers : {0, 2}) {
    int calls = 0;
    DataLoader loader(ctx, d.inputs, d.targets,
                      {.batch_size = 4,
                       .shuffle = false,
                       .transform =
                           [&](const Tensor& x) {
                             if (++calls == 2) FORGE_FAIL(dtype, "my_transform", "refused once");
                             return x;
                           },
                       .num_workers = workers});
    loader.begin_epoch(0);
    REQUIRE(loader.next());
    FORGE_REQUIRE_ERROR(dtype, "my_transform", (void)loader.next());
    const auto b = loader.next();
    REQUIRE(b);
    CHECK(b->index == 1);
    CHECK(values(b->target) == std::vector<double>{4, 5, 6, 7});
  }
}

TEST_CASE("data: DataLoader refuses bad datasets, samplers and options", "[data]") {
  TestContext ctx;
  auto numbers = std::make_shared<Numbers>(10);
  FORGE_REQUIRE_ERROR(invalid_argument, "DataLoader", DataLoader(ctx, std::shared_ptr<Numbers>()));
  FORGE_REQUIRE_ERROR(invalid_argument, "DataLoader", DataLoader(ctx, numbers, {.num_workers = -1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "DataLoader", DataLoader(ctx, numbers, {.batch_size = -2}));
  {
    // An index past the dataset: refused when the epoch begins, before any fill.
    DataLoader loader(ctx, numbers, {.sampler = std::make_shared<Fixed>(std::vector<std::int64_t>{0, 10, 2}, 3)});
    const std::string message = FORGE_REQUIRE_ERROR(out_of_range, "DataLoader", loader.begin_epoch(0));
    CHECK(message.find("index 10 (position 1 of epoch 0)") != std::string::npos);
    FORGE_REQUIRE_ERROR(invalid_argument, "DataLoader", (void)loader.next());  // no epoch began
  }
  DataLoader wrong_count(ctx, numbers, {.sampler = std::make_shared<Fixed>(std::vector<std::int64_t>{0, 1}, 3)});
  FORGE_REQUIRE_ERROR(invalid_argument, "DataLoader", wrong_count.begin_epoch(0));
  // A sampler of another size sets the batches: 7 indices in 2 batches of 4.
  DataLoader seven(ctx, numbers, {.batch_size = 4, .sampler = std::make_shared<forge::data::SequentialSampler>(7)});
  CHECK(seven.size() == 2);
  CHECK(batches_of(seven, 0).back() == std::vector<double>{4, 5, 6});
}

TEST_CASE("data: DataLoader with a DistributedSampler gives each rank its shard", "[data]") {
  TestContext ctx;
  const auto d = numbered_dataset(ctx, 23, 1);
  const auto dataset = std::make_shared<forge::data::TensorDataset>(d.inputs, d.targets);
  std::vector<double> all;
  for (std::int64_t rank = 0; rank < 3; ++rank) {
    auto shard = std::make_shared<forge::data::DistributedSampler>(
        23, forge::data::DistributedSamplerOptions{.world_size = 3, .rank = rank, .seed = 4, .drop_last = true});
    DataLoader loader(ctx, dataset, {.batch_size = 3, .num_workers = 2, .sampler = shard});
    CHECK(loader.size() == 3);  // 7 per rank
    for (const Batch& b : loader.epoch(2)) {
      const auto ids = values(b.target);
      all.insert(all.end(), ids.begin(), ids.end());
    }
  }
  std::sort(all.begin(), all.end());
  CHECK(all.size() == 21);
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());  // disjoint
}

TEST_CASE("data: every heap allocation failure of next() is out_of_memory and loses no batch", "[data]") {
  // Each batch is walked: the calling thread's nth heap allocation fails, for
  // n = 1, 2, ... until next() succeeds; the batches that come out are the
  // reference's. Worker threads are not failed (heap_fault.h): with workers
  // this walks the collate and the transform, without them the gather too.
  TestContext ctx;
  auto numbers = std::make_shared<Numbers>(40);
  const auto twice = [](const Tensor& x) { return x * 2.0; };
  for (int workers : {0, 2}) {
    INFO(workers << " workers");
    DataLoaderOptions options{.batch_size = 6, .seed = 5, .transform = twice, .num_workers = workers};
    DataLoader reference(ctx, numbers, options);
    const Flat want = batches_of(reference, 0);
    DataLoader loader(ctx, numbers, options);
    loader.begin_epoch(0);
    const std::int64_t outstanding = ctx.stats().outstanding;
    Flat got;
    int failures = 0;
    for (std::uint64_t n = 1;; ++n) {
      std::optional<Batch> b;
      forge_test::heap::fail_after(n);
      try {
        b = loader.next();
        forge_test::heap::fail_after(0);
      } catch (const forge::Error& e) {
        forge_test::heap::fail_after(0);
        CHECK(e.code() == forge::ErrorCode::out_of_memory);
        CHECK(ctx.stats().outstanding == outstanding);
        ++failures;
        continue;
      }
      if (!b) break;
      got.push_back(values(b->input));
      got.push_back(values(b->target));
      n = 0;  // the next batch from its first allocation
    }
    CHECK(got == want);
    CHECK(failures > 7);
  }
}

TEST_CASE("data: the dataset of dataset.h's example batches as it says", "[data]") {
  TestContext ctx;
  struct Squares : forge::data::Dataset {
    std::int64_t size() const override { return 100; }
    void fill(std::int64_t i, forge::data::Example& out) const override {
      out.input.reset({1}, DType::f32);
      out.input.as<float>()[0] = float(i);
      out.target.reset({}, DType::i64);
      out.target.as<std::int64_t>()[0] = i * i;
    }
  };
  DataLoader loader(ctx, std::make_shared<Squares>(), {.batch_size = 32, .shuffle = false, .num_workers = 2});
  CHECK(loader.size() == 4);
  loader.begin_epoch(0, 3);
  const auto last = loader.next();
  REQUIRE(last);
  CHECK(last->input.shape() == forge::Shape{4, 1});
  CHECK(last->input.to_vector<float>() == std::vector<float>{96, 97, 98, 99});
  CHECK(last->target.to_vector<std::int64_t>() == std::vector<std::int64_t>{9216, 9409, 9604, 9801});
  CHECK_FALSE(loader.next());
  CHECK(loader.position() == Position{0, 4});
}
