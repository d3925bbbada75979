// Concurrency (DESIGN §3, §5, §9): contexts driven by their own threads at
// once, buffers created on one thread and released on another (also after
// their context died), the thread-local current context and grad mode, one
// arena named by two threads, the DataLoader's prefetch thread, and
// checkpoints written by several threads. Every case is [concurrent]:
// scripts/test also runs them under ThreadSanitizer (the tsan preset).
//
// Catch2's assertions are not thread-safe, so worker threads only record
// what they saw; the test thread checks it after joining them.

#include <unistd.h>

#include <atomic>
#include <barrier>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "forge/data/dataloader.h"
#include "forge/forge.h"
#include "runtime/runtime_internal.h"
#include "support.h"

using namespace forge;
using forge_test::numbered_dataset;
using forge_test::TestContext;

namespace {

// Runs fn(0) ... fn(n - 1) on n threads at once and joins them.
void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (auto& t : threads) t.join();
}

// A blocking queue that hands values from one thread to another.
template <typename T>
class Handoff {
 public:
  void push(T value) {
    {
      std::lock_guard lock(mu_);
      items_.push_back(std::move(value));
    }
    cv_.notify_one();
  }
  void close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // The next value, or nullopt once the queue is closed and empty.
  std::optional<T> pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T value = std::move(items_.front());
    items_.pop_front();
    return value;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool closed_ = false;
};

// A barrier whose threads spin (yielding) instead of sleeping, so that they
// leave it together: a sleeping barrier wakes its threads one at a time.
class SpinBarrier {
 public:
  explicit SpinBarrier(int threads) : threads_(threads) {}
  void arrive_and_wait() {
    const std::uint64_t generation = generation_.load();
    if (arrived_.fetch_add(1) + 1 == threads_) {
      arrived_.store(0);
      generation_.fetch_add(1);
      return;
    }
    while (generation_.load() == generation) std::this_thread::yield();
  }

 private:
  const int threads_;
  std::atomic<int> arrived_{0};
  std::atomic<std::uint64_t> generation_{0};
};

std::vector<std::uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<std::uint32_t> out;
  for (float v : values) out.push_back(std::bit_cast<std::uint32_t>(v));
  return out;
}

// ---- training steps on a context of one's own ----

enum class Model { mlp, cnn };
constexpr std::uint64_t kTrainSeed = 20261130;
constexpr int kTrainSteps = 10;

struct TrainRun {
  std::vector<float> losses;
  std::vector<float> final_weight;  // the first parameter after the last step
  int pool_imbalances = 0;          // steps that did not end at the pool's baseline
  bool current_was_own = true;      // ExecContext::current() was this run's context throughout
  std::int64_t outstanding_at_end = -1;
};

std::shared_ptr<nn::Module> build(ExecContext& ctx, Model model) {
  if (model == Model::mlp)
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(ctx, 64, 512), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::LayerNorm>(ctx, 512), std::make_shared<nn::Linear>(ctx, 512, 4)});
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(ctx, 1, 8, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(ctx, 8 * 8 * 8, 10)});
}

// Builds a context with `threads` threads and trains `model` for
// kTrainSteps Adam steps, one exec scope per step (the layers are large
// enough that a 2-thread context runs its GEMMs and elementwise kernels on
// both threads); everything comes from the
// context's seeded generator, so two runs of one configuration may compare bits.
TrainRun train_run(Model model, int threads) {
  TrainRun run;
  ExecContext ctx({.threads = threads, .seed = kTrainSeed});
  {
    auto net = build(ctx, model);
    optim::Adam adam(net->parameters(), {.lr = 1e-2});
    // Free creation functions find this thread's context, whatever the others do.
    const Tensor x = model == Model::mlp ? forge::randn({128, 64}) : forge::randn({32, 1, 16, 16});
    std::vector<std::int64_t> labels(32);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i * 3 % 10);
    const Tensor y = model == Model::mlp ? ctx.randn({128, 4}) : ctx.from_vector(labels);
    const std::int64_t baseline = ctx.pool().outstanding();
    for (int step = 0; step < kTrainSteps; ++step) {
      {
        auto scope = ctx.open_exec_scope();
        const Tensor out = net->forward(x);
        const Tensor loss = model == Model::mlp ? mse_loss(out, y) : cross_entropy(out, y);
        loss.backward();
        adam.step();
        adam.zero_grad();
        run.losses.push_back(loss.item<float>());
      }
      if (ctx.pool().outstanding() != baseline) ++run.pool_imbalances;
      if (ExecContext::current() != &ctx) run.current_was_own = false;
    }
    run.final_weight = net->parameters().front().to_vector<float>();
  }
  run.outstanding_at_end = ctx.pool().outstanding();
  return run;
}

}  // namespace

TEST_CASE("concurrency: 8 threads training their own contexts match single-threaded runs bit for bit", "[concurrent]") {
  // Four configurations (MLP or CNN, contexts of 1 or 2 threads), each run
  // alone first, then twice at once on 8 threads, two rounds.
  struct Config {
    Model model;
    int threads;
  };
  const Config configs[] = {{Model::mlp, 1}, {Model::cnn, 1}, {Model::mlp, 2}, {Model::cnn, 2}};
  std::vector<TrainRun> reference;
  for (const Config& c : configs) reference.push_back(train_run(c.model, c.threads));
  for (const TrainRun& r : reference) {
    REQUIRE(r.losses.size() == static_cast<std::size_t>(kTrainSteps));
    CHECK(r.losses.back() < r.losses.front());  // it trains
  }

  constexpr int kThreads = 8;
  for (int round = 0; round < 2; ++round) {
    std::vector<TrainRun> runs(kThreads);
    run_threads(kThreads, [&](int i) {
      const Config& c = configs[i % 4];
      runs[static_cast<std::size_t>(i)] = train_run(c.model, c.threads);
    });
    for (int i = 0; i < kThreads; ++i) {
      INFO("round " << round << ", thread " << i);
      const TrainRun& run = runs[static_cast<std::size_t>(i)];
      const TrainRun& ref = reference[static_cast<std::size_t>(i % 4)];
      CHECK(bits_of(run.losses) == bits_of(ref.losses));
      CHECK(bits_of(run.final_weight) == bits_of(ref.final_weight));
      CHECK(run.pool_imbalances == 0);
      CHECK(run.current_was_own);
      CHECK(run.outstanding_at_end == 0);
    }
  }
}

namespace {

// What one thread hands another: tensors, views of them, saved autograd
// values (inside a graph), a .grad and bare buffers, with the values they
// must still hold when they arrive.
struct Parcel {
  std::vector<Tensor> tensors;
  std::vector<std::vector<float>> expected;  // tensors[i]'s values
  std::vector<Ref<Buffer>> buffers;          // bare references: no TensorImpl
  Tensor graph;                              // a loss whose nodes hold saved tensors
};

Parcel make_parcel(ExecContext& ctx, int i) {
  Parcel p;
  const Tensor a = ctx.arange(0, 64).reshape({8, 8}) + static_cast<double>(i);
  const Tensor w = ctx.full({8, 8}, 0.5).requires_grad_();
  const Tensor loss = (a * w).tanh().sum();
  Tensor w2 = ctx.ones({8}).requires_grad_();
  (a.sum({0}) * w2).sum().backward();  // w2.grad() == a's column sums
  p.tensors = {a, a.transpose(0, 1), a.narrow(0, 2, 3), a.select(1, 5), w2.grad(), w2, w};
  for (const Tensor& t : p.tensors) p.expected.push_back(t.detach().to_vector<float>());
  p.buffers = {ctx.ones({1000}).buffer(), a.buffer()};
  p.graph = loss;
  return p;
}

// The consumer's side: checks what arrived, then drops it here. Returns the
// number of tensors whose values were wrong.
int receive(Parcel& p) {
  int wrong = 0;
  for (std::size_t k = 0; k < p.tensors.size(); ++k)
    if (p.tensors[k].detach().to_vector<float>() != p.expected[k]) ++wrong;
  p = Parcel();
  return wrong;
}

}  // namespace

TEST_CASE("concurrency: tensors, views, saved values and grads released on another thread balance the pool",
          "[concurrent]") {
  TestContext ctx;
  const PoolStats before = ctx.stats();
  constexpr int kParcels = 1000;
  Handoff<Parcel> queue;
  std::atomic<int> wrong{0}, received{0};
  std::thread consumer([&] {
    while (auto p = queue.pop()) {
      wrong += receive(*p);
      ++received;
    }
  });
  // The producer keeps using the context (in exec scopes, too) while the
  // consumer releases into its pool.
  for (int i = 0; i < kParcels; ++i) {
    queue.push(make_parcel(ctx, i));
    auto scope = ctx.open_exec_scope();
    const Tensor scratch = ctx.randn({32, 32}).matmul(ctx.randn({32, 32})).relu();
    CHECK(scratch.size(0) == 32);
  }
  queue.close();
  consumer.join();
  CHECK(received == kParcels);
  CHECK(wrong == 0);
  const PoolStats after = ctx.stats();
  CHECK(after.outstanding == before.outstanding);
  CHECK(after.live_bytes == before.live_bytes);
  // Every block is either live, cached or given back.
  CHECK(after.system_allocations - after.system_frees ==
        before.system_allocations - before.system_frees + after.cached_blocks - before.cached_blocks);
  CHECK(after.acquires > before.acquires + kParcels);
}

TEST_CASE("concurrency: a context destroyed while another thread holds its tensors and buffers", "[concurrent]") {
  // Each round: a thread builds a context, hands tensors and bare buffers
  // away, and destroys the context, before or while the receiver checks
  // them; the receiver releases them later, the last release deleting the
  // runtime and the orphaned pool core.
  constexpr int kRounds = 200;
  Handoff<Parcel> queue;
  std::atomic<int> wrong{0}, outstanding_mismatch{0};
  std::thread producer([&] {
    for (int i = 0; i < kRounds; ++i) {
      std::optional<Parcel> after_death;
      {
        ExecContext ctx({.threads = 1 + i % 2, .max_cached_bytes = i % 3 == 0 ? 0 : std::size_t{1} << 20});
        Parcel p = make_parcel(ctx, i);
        { auto dropped_here = ctx.ones({4096}); }  // something cached when the context dies
        if (i % 2 == 0)
          queue.push(std::move(p));  // the context dies while the receiver may hold them
        else
          after_death = std::move(p);
      }
      if (after_death) queue.push(std::move(*after_death));
    }
    queue.close();
  });
  std::thread receiver([&] {
    while (auto p = queue.pop()) {
      // The pool outlives its context while the tensors hold its runtime.
      const PoolStats s = p->tensors.front().runtime().pool().stats();
      if (s.outstanding <= 0) ++outstanding_mismatch;
      Ref<Buffer> last = p->buffers.front();  // outlives every tensor, so the runtime too
      wrong += receive(*p);
      const auto* bytes = reinterpret_cast<const float*>(last->data());
      if (bytes[0] != 1.0f || bytes[999] != 1.0f) ++wrong;
      last.reset();  // frees the block and the orphaned core
    }
  });
  producer.join();
  receiver.join();
  CHECK(wrong == 0);
  CHECK(outstanding_mismatch == 0);
}

TEST_CASE("concurrency: a context destroyed on another thread leaves its own thread's current context",
          "[concurrent]") {
  TestContext outer;
  constexpr int kRounds = 300;
  Handoff<ExecContext*> to_killer;
  Handoff<int> killed;
  std::atomic<int> wrong{0};
  std::thread owner([&] {
    for (int i = 0; i < kRounds; ++i) {
      auto* ctx = new ExecContext({.threads = 1});
      if (ExecContext::current() != ctx) ++wrong;
      Tensor t = forge::ones({16});  // made on ctx through the current context
      if (&t.runtime() != &ctx->runtime()) ++wrong;
      to_killer.push(ctx);
      (void)killed.pop();
      // The context died on the other thread: this thread no longer sees it.
      if (ExecContext::current() != nullptr) ++wrong;
      if (t.to_vector<float>() != std::vector<float>(16, 1.0f)) ++wrong;
    }
    to_killer.close();
  });
  std::thread killer([&] {
    while (auto ctx = to_killer.pop()) {
      if (ExecContext::current() != nullptr) ++wrong;  // another thread's context is never current here
      delete *ctx;
      killed.push(0);
    }
  });
  owner.join();
  killer.join();
  CHECK(wrong == 0);
  CHECK(ExecContext::current() == &outer);  // this thread's context is untouched
  CHECK(&forge::zeros({2}).runtime() == &outer.runtime());
}

TEST_CASE("concurrency: nested contexts on 8 threads: each thread's current context is its innermost own",
          "[concurrent]") {
  constexpr int kThreads = 8, kRounds = 100;
  std::atomic<int> wrong{0};
  run_threads(kThreads, [&](int) {
    ExecContext outer({.threads = 1});
    for (int r = 0; r < kRounds; ++r) {
      {
        ExecContext inner({.threads = 1});
        if (ExecContext::current() != &inner || &forge::zeros({4}).runtime() != &inner.runtime()) ++wrong;
      }
      if (ExecContext::current() != &outer || &forge::ones({4}).runtime() != &outer.runtime()) ++wrong;
    }
    if (outer.pool().outstanding() != 0) ++wrong;
  });
  CHECK(wrong == 0);
}

TEST_CASE("concurrency: grad mode is per thread", "[concurrent]") {
  // One thread records while the other holds a NoGradGuard, in lock step,
  // then they swap roles; each on a context of its own.
  constexpr int kRounds = 200;
  std::barrier sync(2);
  std::atomic<int> wrong{0};
  run_threads(2, [&](int me) {
    ExecContext ctx({.threads = 1});
    const Tensor w = ctx.ones({4}).requires_grad_();
    for (int r = 0; r < kRounds; ++r) {
      const bool off = (r + me) % 2 == 0;
      std::optional<autograd::NoGradGuard> guard;
      if (off) guard.emplace();
      sync.arrive_and_wait();  // the other thread has set its own mode too
      const Tensor y = w * 2.0;
      if (y.requires_grad() == off || autograd::GradMode::is_enabled() == off) ++wrong;
      sync.arrive_and_wait();
    }
    if (!autograd::GradMode::is_enabled()) ++wrong;  // every guard restored
  });
  CHECK(wrong == 0);
}

namespace {

// One call on the shared arena, as seen by the thread that made it.
struct ArenaAttempt {
  enum Outcome { fresh, stale, contended, other, corrupt } outcome;
  std::uint64_t start, end;  // stamps of one clock shared by both threads
};

}  // namespace

TEST_CASE("concurrency: one arena named by two threads: only overlapping calls are contended", "[concurrent]") {
  // Both threads call masked_select into the same arena, released at once by
  // a spinning barrier each round, until a few calls were contended. A call
  // that finds the arena busy is contended; the other's output must be
  // intact. When both got through, they ran one after the other and the
  // earlier output is stale. Every contended call must overlap (by a shared
  // clock) the other thread's call, which succeeded.
  TestContext ctx;
  Arena arena{ctx};
  constexpr int kWanted = 3, kMaxRounds = 20000;  // the round limit matters only on a loaded machine
  constexpr std::int64_t kN = 1 << 18;
  std::vector<Tensor> xs, masks;
  std::vector<std::vector<float>> expected(2);
  for (std::size_t t = 0; t < 2; ++t) {
    std::vector<float> values(kN);
    std::vector<bool> mask(kN);
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<float>(i * (t + 1));
      mask[i] = i % (t + 2) == 0;
      if (mask[i]) expected[t].push_back(values[i]);
    }
    xs.push_back(ctx.from_vector(values));
    masks.push_back(ctx.from_vector(mask));
  }
  std::atomic<std::uint64_t> clock{0};
  std::atomic<int> contended_so_far{0};
  SpinBarrier sync(2);
  std::vector<std::vector<ArenaAttempt>> log(2);
  run_threads(2, [&](int me) {
    const auto t = static_cast<std::size_t>(me);
    Tensor out;
    for (int r = 0; r < kMaxRounds; ++r) {
      sync.arrive_and_wait();
      if (contended_so_far.load() >= kWanted) break;  // both threads read it between the same two barriers
      ArenaAttempt a{ArenaAttempt::other, clock.fetch_add(1), 0};
      try {
        out = masked_select(xs[t], masks[t], &arena);
        a.outcome = ArenaAttempt::fresh;
      } catch (const Error& e) {
        out = Tensor();
        if (e.code() == ErrorCode::contended) a.outcome = ArenaAttempt::contended;
      }
      a.end = clock.fetch_add(1);
      sync.arrive_and_wait();  // both calls are over: the outputs hold still
      if (a.outcome == ArenaAttempt::fresh) {
        if (out.buffer()->stale())
          a.outcome = ArenaAttempt::stale;
        else if (out.to_vector<float>() != expected[t])
          a.outcome = ArenaAttempt::corrupt;
      }
      if (a.outcome == ArenaAttempt::contended) ++contended_so_far;
      log[t].push_back(a);
    }
  });

  REQUIRE(log[0].size() == log[1].size());
  int contended = 0, sequential = 0;
  for (std::size_t r = 0; r < log[0].size(); ++r) {
    INFO("round " << r);
    const ArenaAttempt& a = log[0][r];
    const ArenaAttempt& b = log[1][r];
    CHECK(a.outcome != ArenaAttempt::other);
    CHECK(b.outcome != ArenaAttempt::other);
    CHECK(a.outcome != ArenaAttempt::corrupt);
    CHECK(b.outcome != ArenaAttempt::corrupt);
    // Exactly one of the two outputs is the arena's current one.
    CHECK((a.outcome == ArenaAttempt::fresh) != (b.outcome == ArenaAttempt::fresh));
    for (const auto& [mine, theirs] : {std::pair{a, b}, std::pair{b, a}}) {
      if (mine.outcome == ArenaAttempt::contended) {
        ++contended;
        CHECK(theirs.outcome == ArenaAttempt::fresh);
        CHECK((theirs.start < mine.end && mine.start < theirs.end));  // the calls overlapped
      }
      if (mine.outcome == ArenaAttempt::stale) {
        ++sequential;
        CHECK(theirs.outcome == ArenaAttempt::fresh);
      }
    }
  }
  UNSCOPED_INFO("contended rounds " << contended << ", sequential rounds " << sequential);
  CHECK(contended >= 1);
  CHECK(contended + sequential == static_cast<int>(log[0].size()));
  // The arena serves the next call, from this thread.
  CHECK(masked_select(xs[0], masks[0], &arena).to_vector<float>() == expected[0]);
}

TEST_CASE("concurrency: arena calls from two threads without pacing never share the arena", "[concurrent]") {
  // Unpaced attempts, in batches that start together, until one was
  // contended: a call that gets the arena fills its outputs with its
  // thread's pattern, checks that nobody else is inside, re-reads them and
  // commits; a refused one is contended and must have overlapped a held call.
  TestContext ctx;
  Arena arena{ctx};
  constexpr int kBatch = 500, kMaxBatches = 20;
  std::atomic<int> inside{0}, shared{0}, corrupt{0}, other{0}, contended_so_far{0};
  std::atomic<std::uint64_t> clock{0};
  SpinBarrier sync(2);
  std::vector<std::vector<ArenaAttempt>> log(2);
  run_threads(2, [&](int me) {
    const double mark = me + 1.0;
    for (int i = 0; i < kBatch * kMaxBatches; ++i) {
      if (i % kBatch == 0) {
        sync.arrive_and_wait();
        if (contended_so_far.load() > 0) break;  // read between the same two barriers by both threads
        sync.arrive_and_wait();
      }
      ArenaAttempt a{ArenaAttempt::other, clock.fetch_add(1), 0};
      try {
        ArenaCall call("test", &arena, {});
        if (inside.fetch_add(1) != 0) ++shared;
        Tensor first = call.allocate({64}, DType::f32), second = call.allocate({1 + i % 300}, DType::f32);
        first.fill_(mark);
        second.fill_(-mark);
        std::this_thread::yield();
        for (float v : first.to_vector<float>()) corrupt += v != static_cast<float>(mark);
        for (float v : second.to_vector<float>()) corrupt += v != static_cast<float>(-mark);
        inside.fetch_sub(1);
        call.commit();
        a.outcome = ArenaAttempt::fresh;
      } catch (const Error& e) {
        if (e.code() == ErrorCode::contended) {
          a.outcome = ArenaAttempt::contended;
          ++contended_so_far;
        } else {
          ++other;
        }
      }
      a.end = clock.fetch_add(1);
      log[static_cast<std::size_t>(me)].push_back(a);
    }
  });
  CHECK(shared == 0);
  CHECK(corrupt == 0);
  CHECK(other == 0);
  int contended = 0, unexplained = 0;
  for (int me = 0; me < 2; ++me) {
    const auto& theirs = log[static_cast<std::size_t>(1 - me)];
    for (const ArenaAttempt& a : log[static_cast<std::size_t>(me)]) {
      if (a.outcome != ArenaAttempt::contended) continue;
      ++contended;
      // Their attempts are in stamp order: find one that was held and overlapped ours.
      bool overlapped = false;
      for (const ArenaAttempt& b : theirs)
        if (b.outcome == ArenaAttempt::fresh && b.start < a.end && a.start < b.end) overlapped = true;
      unexplained += !overlapped;
    }
  }
  const std::size_t attempts = log[0].size() + log[1].size();
  UNSCOPED_INFO("contended attempts " << contended << " of " << attempts);
  CHECK(contended >= 1);
  CHECK(unexplained == 0);
  CHECK(arena.stats().calls == attempts - static_cast<std::size_t>(contended));
}

namespace {

// Whether a batch's rows are the samples its targets name, after the transform (x2).
bool batch_consistent(const data::Batch& b, std::int64_t width) {
  const auto ids = b.target.to_vector<std::int64_t>();
  const auto values = b.input.to_vector<float>();
  if (values.size() != ids.size() * static_cast<std::size_t>(width)) return false;
  for (std::size_t r = 0; r < ids.size(); ++r)
    for (std::size_t j = 0; j < static_cast<std::size_t>(width); ++j)
      if (values[r * static_cast<std::size_t>(width) + j] != 2.0f * static_cast<float>(ids[r])) return false;
  return true;
}

}  // namespace

TEST_CASE("concurrency: DataLoader prefetch over many epochs and loaders destroyed mid-epoch", "[concurrent]") {
  // Four threads, each with its own context and loader, run full epochs
  // (every sample exactly once, rows matching their targets) and abandon
  // loaders after k batches, with the prefetch thread busy or idle.
  constexpr int kThreads = 4, kEpochs = 25, kAbandoned = 40;
  constexpr std::int64_t kSamples = 203, kWidth = 5, kBatch = 16;
  std::atomic<int> bad_epochs{0}, bad_batches{0}, leaks{0};
  run_threads(kThreads, [&](int me) {
    ExecContext ctx({.threads = 1 + me % 2});
    {
      const auto [inputs, targets] = numbered_dataset(ctx, kSamples, kWidth);
      const auto twice = [](const Tensor& x) { return x * 2.0; };
      data::DataLoader loader(ctx, inputs, targets,
                              {.batch_size = kBatch, .seed = static_cast<std::uint64_t>(me), .transform = twice});
      for (std::int64_t e = 0; e < kEpochs; ++e) {
        std::vector<int> seen(kSamples, 0);
        for (const data::Batch& b : loader.epoch(e)) {
          if (!batch_consistent(b, kWidth)) ++bad_batches;
          for (std::int64_t id : b.target.to_vector<std::int64_t>()) ++seen[static_cast<std::size_t>(id)];
          if (b.index % 4 == me) std::this_thread::yield();  // a slow step now and then
        }
        if (seen != std::vector<int>(kSamples, 1)) ++bad_epochs;
      }
      for (int k = 0; k < kAbandoned; ++k) {
        data::DataLoader early(ctx, inputs, targets,
                               {.batch_size = kBatch, .seed = static_cast<std::uint64_t>(k), .transform = twice});
        early.begin_epoch(k);
        for (int taken = 0; taken < k % 5; ++taken)
          if (auto b = early.next(); !b || !batch_consistent(*b, kWidth)) ++bad_batches;
        if (k % 3 == 0) early.begin_epoch(k + 1);  // restart while a batch may be in flight
      }                                            // destroyed with the worker gathering, idle, or holding a batch
    }
    if (ctx.pool().outstanding() != 0) ++leaks;
  });
  CHECK(bad_epochs == 0);
  CHECK(bad_batches == 0);
  CHECK(leaks == 0);
}

TEST_CASE("concurrency: 8 threads saving checkpoints to one path leave one whole file", "[concurrent]") {
  // Each thread writes its own values (thread i: all i) to a shared path and
  // a path of its own, several times; the temporaries never collide, and the
  // shared file is whole: one writer's tensors, never a mix.
  const auto dir = std::filesystem::temp_directory_path() / ("forge_concurrency_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto shared = dir / "shared.safetensors";
  constexpr int kThreads = 8, kSaves = 4;
  std::atomic<int> failures{0};
  run_threads(kThreads, [&](int me) {
    ExecContext ctx({.threads = 1});
    StateDict dict;
    dict.emplace("a", ctx.full({64}, me));
    dict.emplace("b", ctx.full({3, 7}, me));
    const auto own = dir / ("own" + std::to_string(me) + ".safetensors");
    try {
      for (int s = 0; s < kSaves; ++s) {
        io::save_safetensors(shared, dict);
        io::save_safetensors(own, dict);
      }
      const StateDict back = io::load_safetensors(ctx, own);
      if (back.at("a").to_vector<float>() != std::vector<float>(64, static_cast<float>(me))) ++failures;
    } catch (const Error&) {
      ++failures;
    }
  });
  CHECK(failures == 0);
  {
    TestContext ctx;
    const StateDict back = io::load_safetensors(ctx, shared);
    const auto a = back.at("a").to_vector<float>(), b = back.at("b").to_vector<float>();
    CHECK(a == std::vector<float>(64, a.front()));
    CHECK(b == std::vector<float>(21, a.front()));
  }
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == kThreads + 1);  // no temporary left behind
  std::filesystem::remove_all(dir);
}

namespace {

// Runs fn on another thread and returns the ErrorCode it threw, or nullopt;
// what() of the error goes to `message`.
std::optional<ErrorCode> code_on_other_thread(const std::function<void()>& fn, std::string* message = nullptr) {
  std::optional<ErrorCode> code;
  std::thread other([&] {
    try {
      fn();
    } catch (const Error& e) {
      code = e.code();
      if (message) *message = e.what();
    }
  });
  other.join();
  return code;
}

std::string thread_name(std::thread::id id) {
  std::ostringstream out;
  out << id;
  return out.str();
}

}  // namespace

TEST_CASE("concurrency: another thread's scope or op on a context with open exec scopes is contended", "[concurrent]") {
  // Note [One driving thread]: the scope stack is this thread's while a
  // scope is open; another thread opening a scope or running an op is
  // refused, naming the context and both threads, and changes nothing.
  TestContext ctx;
  const PoolStats before = ctx.stats();
  const std::string self = thread_name(std::this_thread::get_id());
  {
    auto scope = ctx.open_exec_scope();
    const Tensor held = ctx.ones({16});
    std::string message;
    CHECK(code_on_other_thread([&] { auto theirs = ctx.open_exec_scope(); }, &message) == ErrorCode::contended);
    CHECK(message.rfind("[open_exec_scope] ExecContext ", 0) == 0);
    CHECK(message.find("thread " + self) != std::string::npos);
    CHECK(code_on_other_thread([&] { (void)ctx.zeros({8}); }, &message) == ErrorCode::contended);
    CHECK(message.rfind("[zeros] ", 0) == 0);
    CHECK(code_on_other_thread([&] { (void)forge::add(held, held); }) == ErrorCode::contended);
    CHECK(scope.is_open());
    CHECK(scope.stats().buffers == 1);   // nothing of the other thread's was adopted
    auto inner = ctx.open_exec_scope();  // nesting on the owning thread still works
    (void)(held * 2.0);
    CHECK(inner.stats().buffers == 1);
  }
  // With every scope closed, the stack is nobody's: the other thread may
  // now open scopes of its own, and this thread is the one refused meanwhile.
  std::string seen_here;
  CHECK_FALSE(code_on_other_thread([&] {
    auto theirs = ctx.open_exec_scope();
    (void)(ctx.ones({4}) + 1.0);
    const auto mine = code_on_other_thread([&] { auto s = ctx.open_exec_scope(); }, &seen_here);
    if (mine != ErrorCode::contended) throw Error(ErrorCode::internal, "the owner's scope was not defended");
  }));
  CHECK(seen_here.find("[open_exec_scope]") == 0);
  auto again = ctx.open_exec_scope();
  CHECK(again.is_open());
  again.close();
  CHECK(ctx.stats().outstanding == before.outstanding);
}

TEST_CASE("concurrency: the RNG is leased to one thread: another thread's draw meanwhile is contended",
          "[concurrent]") {
  TestContext ctx;
  ctx.manual_seed(5);
  const std::vector<float> expected = ctx.randn({64}).to_vector<float>();
  ctx.manual_seed(5);
  {
    const forge::detail::Generator::Lease lease = ctx.runtime().generator().lease("test");
    std::string message;
    CHECK(code_on_other_thread([&] { (void)ctx.randn({64}); }, &message) == ErrorCode::contended);
    CHECK(message.rfind("[randn] ExecContext ", 0) == 0);
    CHECK(message.find("random generator is in use by thread " + thread_name(std::this_thread::get_id())) !=
          std::string::npos);
    CHECK(code_on_other_thread([&] { (void)ctx.rand({4}); }) == ErrorCode::contended);
    CHECK(code_on_other_thread([&] { ctx.manual_seed(1); }) == ErrorCode::contended);
    CHECK(code_on_other_thread([&] { (void)forge::dropout(ctx.ones({8}), 0.5); }) == ErrorCode::contended);
    // The holder itself may draw (a lease is re-entrant on its thread).
  }
  // Refused draws took nothing from the generator.
  CHECK(ctx.randn({64}).to_vector<float>() == expected);
}

TEST_CASE("concurrency: threads racing for one context's scopes and RNG get results or contended, never corruption",
          "[concurrent]") {
  // The misuse the documentation forbids, done on purpose: 4 threads open
  // scopes, draw and compute on one context at once. Each attempt either
  // completes with correct values or is refused as contended; afterwards the
  // pool is back at its baseline (ASan and TSan watch the rest).
  TestContext ctx(forge_test::context_options(1));
  const PoolStats before = ctx.stats();
  constexpr int kThreads = 4, kRounds = 300;
  std::atomic<int> completed{0}, contended{0}, wrong{0}, other{0};
  run_threads(kThreads, [&](int me) {
    for (int r = 0; r < kRounds; ++r) {
      try {
        auto scope = ctx.open_exec_scope();
        const Tensor x = ctx.randn({32});
        const Tensor y = (x * 0.0 + static_cast<double>(me)).sum();
        if (y.item<float>() != 32.0f * static_cast<float>(me)) ++wrong;
        ++completed;
      } catch (const Error& e) {
        ++(e.code() == ErrorCode::contended ? contended : other);
      }
    }
  });
  UNSCOPED_INFO("completed " << completed << ", contended " << contended);
  CHECK(wrong == 0);
  CHECK(other == 0);
  CHECK(completed + contended == kThreads * kRounds);
  CHECK(completed > 0);
  CHECK(ctx.stats().outstanding == before.outstanding);
  CHECK(ctx.stats().live_bytes == before.live_bytes);
}
