#pragma once
// Fault-injection walks: walk() runs a call again and again, making its 1st,
// 2nd, 3rd, ... system allocation fail (the pool's, an arena's growth, or a
// heap allocation of the calling thread: heap_fault.h), until a run with the
// hook armed succeeds. Every attempt is a fresh context built by the same setup and
// trimmed before the hook is armed, so every acquire of the call is a real
// system allocation. After each failure it requires ErrorCode::out_of_memory,
// the pool's outstanding count and live bytes back at their baseline, the
// inputs bit-identical, and the same call with the hook off giving the bytes
// of a never-failed run. A raw std::bad_alloc, or any other exception, fails
// the walk.

#include <array>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "heap_fault.h"
#include "support.h"

namespace forge_test {

// A tensor's shape, dtype and packed bytes.
struct Snapshot {
  forge::Shape shape;
  forge::DType dtype = forge::DType::f32;
  std::vector<std::byte> bytes;
  bool operator==(const Snapshot&) const = default;
};

inline Snapshot snapshot(const forge::Tensor& t) {
  if (!t.defined()) return {};
  Snapshot s{t.shape(), t.dtype(), std::vector<std::byte>(t.nbytes())};
  if (!s.bytes.empty()) forge::detail::copy_to_contiguous(t, s.bytes.data(), t.dtype());
  return s;
}

template <typename Range>
std::vector<Snapshot> snapshots(const Range& ts) {
  std::vector<Snapshot> out;
  for (const forge::Tensor& t : ts) out.push_back(snapshot(t));
  return out;
}

// What a walked call returns: up to kMax tensors, held inline, so that
// collecting them allocates nothing and a heap walk counts forge's
// allocations only.
class Results {
 public:
  static constexpr std::size_t kMax = 16;
  Results() = default;
  Results(std::initializer_list<forge::Tensor> ts) {
    for (const forge::Tensor& t : ts) push_back(t);
  }
  Results(const std::vector<forge::Tensor>& ts) {  // NOLINT: implicit, as a call's return
    for (const forge::Tensor& t : ts) push_back(t);
  }
  void push_back(const forge::Tensor& t) {
    if (size_ == kMax) {
      const forge_test::heap::Pause assertion;  // Catch2 allocates
      FAIL("a walked call returns more than " << kMax << " tensors");
    }
    t_[size_++] = t;
  }
  const forge::Tensor* begin() const { return t_.data(); }
  const forge::Tensor* end() const { return t_.data() + size_; }

 private:
  std::array<forge::Tensor, kMax> t_;
  std::size_t size_ = 0;
};

// A list argument built by the caller (cat's, stack's): its allocation is
// the caller's, so a heap walk does not count or fail it.
inline std::vector<forge::Tensor> caller_list(std::initializer_list<forge::Tensor> ts) {
  const heap::Pause caller;
  return std::vector<forge::Tensor>(ts);
}

// Plain inputs: the tensors a call reads.
struct Inputs {
  std::vector<forge::Tensor> t;
  const forge::Tensor& operator[](std::size_t i) const { return t.at(i); }
  std::vector<forge::Tensor> inputs() const { return t; }
};

// Which system allocations a walk fails: the pool's, an arena's growth (the
// fixture then has `forge::Arena* arena()`), or the calling thread's heap
// allocations (operator new).
enum class Fault { pool, arena, heap };

// What one walk found.
struct Walked {
  int failures = 0;                     // attempts that failed with out_of_memory, all released
  int absorbed = 0;                     // failed nothrow heap allocations the call did without
  std::uint64_t clean_allocations = 0;  // system allocations of a never-failed run
};

inline constexpr std::uint64_t kCallSeed = 20261130;
inline constexpr int kMaxAttempts = 400;

// setup(ctx) -> S, where S has `std::vector<Tensor> inputs()` (must not change
// when a call fails) and may have `void reset()` (drops what a successful
// call leaves behind by contract, such as the .grad a backward made) and
// `forge::Arena* arena()`. call(ctx, s) -> Results.
template <typename Setup, typename Call>
Walked walk(const std::string& name, int threads, Fault fault, Setup&& setup, Call&& call) {
  auto arm = [&](auto& s, forge::ExecContext& ctx, std::uint64_t n) {
    if (fault == Fault::pool) {
      ctx.pool().fail_system_allocation_after(n);
    } else if (fault == Fault::heap) {
      forge_test::heap::fail_after(n);
    } else {
      if constexpr (requires { s.arena(); })
        s.arena()->fail_growth_after(n);
      else
        FAIL(name << ": an arena walk needs a fixture with arena()");
    }
  };
  auto reset = [](auto& s) {
    if constexpr (requires { s.reset(); }) s.reset();
  };
  auto system_allocations = [&](auto& s, forge::ExecContext& ctx) -> std::uint64_t {
    if (fault == Fault::heap) return forge_test::heap::allocations();
    if constexpr (requires { s.arena(); })
      if (fault == Fault::arena) return s.arena()->stats().system_allocations;
    return ctx.stats().system_allocations;
  };

  Walked walked;
  std::vector<Snapshot> reference;
  {  // A first run sets up what a process does once (function statics), so
     // that the counted runs below allocate alike.
    TestContext ctx(context_options(threads, 7));
    auto s = setup(ctx);
    ctx.manual_seed(kCallSeed);
    (void)call(ctx, s);
    reset(s);
  }
  {
    TestContext ctx(context_options(threads, 7));
    auto s = setup(ctx);
    ctx.pool().trim();
    ctx.manual_seed(kCallSeed);
    {
      const std::uint64_t before = system_allocations(s, ctx);
      const Results results = call(ctx, s);
      walked.clean_allocations = system_allocations(s, ctx) - before;
      reference = snapshots(results);
    }
    reset(s);
  }
  for (std::uint64_t n = 1; n <= kMaxAttempts; ++n) {
    INFO(name << " with " << threads << " thread(s): system allocation " << n << " fails");
    TestContext ctx(context_options(threads, 7));
    auto s = setup(ctx);
    const std::vector<Snapshot> inputs = snapshots(s.inputs());
    ctx.pool().trim();
    const std::int64_t outstanding = ctx.pool().outstanding();
    const std::size_t live = ctx.pool().live_bytes();
    const std::uint64_t refused = ctx.stats().failed_allocations;
    const std::uint64_t injected = forge_test::heap::injected_failures();
    ctx.manual_seed(kCallSeed);
    std::optional<Results> results;
    arm(s, ctx, n);
    try {
      results = call(ctx, s);
    } catch (const forge::Error& e) {
      arm(s, ctx, 0);
      INFO(e.what());
      REQUIRE(e.code() == forge::ErrorCode::out_of_memory);
    } catch (const std::bad_alloc&) {
      arm(s, ctx, 0);
      FAIL("a raw std::bad_alloc escaped instead of forge::Error(out_of_memory)");
    }
    arm(s, ctx, 0);
    if (results) {
      // A nothrow allocation forge did without (std::stable_sort's buffer,
      // say): the call must still be exact. Otherwise the call needs fewer
      // allocations than n: the walk is over.
      const bool absorbed = forge_test::heap::injected_failures() != injected;
      CHECK(ctx.stats().failed_allocations == refused);
      CHECK(snapshots(*results) == reference);
      results.reset();
      reset(s);
      CHECK(ctx.pool().outstanding() == outstanding);
      CHECK(ctx.pool().live_bytes() == live);
      if (absorbed) {
        ++walked.absorbed;
        continue;
      }
      CHECK(n == walked.clean_allocations + 1);
      return walked;
    }
    ++walked.failures;
    if (fault == Fault::pool) REQUIRE(ctx.stats().failed_allocations == refused + 1);
    if (fault == Fault::heap) REQUIRE(forge_test::heap::injected_failures() == injected + 1);
    // Nothing to reset: a failed call leaves nothing behind.
    REQUIRE(ctx.pool().outstanding() == outstanding);
    REQUIRE(ctx.pool().live_bytes() == live);
    REQUIRE(snapshots(s.inputs()) == inputs);
    // The same call with the hook off gives what a never-failed run gave.
    ctx.manual_seed(kCallSeed);
    REQUIRE(snapshots(call(ctx, s)) == reference);
    reset(s);
    REQUIRE(ctx.pool().outstanding() == outstanding);
  }
  FAIL(name << ": still failing after " << kMaxAttempts << " injected failures");
  return walked;
}

}  // namespace forge_test
