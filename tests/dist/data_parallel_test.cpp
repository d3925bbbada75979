// DataParallel against one process: each rank trains on its rows of a global
// batch, and also trains a reference model on the whole batch by itself;
// after N steps both must hold the same parameters (f32 tolerance). Each
// rank's context has its own seed, so the broadcast at construction matters.

#include <catch2/catch.hpp>

#include "dist_support.h"

using namespace forge;
using dist_test::options;

namespace {

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, fc3, spare;
  Mlp(ExecContext& ctx, bool with_spare = false) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(ctx, 6, 16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(ctx, 16, 16));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(ctx, 16, 3));
    if (with_spare) spare = register_module("spare", std::make_shared<nn::Linear>(ctx, 16, 3));
  }
  bool use_spare = false;
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(fc2->forward(relu(fc1->forward(x))));
    Tensor y = fc3->forward(h);
    return use_spare ? y + spare->forward(h) : y;
  }
};

// The global batch (the same on every rank: a context seeded alike).
struct Batch {
  Tensor x, y;
};
Batch global_batch(int rows, std::uint64_t seed) {
  ExecContext& ctx = ExecContext::current_or_throw("test");
  ctx.manual_seed(seed);
  return {ctx.randn({rows, 6}), ctx.randn({rows, 3})};
}

Batch rank_rows(const Batch& b, int rank, int size) {
  const std::int64_t per = b.x.size(0) / size;
  return {b.x.narrow(0, rank * per, per), b.y.narrow(0, rank * per, per)};
}

float max_difference(const nn::Module& a, const nn::Module& b) {
  float worst = 0;
  const auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].to_vector<float>(), vb = pb[i].to_vector<float>();
    for (std::size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]));
  }
  return worst;
}

void copy_parameters(const nn::Module& from, nn::Module& to) {
  autograd::NoGradGuard no_grad;
  const auto src = from.parameters(), dst = to.parameters();
  for (std::size_t i = 0; i < src.size(); ++i) const_cast<Tensor&>(dst[i]).copy_(src[i]);
}

// The reference: rank 0's initial parameters, the whole batch, one process.
std::shared_ptr<Mlp> reference_copy(ExecContext& ctx, const Mlp& ddp_model) {
  auto ref = std::make_shared<Mlp>(ctx, ddp_model.spare != nullptr);
  copy_parameters(ddp_model, *ref);
  return ref;
}

// One step of each: DataParallel on this rank's rows, the reference on all of them.
void step_both(dist::DataParallel& ddp, optim::Optimizer& opt, nn::Module& ref, optim::Optimizer& ref_opt,
               const Batch& all) {
  const Batch mine = rank_rows(all, ddp.group().rank(), ddp.group().size());
  mse_loss(ddp(mine.x), mine.y).backward();
  opt.step();
  opt.zero_grad();
  mse_loss(ref.forward(all.x), all.y).backward();
  ref_opt.step();
  ref_opt.zero_grad();
}

}  // namespace

TEST_CASE("dist: DataParallel on a split global batch equals one process on all of it", "[ddp]") {
  ExecContext ctx({.seed = 100 + static_cast<std::uint64_t>(dist_test::launched_rank())});
  dist::ProcessGroup group(ctx, options());
  const int size = group.size();
  for (double cap_mb : {25.0, 1e-5}) {  // one bucket; a bucket per parameter
    INFO("bucket_cap_mb " << cap_mb);
    auto model = std::make_shared<Mlp>(ctx);
    dist::DataParallel ddp(model, group, {.bucket_cap_mb = cap_mb});
    CHECK(ddp.stats().buckets == (cap_mb > 1 ? 1 : 6));
    auto ref = reference_copy(ctx, *model);
    CHECK(max_difference(*model, *ref) == 0);
    optim::Adam opt(model->parameters(), {.lr = 1e-2});
    optim::Adam ref_opt(ref->parameters(), {.lr = 1e-2});
    for (int step = 0; step < 5; ++step)
      step_both(ddp, opt, *ref, ref_opt, global_batch(4 * size, 7 + static_cast<std::uint64_t>(step)));
    CHECK(max_difference(*model, *ref) < 2e-5f);
    CHECK(ddp.stats().reductions == 5);
    // Every bucket started from a hook, before its pass ended.
    CHECK(ddp.stats().early_launches == 5 * ddp.stats().buckets);
    CHECK(ddp.stats().late_launches == 0);
  }
}

// An f64 gain on the MLP's output: a second dtype, so a second bucket.
struct GainedMlp : Mlp {
  Tensor gain;
  explicit GainedMlp(ExecContext& ctx) : Mlp(ctx) { gain = register_parameter("gain", ctx.ones({3}, DType::f64)); }
  Tensor forward(const Tensor& x) override {
    Tensor y = Mlp::forward(x);
    return y * gain.to(DType::f32);  // the cast is recorded last: backward reaches gain first
  }
};

TEST_CASE("dist: each bucket holds one dtype, and mixed dtypes train as in one process", "[ddp]") {
  ExecContext ctx({.seed = 120 + static_cast<std::uint64_t>(dist_test::launched_rank())});
  dist::ProcessGroup group(ctx, options());
  const int size = group.size();
  auto model = std::make_shared<GainedMlp>(ctx);
  dist::DataParallel ddp(model, group);
  // gain is registered first, so laid out last at first; its gradient is
  // ready first, so the first pass's order puts its bucket first.
  std::vector<std::vector<std::string>> names = ddp.bucket_names();
  REQUIRE(names.size() == 2);
  CHECK(names[1] == std::vector<std::string>{"gain"});
  CHECK(names[0].size() == 6);
  auto ref = std::make_shared<GainedMlp>(ctx);
  copy_parameters(*model, *ref);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    step_both(ddp, opt, *ref, ref_opt, global_batch(4 * size, 60 + static_cast<std::uint64_t>(step)));
    if (step == 0) {
      names = ddp.bucket_names();
      REQUIRE(names.size() == 2);
      CHECK(names[0] == std::vector<std::string>{"gain"});
      CHECK(names[1].size() == 6);
      CHECK(names[1].back().rfind("fc1.", 0) == 0);
    }
  }
  CHECK(ddp.stats().early_launches == 6);
  CHECK(max_difference(*model, *ref) < 2e-5f);  // the f64 gain included
}

TEST_CASE("dist: buckets start while backward is still running", "[ddp]") {
  ExecContext ctx({.seed = 3});
  dist::ProcessGroup group(ctx, options());
  auto model = std::make_shared<Mlp>(ctx);
  dist::DataParallel ddp(model, group, {.bucket_cap_mb = 1e-5});
  const auto names = ddp.bucket_names();
  REQUIRE(names.size() == 6);
  CHECK(names.front() == std::vector<std::string>{"fc3.bias"});
  CHECK(names.back() == std::vector<std::string>{"fc1.weight"});
  // fc1.weight's gradient is the last one backward finishes: by then the
  // buckets of fc3 and fc2 have started.
  std::int64_t started_before_fc1 = -1;
  auto handle = dist_test::named(*model->fc1, "weight").register_post_accumulate_grad_hook([&](const Tensor&) {
    started_before_fc1 = ddp.stats().early_launches;
  });
  const Batch b = global_batch(8, 1);
  mse_loss(ddp(b.x), b.y).backward();
  CHECK(started_before_fc1 >= 4);
  CHECK(ddp.stats().early_launches == 6);
  handle.remove();
}

TEST_CASE("dist: no_sync accumulates locally and the next pass reduces the sum", "[ddp]") {
  ExecContext ctx({.seed = 50 + static_cast<std::uint64_t>(dist_test::launched_rank())});
  dist::ProcessGroup group(ctx, options());
  const int size = group.size();
  auto model = std::make_shared<Mlp>(ctx);
  dist::DataParallel ddp(model, group);
  auto ref = reference_copy(ctx, *model);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    // Two micro-batches per rank, each half of the rank's rows.
    const Batch all = global_batch(8 * size, 20 + static_cast<std::uint64_t>(step));
    const Batch mine = rank_rows(all, group.rank(), size);
    const Batch first{mine.x.narrow(0, 0, 4), mine.y.narrow(0, 0, 4)};
    const Batch second{mine.x.narrow(0, 4, 4), mine.y.narrow(0, 4, 4)};
    {
      auto no_sync = ddp.no_sync();
      (mse_loss(ddp(first.x), first.y) * 0.5).backward();
    }
    const std::int64_t reduced = ddp.stats().reductions;
    (mse_loss(ddp(second.x), second.y) * 0.5).backward();
    CHECK(ddp.stats().reductions == reduced + 1);
    opt.step();
    opt.zero_grad();
    mse_loss(ref->forward(all.x), all.y).backward();
    ref_opt.step();
    ref_opt.zero_grad();
  }
  CHECK(max_difference(*model, *ref) < 2e-5f);
}

TEST_CASE("dist: only a forward through DataParallel arms its backward", "[ddp]") {
  ExecContext ctx({.seed = 11});
  dist::ProcessGroup group(ctx, options());
  auto model = std::make_shared<Mlp>(ctx);
  dist::DataParallel ddp(model, group);
  const Batch b = global_batch(4, 3);
  Tensor loss = mse_loss(ddp(b.x), b.y);
  {
    autograd::NoGradGuard no_grad;
    (void)ddp(b.x);  // an evaluation in between
  }
  {
    auto no_sync = ddp.no_sync();
    (void)ddp(b.x);  // and a forward under no_sync
  }
  loss.backward();
  CHECK(ddp.stats().reductions == 1);
  // A pass through the bare module stays local.
  model->zero_grad();
  mse_loss(model->forward(b.x), b.y).backward();
  CHECK(ddp.stats().reductions == 1);
}

TEST_CASE("dist: a parameter without a gradient is an error unless allowed", "[ddp]") {
  ExecContext ctx({.seed = 9});
  dist::ProcessGroup group(ctx, options());
  const Batch b = global_batch(4, 2);
  SECTION("refused by default, naming it, on every rank") {
    auto model = std::make_shared<Mlp>(ctx, /*with_spare=*/true);
    dist::DataParallel ddp(model, group);
    try {
      mse_loss(ddp(b.x), b.y).backward();
      FAIL("an unused parameter was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::backward);
      CHECK_THAT(e.what(), Catch::Contains("spare.bias") && Catch::Contains("find_unused_parameters"));
    }
    // The next pass works once the model uses everything.
    model->use_spare = true;
    mse_loss(ddp(b.x), b.y).backward();
    CHECK(dist_test::named(*model->spare, "weight").grad().defined());
  }
  SECTION("allowed: a gradient accumulated under no_sync is reduced in the next synced pass") {
    auto model = std::make_shared<Mlp>(ctx, /*with_spare=*/true);
    dist::DataParallel ddp(model, group, {.find_unused_parameters = true});
    const Batch mine = global_batch(4, 30 + static_cast<std::uint64_t>(group.rank()));  // rank-dependent rows
    model->use_spare = true;
    {
      auto no_sync = ddp.no_sync();
      mse_loss(ddp(mine.x), mine.y).backward();
    }
    const std::vector<float> local = dist_test::named(*model->spare, "bias").grad().to_vector<float>();
    model->use_spare = false;
    mse_loss(ddp(mine.x), mine.y).backward();
    Tensor g = dist_test::named(*model->spare, "bias").grad();
    REQUIRE(g.defined());
    // Every rank holds the mean of the ranks' accumulated gradients.
    Tensor sum = ctx.from_vector(local);
    group.all_reduce(sum, dist::ReduceOp::mean);
    const std::vector<float> want = sum.to_vector<float>(), got = g.to_vector<float>();
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
  }
  SECTION("allowed: unused everywhere keeps no .grad; used by one rank is averaged") {
    auto model = std::make_shared<Mlp>(ctx, /*with_spare=*/true);
    dist::DataParallel ddp(model, group, {.find_unused_parameters = true});
    mse_loss(ddp(b.x), b.y).backward();
    CHECK_FALSE(dist_test::named(*model->spare, "weight").grad().defined());
    CHECK(dist_test::named(*model->fc1, "weight").grad().defined());
    model->zero_grad();

    // Only rank 0 uses the spare head: every rank ends with rank 0's gradient / size.
    model->use_spare = group.rank() == 0;
    mse_loss(ddp(b.x), b.y).backward();
    Tensor g = dist_test::named(*model->spare, "bias").grad();
    REQUIRE(g.defined());
    Tensor g0 = g.clone();
    group.broadcast(g0, 0);
    CHECK(g.to_vector<float>() == g0.to_vector<float>());
    if (group.size() > 1 && group.is_main()) {
      // Rank 0's own gradient, computed again without DataParallel.
      model->zero_grad();
      mse_loss(model->forward(b.x), b.y).backward();
      const auto own = dist_test::named(*model->spare, "bias").grad().to_vector<float>();
      const auto avg = g0.to_vector<float>();
      for (std::size_t i = 0; i < own.size(); ++i) CHECK(avg[i] == Approx(own[i] / group.size()).margin(1e-6));
    } else if (group.size() > 1) {
      model->zero_grad();  // matches rank 0's extra pass: it reduced nothing (ddp not used)
    }
  }
}

TEST_CASE("dist: frozen parameters stay out; parameter groups train as in one process", "[ddp]") {
  ExecContext ctx({.seed = 70 + static_cast<std::uint64_t>(dist_test::launched_rank())});
  dist::ProcessGroup group(ctx, options());
  const int size = group.size();
  auto model = std::make_shared<Mlp>(ctx);
  model->fc1->requires_grad_(false);
  dist::DataParallel ddp(model, group, {.bucket_cap_mb = 1e-5});
  for (const auto& bucket : ddp.bucket_names())
    for (const std::string& name : bucket) CHECK(name.rfind("fc1.", 0) != 0);
  CHECK(ddp.stats().buckets == 4);
  auto ref = reference_copy(ctx, *model);
  ref->fc1->requires_grad_(false);
  auto groups = [](Mlp& m) {
    return std::vector<optim::ParamGroup>{
        {.params = m.fc2->parameters(), .options = {.lr = 0.05}},
        {.params = m.fc3->parameters(), .options = {.lr = 0.2, .momentum = 0.9}},
    };
  };
  optim::SGD opt(groups(*model), {.lr = 0.1});
  optim::SGD ref_opt(groups(*ref), {.lr = 0.1});
  for (int step = 0; step < 4; ++step)
    step_both(ddp, opt, *ref, ref_opt, global_batch(4 * size, 40 + static_cast<std::uint64_t>(step)));
  CHECK(max_difference(*model, *ref) < 2e-5f);
}

TEST_CASE("dist: construction makes every rank's parameters and buffers rank 0's", "[ddp]") {
  ExecContext ctx({.seed = 90 + static_cast<std::uint64_t>(dist_test::launched_rank())});
  dist::ProcessGroup group(ctx, options());
  auto model = std::make_shared<Mlp>(ctx);
  model->register_buffer("steps", ctx.full({2}, static_cast<double>(group.rank() + 1)));
  dist::DataParallel ddp(model, group);
  for (const Tensor& t : model->parameters()) {
    Tensor t0 = t.clone();
    group.broadcast(t0, 0);
    CHECK(t.to_vector<float>() == t0.to_vector<float>());
  }
  CHECK(dist_test::named(*model, "steps").to_vector<float>() == std::vector<float>{1, 1});
  // broadcast_buffers: a buffer changed on one rank is rank 0's again at the next forward.
  dist_test::named(*model, "steps").fill_(static_cast<double>(5 + group.rank()));
  (void)ddp(ctx.zeros({2, 6}));
  CHECK(dist_test::named(*model, "steps").to_vector<float>() == std::vector<float>{5, 5});
  CHECK_THROWS_AS(dist::DataParallel(model, group, {.bucket_cap_mb = 0}), Error);
}
