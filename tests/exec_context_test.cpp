// ExecContext (DESIGN §5): the thread-local current context, the free
// creation functions, thread counts (options and FORGE_NUM_THREADS), seeding
// (FORGE_SEED, manual_seed), CUDA devices in a build without them, and
// tensors of two contexts.

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::DType;
using forge::ErrorCode;
using forge::ExecContext;
using forge::ExecContextOptions;
using forge::Tensor;
using forge_test::context_options;
using forge_test::EnvGuard;
using forge_test::TestContext;

namespace {

bool has_cuda_device() { return forge::cuda_built() && forge::cuda_device_count() > 0; }

}  // namespace

// ---------------------------------------------------------------------------
// The current context

TEST_CASE("exec_context: current() is the innermost live context and is restored when it dies") {
  ExecContext* const before = ExecContext::current();
  {
    TestContext a;
    CHECK(ExecContext::current() == &a);
    CHECK(&ExecContext::current_or_throw("test") == &a);
    {
      TestContext b;
      CHECK(ExecContext::current() == &b);
      {
        forge::ExecContext c(context_options(1));
        CHECK(ExecContext::current() == &c);
      }
      CHECK(ExecContext::current() == &b);
    }
    CHECK(ExecContext::current() == &a);
  }
  CHECK(ExecContext::current() == before);
}

TEST_CASE("exec_context: current() is restored when contexts die out of order") {
  ExecContext* const before = ExecContext::current();
  std::optional<TestContext> a, b, c;
  a.emplace();
  b.emplace();
  c.emplace();
  CHECK(ExecContext::current() == &*c);
  b.reset();  // the middle one dies first: the innermost is still c
  CHECK(ExecContext::current() == &*c);
  a.reset();
  CHECK(ExecContext::current() == &*c);
  // A new one is innermost now; then c's death leaves it current.
  std::optional<TestContext> d;
  d.emplace();
  CHECK(ExecContext::current() == &*d);
  c.reset();
  CHECK(ExecContext::current() == &*d);
  d.reset();
  CHECK(ExecContext::current() == before);
}

TEST_CASE("exec_context: current() is per thread") {
  TestContext ctx;
  ExecContext* seen_before = &ctx;
  ExecContext* seen_inside = nullptr;
  ExecContext* seen_after = &ctx;
  std::optional<ErrorCode> code;
  std::string message;
  std::thread worker([&] {
    seen_before = ExecContext::current();
    try {
      (void)forge::zeros({2});
    } catch (const forge::Error& e) {
      code = e.code();
      message = e.what();
    }
    {
      forge::ExecContext own(context_options(1));
      seen_inside = ExecContext::current();
      const Tensor t = forge::ones({3});
      if (&t.runtime() != &own.runtime()) seen_inside = nullptr;
    }
    seen_after = ExecContext::current();
  });
  worker.join();
  CHECK(seen_before == nullptr);  // the main thread's context is not this thread's
  REQUIRE(code.has_value());
  CHECK(*code == ErrorCode::invalid_argument);
  CHECK(message.rfind("[zeros]", 0) == 0);
  CHECK(seen_inside != nullptr);
  CHECK(seen_after == nullptr);
  CHECK(ExecContext::current() == &ctx);  // unchanged here
}

// ---------------------------------------------------------------------------
// Free creation functions

TEST_CASE("exec_context: the free creation functions use the current context") {
  TestContext outer;
  {
    const Tensor z = forge::zeros({2, 3});
    CHECK(&z.runtime() == &outer.runtime());
    CHECK(z.to_vector<float>() == std::vector<float>(6, 0.0f));
    CHECK(z.dtype() == DType::f32);
  }
  {
    TestContext inner;
    const Tensor o = forge::ones({4}, DType::f64);
    CHECK(&o.runtime() == &inner.runtime());
    CHECK(o.to_vector<double>() == std::vector<double>(4, 1.0));
    const Tensor f = forge::full({2}, 2.5);
    CHECK(&f.runtime() == &inner.runtime());
    CHECK(f.to_vector<float>() == std::vector<float>{2.5f, 2.5f});
    const Tensor v = forge::from_vector<std::int32_t>({1, 2, 3});
    CHECK(&v.runtime() == &inner.runtime());
    CHECK(v.dtype() == DType::i32);
    const Tensor r = forge::arange(0, 5);
    CHECK(r.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
    const Tensor e = forge::eye(2);
    CHECK(e.to_vector<float>() == std::vector<float>{1, 0, 0, 1});
    const Tensor l = forge::linspace(0, 1, 3);
    CHECK(l.to_vector<float>() == std::vector<float>{0.0f, 0.5f, 1.0f});
    const Tensor u = forge::rand({8});
    const Tensor n = forge::randn({8});
    const Tensor m = forge::empty({3, 3});
    CHECK(&u.runtime() == &inner.runtime());
    CHECK(&n.runtime() == &inner.runtime());
    CHECK(&m.runtime() == &inner.runtime());
    CHECK(inner.pool().outstanding() == 9);
    CHECK(outer.pool().outstanding() == 0);
  }
  const Tensor again = forge::ones({1});
  CHECK(&again.runtime() == &outer.runtime());
}

TEST_CASE("exec_context: the free creation functions throw invalid_argument when no context is alive") {
  REQUIRE(ExecContext::current() == nullptr);  // no test case leaves a context behind
  FORGE_REQUIRE_ERROR(invalid_argument, "zeros", forge::zeros({2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "ones", forge::ones({2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "empty", forge::empty({2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "full", forge::full({2}, 1.0));
  FORGE_REQUIRE_ERROR(invalid_argument, "arange", forge::arange(0, 3));
  FORGE_REQUIRE_ERROR(invalid_argument, "linspace", forge::linspace(0, 1, 3));
  FORGE_REQUIRE_ERROR(invalid_argument, "eye", forge::eye(3));
  FORGE_REQUIRE_ERROR(invalid_argument, "rand", forge::rand({2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "randn", forge::randn({2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "from_vector", forge::from_vector<float>({1.0f, 2.0f}));
  FORGE_REQUIRE_ERROR(invalid_argument, "from_vector", forge::from_vector<float>({1.0f, 2.0f}, {2, 1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "test", ExecContext::current_or_throw("test"));
  // After a context has lived and died, the same holds.
  { TestContext ctx; }
  FORGE_REQUIRE_ERROR(invalid_argument, "zeros", forge::zeros({2}));
}

// ---------------------------------------------------------------------------
// Threads

TEST_CASE("exec_context: the threads option is honored") {
  for (int n : {1, 2, 3, 5}) {
    TestContext ctx(context_options(n));
    CHECK(ctx.threads() == n);
    CHECK(ctx.runtime().threads() == n);
  }
  FORGE_REQUIRE_ERROR(invalid_argument, "ExecContext", TestContext ctx(context_options(-1)));
  // Work spread over the context's threads gives the same result as one thread.
  TestContext one(context_options(1));
  TestContext four(context_options(4));
  std::vector<float> values(200000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) - 500.0f;
  const Tensor a = one.from_vector<float>(values);
  const Tensor b = four.from_vector<float>(values);
  CHECK(forge::relu(a * a + a).to_vector<float>() == forge::relu(b * b + b).to_vector<float>());
}

TEST_CASE("exec_context: FORGE_NUM_THREADS sets the default thread count") {
  SECTION("a valid count is honored") {
    EnvGuard env("FORGE_NUM_THREADS", "3");
    TestContext ctx(context_options(0));
    CHECK(ctx.threads() == 3);
    forge::ExecContext plain;
    CHECK(plain.threads() == 3);
  }
  SECTION("unset: all hardware threads, at least one") {
    EnvGuard env("FORGE_NUM_THREADS", nullptr);
    TestContext ctx(context_options(0));
    const unsigned hw = std::thread::hardware_concurrency();
    CHECK(ctx.threads() >= 1);
    if (hw > 0) CHECK(ctx.threads() <= static_cast<int>(hw));
  }
  SECTION("an invalid value is refused") {
    for (const char* bad : {"abc", "0", "-2", "3x", "99999999999999999999999"}) {
      INFO("FORGE_NUM_THREADS=" << bad);
      EnvGuard env("FORGE_NUM_THREADS", bad);
      ExecContext* const before = ExecContext::current();
      FORGE_REQUIRE_ERROR(invalid_argument, "ExecContext", TestContext ctx(context_options(0)));
      CHECK(ExecContext::current() == before);  // a failed construction registers nothing
    }
  }
}

// ---------------------------------------------------------------------------
// Seeds

TEST_CASE("exec_context: manual_seed makes rand and randn reproducible") {
  TestContext ctx;
  ctx.manual_seed(42);
  const auto u1 = ctx.rand({64}).to_vector<float>();
  const auto n1 = ctx.randn({64}).to_vector<float>();
  ctx.manual_seed(42);
  const auto u2 = ctx.rand({64}).to_vector<float>();
  const auto n2 = ctx.randn({64}).to_vector<float>();
  CHECK(u1 == u2);
  CHECK(n1 == n2);
  ctx.manual_seed(43);
  const auto u3 = ctx.rand({64}).to_vector<float>();
  const auto n3 = ctx.randn({64}).to_vector<float>();
  CHECK(u3 != u1);
  CHECK(n3 != n1);
  // Consecutive draws differ, and rand lies in [0, 1).
  CHECK(ctx.rand({64}).to_vector<float>() != u3);
  for (float v : u1) {
    CHECK(v >= 0.0f);
    CHECK(v < 1.0f);
  }
  // Two contexts with the same seed draw the same values.
  TestContext other(context_options(1, 42));
  CHECK(other.rand({64}).to_vector<float>() == u1);
  TestContext third(context_options(1, 7));
  CHECK(third.rand({64}).to_vector<float>() != u1);
}

TEST_CASE("exec_context: FORGE_SEED seeds a context's RNG") {
  std::vector<float> a, b, c, seeded, unseeded1, unseeded2;
  {
    EnvGuard env("FORGE_SEED", "12345");
    {
      TestContext ctx;
      a = ctx.randn({32}).to_vector<float>();
    }
    {
      TestContext ctx;
      b = ctx.randn({32}).to_vector<float>();
    }
    // An explicit seed option wins over the environment.
    {
      TestContext ctx(context_options(1, 99));
      c = ctx.randn({32}).to_vector<float>();
    }
  }
  {
    EnvGuard env("FORGE_SEED", "12346");
    TestContext ctx;
    seeded = ctx.randn({32}).to_vector<float>();
  }
  {
    EnvGuard env("FORGE_SEED", nullptr);
    {
      TestContext ctx;
      unseeded1 = ctx.randn({32}).to_vector<float>();
    }
    {
      TestContext ctx;
      unseeded2 = ctx.randn({32}).to_vector<float>();
    }
    // FORGE_SEED=S is the same as manual_seed(S).
    TestContext manual;
    manual.manual_seed(12345);
    CHECK(manual.randn({32}).to_vector<float>() == a);
    TestContext opt(context_options(1, 99));
    CHECK(opt.randn({32}).to_vector<float>() == c);
  }
  CHECK(a == b);       // same seed, same values
  CHECK(a != seeded);  // another seed, other values
  CHECK(c != a);
  CHECK(unseeded1 == unseeded2);  // without FORGE_SEED: a fixed default seed

  SECTION("an invalid FORGE_SEED is refused") {
    EnvGuard env("FORGE_SEED", "not-a-seed");
    FORGE_REQUIRE_ERROR(invalid_argument, "ExecContext", TestContext ctx);
  }
}

// ---------------------------------------------------------------------------
// Devices

TEST_CASE("exec_context: a CUDA device context is refused with ErrorCode::device without a GPU") {
  ExecContext* const before = ExecContext::current();
  // An ordinal no machine has is always refused.
  FORGE_REQUIRE_ERROR(device, "ExecContext", TestContext ctx(context_options(0, {}, {}, forge::Device::cuda(99))));
  CHECK(ExecContext::current() == before);
  if (has_cuda_device()) {
    WARN("a CUDA device is visible: skipping the no-GPU check of cuda:0");
    return;
  }
  const std::string message =
      FORGE_REQUIRE_ERROR(device, "ExecContext", TestContext ctx(context_options(0, {}, {}, forge::Device::cuda(0))));
  CHECK(message.find("cuda:0") != std::string::npos);
  CHECK(ExecContext::current() == before);
}

TEST_CASE("exec_context: tensors of two contexts do not mix") {
  TestContext first;
  TestContext second;
  const Tensor a = first.ones({4});
  const Tensor b = second.ones({4});
  const Tensor mask = second.from_vector<bool>({true, false, true, false});
  const std::int64_t out1 = first.pool().outstanding();
  const std::int64_t out2 = second.pool().outstanding();
  FORGE_REQUIRE_ERROR(device, "add", a + b);
  FORGE_REQUIRE_ERROR(device, "mul", b * a);
  FORGE_REQUIRE_ERROR(device, "add", forge::add(a, b.to(DType::f64)));  // also on the promoting path
  Tensor out = first.zeros({4});
  FORGE_REQUIRE_ERROR(device, "add_into", forge::add_into(out, a, b));
  FORGE_REQUIRE_ERROR(device, "relu_into", forge::relu_into(out, b));
  FORGE_REQUIRE_ERROR(device, "copy_", out.copy_(b));
  forge::Arena arena{first};
  FORGE_REQUIRE_ERROR(device, "masked_select", forge::masked_select(a, mask, &arena));
  CHECK(first.pool().outstanding() == out1 + 1);  // `out`
  CHECK(second.pool().outstanding() == out2);
  CHECK(out.to_vector<float>() == std::vector<float>(4, 0.0f));  // untouched
  // Each context's own ops still work.
  CHECK((a + a).to_vector<float>() == std::vector<float>(4, 2.0f));
  CHECK((b * b).to_vector<float>() == std::vector<float>(4, 1.0f));
}

TEST_CASE("exec_context: a context's pool starts empty and frees everything it cached on teardown") {
  forge::PoolStats s;
  {
    TestContext ctx;
    const forge::PoolStats fresh = ctx.stats();
    CHECK(fresh.outstanding == 0);
    CHECK(fresh.cached_bytes == 0);
    CHECK(fresh.system_allocations == 0);
    CHECK(ctx.pool().device() == forge::Device::cpu());
    CHECK(ctx.device() == forge::Device::cpu());
    { const Tensor t = ctx.ones({1000}) + ctx.ones({1000}); }
    s = ctx.stats();
    CHECK(s.cached_blocks >= 1);
    CHECK(s.outstanding == 0);
  }
  SUCCEED("torn down with a non-empty cache");
}

TEST_CASE("exec_context: a context destroyed on another thread is no longer current on its own") {
  TestContext outer;
  auto inner = std::make_unique<forge::ExecContext>(context_options(1));
  REQUIRE(ExecContext::current() == inner.get());
  std::thread([&] { inner.reset(); }).join();
  CHECK(ExecContext::current() == &outer);
  CHECK(forge::zeros({2}).runtime().threads() == outer.threads());
}

TEST_CASE("exec_context: stats(device) reports the pool of a device the context serves") {
  TestContext ctx(context_options(1));
  const Tensor t = ctx.ones({1000});
  const forge::PoolStats host = ctx.stats(forge::Device::cpu());
  CHECK(host.outstanding == ctx.stats().outstanding);
  CHECK(host.live_bytes == ctx.stats().live_bytes);
  CHECK(host.outstanding >= 1);
  const std::string msg = FORGE_REQUIRE_ERROR(device, "stats", (void)ctx.stats(forge::Device::cuda(0)));
  CHECK(msg.find("cuda:0") != std::string::npos);
}
