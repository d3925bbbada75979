// Training checkpoints: a run stopped and resumed from a checkpoint ends with
// the same parameters, bit for bit, as one that never stopped; refused files
// change nothing.

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "forge/forge.h"
#include "forge/train/checkpoint.h"
#include "support.h"
#include "temp_dir.h"

using forge::DType;
using forge::Tensor;
using forge_test::TestContext;
namespace nn = forge::nn;
namespace optim = forge::optim;
namespace train = forge::train;
namespace data = forge::data;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return a.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), a.nbytes()) == 0;
}

constexpr std::int64_t kSamples = 40, kBatch = 8, kEpochs = 3;  // 5 batches per epoch, 15 steps

// One training run's state: an MLP with dropout (so the generator matters),
// AdamW over decay groups, a one-cycle schedule and a shuffling loader.
struct Run {
  TestContext ctx;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::OneCycleLR> sched;
  std::unique_ptr<data::DataLoader> loader;
  std::int64_t step = 0;

  explicit Run(std::uint64_t seed) : ctx(forge_test::context_options(1, seed)) {
    model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(ctx, 6, 16));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Dropout>(0.3));
    model->push_back(std::make_shared<nn::Linear>(ctx, 16, 3));
    opt = std::make_unique<optim::AdamW>(optim::decay_groups(*model, 0.05), optim::AdamWOptions{.lr = 1e-2});
    sched = std::make_unique<optim::OneCycleLR>(*opt, kSamples / kBatch * kEpochs);
    // The same data in every run, whatever the seed.
    std::vector<float> x(kSamples * 6);
    std::vector<std::int64_t> y(kSamples);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37 % 23) / 11.0 - 1.0);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i * 7 % 3);
    loader = std::make_unique<data::DataLoader>(ctx, ctx.from_vector(x, {kSamples, 6}), ctx.from_vector(y),
                                                data::DataLoaderOptions{.batch_size = kBatch, .seed = 5});
  }

  void train_step(const data::Batch& b) {
    opt->zero_grad();
    Tensor loss = forge::cross_entropy(model->forward(b.input), b.target);
    loss.backward();
    optim::clip_grad_norm_(opt->params(), 1.0);
    opt->step();
    sched->step();
    ++step;
  }

  train::Checkpoint parts() {
    return {.model = model.get(), .optimizer = opt.get(), .schedule = sched.get(), .context = &ctx};
  }

  // Trains from `from` to the end, or stops (returning the position to resume at) after `stop_after` steps.
  std::optional<train::DataPosition> train_from(train::DataPosition from, std::int64_t stop_after = -1) {
    for (std::int64_t e = from.epoch; e < kEpochs; ++e) {
      loader->begin_epoch(e, e == from.epoch ? from.batch : 0);  // skip what was trained before
      while (auto batch = loader->next()) {
        train_step(*batch);
        if (step == stop_after) {
          const train::DataPosition at = loader->position();
          return at.batch == loader->size() ? train::DataPosition{e + 1, 0} : at;
        }
      }
    }
    return std::nullopt;
  }
};

}  // namespace

TEST_CASE("train: a run stopped at a checkpoint and resumed ends with the same parameters, bit for bit") {
  forge_test::TempDir dir;
  Run whole(11);
  whole.train_from({0, 0});
  REQUIRE(whole.step == 15);

  for (std::int64_t stop : {7, 10}) {  // mid-epoch, and at an epoch's end
    INFO("stopped after step " << stop);
    const auto file = dir / ("ckpt" + std::to_string(stop) + ".safetensors");
    train::DataPosition at;
    {
      Run first(11);
      at = *first.train_from({0, 0}, stop);
      train::Checkpoint c = first.parts();
      c.position = at;
      c.step = first.step;
      c.metadata = {{"note", "stopped"}};
      train::save_checkpoint(file, c);
    }
    // A fresh run: other initial weights, another generator state, a fresh optimizer and schedule.
    Run resumed(99);
    const train::Checkpoint got = train::load_checkpoint(file, resumed.parts());
    CHECK(got.position == at);
    CHECK(got.step == stop);
    CHECK(got.metadata.at("note") == "stopped");
    resumed.step = got.step;
    CHECK(resumed.sched->steps() == stop);
    resumed.train_from(got.position);
    CHECK(resumed.step == 15);
    const auto want = whole.model->parameters(), have = resumed.model->parameters();
    REQUIRE(want.size() == have.size());
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(same_bits(want[i], have[i]));
    CHECK(resumed.opt->lr() == whole.opt->lr());
  }

  // Without the generator's state the dropout masks differ, and so do the parameters.
  {
    const auto file = dir / "no_rng.safetensors";
    Run first(11);
    const auto at = *first.train_from({0, 0}, 7);
    train::Checkpoint c = first.parts();
    c.context = nullptr;
    c.position = at;
    train::save_checkpoint(file, c);
    Run resumed(99);
    train::Checkpoint into = resumed.parts();
    into.context = nullptr;
    resumed.train_from(train::load_checkpoint(file, into).position);
    CHECK_FALSE(same_bits(whole.model->parameters()[0], resumed.model->parameters()[0]));
  }
}

TEST_CASE("train: a checkpoint that does not fit is refused and changes nothing") {
  forge_test::TempDir dir;
  const auto file = dir / "ckpt.safetensors";
  Run first(3);
  first.train_from({0, 0}, 4);
  train::save_checkpoint(file, first.parts());

  Run other(4);
  const std::vector<Tensor> before = [&] {
    std::vector<Tensor> out;
    for (const Tensor& p : other.model->parameters()) out.push_back(p.clone());
    return out;
  }();
  const double lr_before = other.opt->lr();
  const std::string rng_before = train::rng_state(other.ctx);
  auto unchanged = [&] {
    const auto now = other.model->parameters();
    for (std::size_t i = 0; i < now.size(); ++i) CHECK(same_bits(now[i], before[i]));
    CHECK(other.opt->steps() == 0);
    CHECK(other.opt->lr() == lr_before);
    CHECK(train::rng_state(other.ctx) == rng_before);
  };

  // Another optimizer type: refused before anything loads.
  optim::SGD sgd(other.model->parameters());
  train::Checkpoint wrong = other.parts();
  wrong.optimizer = &sgd;
  auto msg = FORGE_REQUIRE_ERROR(invalid_argument, "load_checkpoint", train::load_checkpoint(file, wrong));
  CHECK_THAT(msg, Catch::Contains("AdamW"));
  unchanged();

  // The same type over other parameters: the model loads, the optimizer refuses, the model is put back.
  optim::AdamW one_group(other.model->parameters());
  wrong.optimizer = &one_group;
  FORGE_REQUIRE_ERROR(invalid_argument, "AdamW.load_state_dict", train::load_checkpoint(file, wrong));
  unchanged();

  // A file without the schedule asked for.
  const auto partial = dir / "model_only.safetensors";
  train::save_checkpoint(partial, {.model = first.model.get()});
  msg = FORGE_REQUIRE_ERROR(invalid_argument, "load_checkpoint", train::load_checkpoint(partial, other.parts()));
  CHECK_THAT(msg, Catch::Contains("no optimizer state"));
  unchanged();
  // Only the model, for inference: loads.
  train::load_checkpoint(partial, {.model = other.model.get(), .context = nullptr});
  CHECK(same_bits(other.model->parameters()[0], first.model->parameters()[0]));

  // Not a checkpoint at all.
  const auto plain = dir / "plain.safetensors";
  forge::io::save_safetensors(plain, first.model->state_dict());
  FORGE_REQUIRE_ERROR(invalid_argument, "load_checkpoint", train::load_checkpoint(plain, other.parts()));
  FORGE_REQUIRE_ERROR(invalid_argument, "set_rng_state", train::set_rng_state(other.ctx, "12 not a state"));
  CHECK(train::rng_state(other.ctx) == rng_before);
}
