// Output arenas (DESIGN §9): allocation (none up front, once for a steady
// loop, growth to the high-water mark), every status (invalid_argument,
// device, contended, out_of_memory, stale_output), failed calls, describe(),
// outliving the context, and the values of every arena op against naive loops.

#include <atomic>
#include <barrier>
#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "forge/forge.h"
#include "support.h"

using forge::Arena;
using forge::ArenaCall;
using forge::DType;
using forge::ErrorCode;
using forge::RowsTapeView;
using forge::RowsView;
using forge::Shape;
using forge::TapeView;
using forge::Tensor;
using forge_test::context_options;
using forge_test::EnvGuard;
using forge_test::TestContext;

namespace {

using Dims = std::vector<std::int64_t>;

std::int64_t numel_of(const Dims& d) {
  std::int64_t n = 1;
  for (auto v : d) n *= v;
  return n;
}

// NumPy broadcast of two shapes (the test's own, for expectations).
Dims broadcast(const Dims& a, const Dims& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    REQUIRE((da == db || da == 1 || db == 1));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The row-major index into a tensor of shape `shape` (broadcast to `full`) of
// the element at multi-index `idx` of `full`.
std::int64_t broadcast_index(const Dims& idx, const Dims& full, const Dims& shape) {
  const std::size_t lead = full.size() - shape.size();
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::int64_t i = shape[d] == 1 ? 0 : idx[lead + d];
    flat = flat * shape[d] + i;
  }
  return flat;
}

Dims unravel(std::int64_t flat, const Dims& shape) {
  Dims idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

template <typename T>
std::vector<T> naive_masked_select(const std::vector<T>& x, const Dims& xs, const std::vector<bool>& m,
                                   const Dims& ms) {
  const Dims full = broadcast(xs, ms);
  std::vector<T> out;
  const std::int64_t n = numel_of(full);
  for (std::int64_t i = 0; i < n; ++i) {
    const Dims idx = unravel(i, full);
    if (m[static_cast<std::size_t>(broadcast_index(idx, full, ms))])
      out.push_back(x[static_cast<std::size_t>(broadcast_index(idx, full, xs))]);
  }
  return out;
}

// [count, rank] indices, flattened row-major.
template <typename T>
std::vector<std::int64_t> naive_nonzero(const std::vector<T>& x, const Dims& shape) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < numel_of(shape); ++i) {
    if (x[static_cast<std::size_t>(i)] == T{}) continue;
    for (auto v : unravel(i, shape)) out.push_back(v);
  }
  return out;
}

std::vector<float> iota_floats(std::int64_t n, float start = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return v;
}

std::vector<bool> pattern(std::int64_t n, int every, int phase = 0) {
  std::vector<bool> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<int>(i) + phase) % every == 0;
  return v;
}

std::int64_t count_true(const std::vector<bool>& v) {
  std::int64_t n = 0;
  for (bool b : v) n += b;
  return n;
}

}  // namespace

// ---------------------------------------------------------------------------
// Allocation

TEST_CASE("arena: a new arena allocates nothing") {
  TestContext ctx;
  const forge::PoolStats before = ctx.stats();
  Arena arena{ctx};
  const forge::ArenaStats s = arena.stats();
  CHECK(s.system_allocations == 0);
  CHECK(s.system_frees == 0);
  CHECK(s.capacity_bytes == 0);
  CHECK(s.used_bytes == 0);
  CHECK(s.high_water_bytes == 0);
  CHECK(s.calls == 0);
  const forge::PoolStats after = ctx.stats();
  CHECK(after.system_allocations == before.system_allocations);
  CHECK(after.acquires == before.acquires);
  CHECK(after.outstanding == before.outstanding);
}

TEST_CASE("arena: describe() says host on the CPU") {
  TestContext ctx;
  Arena arena{ctx};
  CHECK(arena.describe().str() == "host");
  CHECK(arena.describe().device == forge::Device::cpu());
  CHECK(arena.describe().device.is_cpu());
}

TEST_CASE("arena: a steady loop makes exactly one system allocation") {
  TestContext ctx;
  ctx.manual_seed(2);
  const Tensor x = ctx.randn({1000});
  const std::vector<bool> mv = pattern(1000, 3);
  const Tensor mask = ctx.from_vector<bool>(mv);
  Arena arena{ctx};
  Tensor out = forge::masked_select(x, mask, &arena);
  const forge::PoolStats pool_warm = ctx.stats();
  for (int i = 1; i < 50; ++i) out = forge::masked_select(x, mask, &arena);
  const forge::ArenaStats s = arena.stats();
  CHECK(s.system_allocations == 1);
  CHECK(s.system_frees == 0);
  CHECK(s.calls == 50);
  CHECK(s.used_bytes >= static_cast<std::size_t>(count_true(mv)) * sizeof(float));
  CHECK(s.capacity_bytes >= s.used_bytes);
  // The pool's temporaries are steady too.
  CHECK(ctx.stats().system_allocations == pool_warm.system_allocations);
  CHECK(out.to_vector<float>() == naive_masked_select(x.to_vector<float>(), {1000}, mv, {1000}));
}

TEST_CASE("arena: grows to the high-water mark, then smaller calls do not allocate") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>(iota_floats(4096));
  const std::vector<bool> small_mask = pattern(4096, 64);  // 64 elements: 256 bytes
  const std::vector<bool> big_mask = pattern(4096, 2);     // 2048 elements: 8192 bytes
  const std::vector<bool> mid_mask = pattern(4096, 8);     // 512 elements: 2048 bytes
  const Tensor small = ctx.from_vector<bool>(small_mask);
  const Tensor big = ctx.from_vector<bool>(big_mask);
  const Tensor mid = ctx.from_vector<bool>(mid_mask);
  const std::size_t big_bytes = static_cast<std::size_t>(count_true(big_mask)) * sizeof(float);
  const std::size_t small_bytes = static_cast<std::size_t>(count_true(small_mask)) * sizeof(float);
  Arena arena{ctx};

  (void)forge::masked_select(x, small, &arena);
  CHECK(arena.stats().system_allocations == 1);
  CHECK(arena.stats().high_water_bytes >= small_bytes);
  CHECK(arena.stats().high_water_bytes < big_bytes);

  Tensor out = forge::masked_select(x, big, &arena);  // outgrows what it held: grows once
  CHECK(arena.stats().system_allocations == 2);
  CHECK(arena.stats().high_water_bytes >= big_bytes);
  CHECK(arena.stats().capacity_bytes >= arena.stats().high_water_bytes);
  CHECK(out.numel() == count_true(big_mask));
  const std::size_t high = arena.stats().high_water_bytes;

  for (int i = 0; i < 5; ++i) {
    out = forge::masked_select(x, i % 2 ? mid : small, &arena);
    CHECK(arena.stats().system_allocations == 2);
    CHECK(arena.stats().high_water_bytes == high);  // reflects the largest call
    CHECK(arena.stats().used_bytes < high);
  }
  out = forge::masked_select(x, big, &arena);  // the largest again: fits
  CHECK(arena.stats().system_allocations == 2);
  CHECK(arena.stats().used_bytes == high);
  CHECK(arena.stats().calls == 8);
  CHECK(out.to_vector<float>() == naive_masked_select(x.to_vector<float>(), {4096}, big_mask, {4096}));
}

// ---------------------------------------------------------------------------
// Statuses

TEST_CASE("arena: a call given no arena is invalid_argument") {
  TestContext ctx;
  const Tensor x = ctx.ones({4, 3});
  const Tensor m1 = ctx.from_vector<bool>({true, false, true, true});
  const Tensor m2 = ctx.from_vector<bool>({true, false, true, true, false, true}, {2, 3});
  const Tensor x3 = ctx.ones({2, 3, 2});
  const std::int64_t baseline = ctx.pool().outstanding();
  FORGE_REQUIRE_ERROR(invalid_argument, "masked_select", forge::masked_select(x, x.to(DType::boolean), nullptr));
  FORGE_REQUIRE_ERROR(invalid_argument, "nonzero", forge::nonzero(x, nullptr));
  FORGE_REQUIRE_ERROR(invalid_argument, "rows_where", forge::rows_where(x, m1, nullptr));
  FORGE_REQUIRE_ERROR(invalid_argument, "nonzero_per_row", forge::nonzero_per_row(m2, nullptr));
  FORGE_REQUIRE_ERROR(invalid_argument, "rows_where_per_item", forge::rows_where_per_item(x3, m2, nullptr));
  CHECK(ctx.pool().outstanding() == baseline);

  // A moved-from arena is no arena either.
  Arena arena{ctx};
  Arena moved{std::move(arena)};
  FORGE_REQUIRE_ERROR(invalid_argument, "nonzero", forge::nonzero(x, &arena));
  CHECK(forge::nonzero(x, &moved).size(0) == 12);  // the moved-to arena works
  Arena assigned{ctx};
  assigned = std::move(moved);
  CHECK(forge::nonzero(x, &assigned).size(0) == 12);
  CHECK(assigned.stats().calls == 2);
}

TEST_CASE("arena: an arena of another ExecContext is a device error") {
  TestContext ctx;
  TestContext other;
  const Tensor x = ctx.ones({6});
  const Tensor m = ctx.from_vector<bool>({true, false, true, false, true, false});
  Arena theirs{other};
  const std::int64_t baseline = ctx.pool().outstanding();
  FORGE_REQUIRE_ERROR(device, "masked_select", forge::masked_select(x, m, &theirs));
  FORGE_REQUIRE_ERROR(device, "nonzero", forge::nonzero(x, &theirs));
  FORGE_REQUIRE_ERROR(device, "test", ArenaCall("test", &theirs, {x}));
  CHECK(theirs.stats().calls == 0);
  CHECK(theirs.stats().system_allocations == 0);
  CHECK(ctx.pool().outstanding() == baseline);
  // It still serves its own context.
  const Tensor y = other.ones({6});
  CHECK(forge::nonzero(y, &theirs).size(0) == 6);
}

TEST_CASE("arena: a second call while the first runs is contended") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>({1, 2, 3, 4});
  const Tensor m = ctx.from_vector<bool>({true, false, true, true});
  Arena arena{ctx};
  const std::int64_t baseline = ctx.pool().outstanding();
  {
    ArenaCall call("test", &arena, {});
    Tensor mine = call.allocate({3}, DType::f32);
    mine.fill_(7.0);
    FORGE_REQUIRE_ERROR(contended, "masked_select", forge::masked_select(x, m, &arena));
    FORGE_REQUIRE_ERROR(contended, "nonzero", forge::nonzero(x, &arena));
    FORGE_REQUIRE_ERROR(contended, "other", ArenaCall("other", &arena, {}));
    // The refused calls did not disturb the running one.
    CHECK(mine.to_vector<float>() == std::vector<float>{7, 7, 7});
    call.commit();
    CHECK(ctx.pool().outstanding() == baseline);
  }
  // Once the first call is over, the arena serves the next one.
  const Tensor out = forge::masked_select(x, m, &arena);
  CHECK(out.to_vector<float>() == std::vector<float>{1, 3, 4});
}

TEST_CASE("arena: two threads calling at once: exactly one is contended", "[concurrent]") {
  TestContext ctx;
  Arena arena{ctx};
  for (int round = 0; round < 20; ++round) {
    std::barrier sync(2);
    std::atomic<int> held{0}, contended{0}, other{0};
    auto body = [&] {
      try {
        ArenaCall call("test", &arena, {});
        held.fetch_add(1);
        sync.arrive_and_wait();  // hold the call until the other thread has tried
      } catch (const forge::Error& e) {
        (e.code() == ErrorCode::contended ? contended : other).fetch_add(1);
        sync.arrive_and_wait();
      } catch (...) {
        other.fetch_add(1);
        sync.arrive_and_wait();
      }
    };
    std::thread a(body), b(body);
    a.join();
    b.join();
    INFO("round " << round);
    CHECK(held.load() == 1);
    CHECK(contended.load() == 1);
    CHECK(other.load() == 0);
  }
  // The arena is free again.
  const Tensor x = ctx.ones({3});
  CHECK(forge::nonzero(x, &arena).size(0) == 3);
}

TEST_CASE("arena: an arena that cannot grow is out_of_memory, an overflowing shape is invalid_argument") {
  TestContext ctx;
  Arena arena{ctx};
  const std::int64_t baseline = ctx.pool().outstanding();
  {
    ArenaCall call("test", &arena, {});
    // 2^58 f32 elements = 2^60 bytes: a valid shape no system can map.
    FORGE_REQUIRE_ERROR(out_of_memory, "test", call.allocate({std::int64_t{1} << 58}, DType::f32));
    // 2^62 f32 elements = 2^64 bytes: the byte count does not fit in int64.
    FORGE_REQUIRE_ERROR(invalid_argument, "test", call.allocate({std::int64_t{1} << 62}, DType::f32));
    FORGE_REQUIRE_ERROR(invalid_argument, "test", call.allocate({-1}, DType::f32));
    // The call itself can still allocate what fits.
    Tensor ok = call.allocate({4}, DType::f32);
    ok.fill_(1.0);
    CHECK(ok.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
    call.commit();
  }
  CHECK(ctx.pool().outstanding() == baseline);
  // And the arena serves later calls.
  const Tensor x = ctx.from_vector<float>({0, 5, 0, 6});
  const Tensor nz = forge::nonzero(x, &arena);
  CHECK(nz.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 3});
}

TEST_CASE("arena: outputs of a previous call are stale") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>(iota_floats(8));
  const Tensor m1 = ctx.from_vector<bool>(pattern(8, 2));
  const Tensor m2 = ctx.from_vector<bool>(pattern(8, 4));
  Arena arena{ctx};
  Arena spare{ctx};
  Arena third{ctx};
  Tensor out1 = forge::masked_select(x, m1, &arena);
  REQUIRE(out1.numel() == 4);
  Tensor view_before = out1.narrow(0, 1, 2);
  CHECK(view_before.to_vector<float>() == std::vector<float>{3, 5});
  RowsView rows = forge::rows_where(x.reshape({4, 2}), ctx.from_vector<bool>({true, true, false, true}), &spare);
  const std::int64_t baseline = ctx.pool().outstanding();

  Tensor out2 = forge::masked_select(x, m2, &arena);  // rewinds: out1 is stale
  CHECK(out1.buffer()->stale());
  CHECK_FALSE(out2.buffer()->stale());
  FORGE_REQUIRE_ERROR(stale_output, "data_ptr", out1.data_ptr<float>());
  FORGE_REQUIRE_ERROR(stale_output, "to_vector", out1.to_vector<float>());
  FORGE_REQUIRE_ERROR(stale_output, "add", out1 + out2.narrow(0, 0, 1));
  FORGE_REQUIRE_ERROR(stale_output, "add", out2 + out1);
  FORGE_REQUIRE_ERROR(stale_output, "relu", forge::relu(out1));
  FORGE_REQUIRE_ERROR(stale_output, "narrow", out1.narrow(0, 0, 2));
  FORGE_REQUIRE_ERROR(stale_output, "clone_view", out1.clone_view());
  FORGE_REQUIRE_ERROR(stale_output, "to_vector", view_before.to_vector<float>());  // a view made before
  FORGE_REQUIRE_ERROR(stale_output, "masked_select", forge::masked_select(out1, m2.narrow(0, 0, 4), &third));
  CHECK(ctx.pool().outstanding() == baseline);
  // The current call's outputs, and another arena's, are fine.
  CHECK(out2.to_vector<float>() == std::vector<float>{1, 5});
  CHECK(rows.count() == 3);
  CHECK(rows.tensor().to_vector<float>() == std::vector<float>{1, 2, 3, 4, 7, 8});

  // A ragged view of a rewound arena is stale too.
  (void)forge::nonzero(x, &spare);
  FORGE_REQUIRE_ERROR(stale_output, "RowsView", rows.data());
}

TEST_CASE("arena: inputs inside the arena are refused and the arena stays usable") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>(iota_floats(6));
  const Tensor m = ctx.from_vector<bool>({true, true, false, true, false, true});
  Arena arena{ctx};
  const Tensor out = forge::masked_select(x, m, &arena);  // [1, 2, 4, 6]
  REQUIRE(out.numel() == 4);
  const Tensor copy = out.clone();  // a pooled copy, outside the arena
  const Tensor m4 = ctx.from_vector<bool>({false, true, true, false});
  const std::int64_t baseline = ctx.pool().outstanding();

  FORGE_REQUIRE_ERROR(invalid_argument, "masked_select", forge::masked_select(out, m4, &arena));
  FORGE_REQUIRE_ERROR(invalid_argument, "masked_select",
                      forge::masked_select(out.narrow(0, 1, 2), m4.narrow(0, 0, 2), &arena));  // a view of it
  FORGE_REQUIRE_ERROR(invalid_argument, "nonzero", forge::nonzero(out, &arena));
  FORGE_REQUIRE_ERROR(invalid_argument, "test", ArenaCall("test", &arena, {out}));
  CHECK(ctx.pool().outstanding() == baseline);

  // A copy made before is fine, and the arena serves the call.
  const Tensor again = forge::masked_select(copy, m4, &arena);
  CHECK(again.to_vector<float>() == std::vector<float>{2, 4});
  // As is another arena.
  Arena other{ctx};
  const Tensor twice = forge::masked_select(again, ctx.from_vector<bool>({false, true}), &other);
  CHECK(twice.to_vector<float>() == std::vector<float>{4});
}

TEST_CASE("arena: a failed call leaves no outputs behind") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>(iota_floats(10));
  const Tensor good = ctx.from_vector<bool>(pattern(10, 2));
  Arena arena{ctx};
  Tensor out = forge::masked_select(x, good, &arena);
  REQUIRE(out.to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9});
  const std::int64_t baseline = ctx.pool().outstanding();

  SECTION("a mask that does not broadcast") {
    const Tensor bad = ctx.from_vector<bool>(pattern(7, 2));
    FORGE_REQUIRE_ERROR(shape, "masked_select", forge::masked_select(x, bad, &arena));
  }
  SECTION("rows_where with a mask of the wrong length") {
    FORGE_REQUIRE_ERROR(shape, "rows_where", forge::rows_where(x.reshape({5, 2}), good, &arena));
  }
  SECTION("nonzero_per_row of a 1-d mask") {
    FORGE_REQUIRE_ERROR(shape, "nonzero_per_row", forge::nonzero_per_row(good, &arena));
  }
  SECTION("rows_where_per_item with a mismatched mask") {
    FORGE_REQUIRE_ERROR(shape, "rows_where_per_item",
                        forge::rows_where_per_item(x.reshape({1, 5, 2}), good.reshape({2, 5}), &arena));
  }
  SECTION("a call that allocated and then failed") {
    Tensor partial;
    try {
      ArenaCall call("test", &arena, {});
      partial = call.allocate({3}, DType::f32);
      partial.fill_(1.0);
      throw std::runtime_error("the call fails before commit()");
    } catch (const std::runtime_error&) {
    }
    REQUIRE(partial.defined());
    CHECK(partial.buffer()->stale());  // what it returned is not half-written data
    FORGE_REQUIRE_ERROR(stale_output, "to_vector", partial.to_vector<float>());
  }
  // The arena was rewound: the previous call's outputs are gone, nothing is used.
  CHECK(out.buffer()->stale());
  FORGE_REQUIRE_ERROR(stale_output, "data_ptr", out.data_ptr<float>());
  CHECK(arena.stats().used_bytes == 0);
  CHECK(ctx.pool().outstanding() == baseline);
  // And it serves the next call.
  out = forge::masked_select(x, good, &arena);
  CHECK(out.to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9});
}

TEST_CASE("arena: a wrong mask dtype is a dtype error") {
  TestContext ctx;
  const Tensor x = ctx.ones({4});
  Arena arena{ctx};
  FORGE_REQUIRE_ERROR(dtype, "masked_select", forge::masked_select(x, ctx.ones({4}), &arena));
  FORGE_REQUIRE_ERROR(dtype, "rows_where", forge::rows_where(x.reshape({2, 2}), ctx.ones({2}), &arena));
  FORGE_REQUIRE_ERROR(dtype, "nonzero_per_row", forge::nonzero_per_row(ctx.ones({2, 2}), &arena));
}

TEST_CASE("arena: outputs of the last call stay readable after the ExecContext dies") {
  std::optional<Arena> arena;
  Tensor out;
  TapeView tape;
  std::vector<float> expect;
  forge::ExecContext* before = forge::ExecContext::current();
  {
    forge::ExecContext ctx(context_options(1));
    arena.emplace(ctx);
    Arena tapes{ctx};
    const std::vector<float> xv = iota_floats(12);
    const std::vector<bool> mv = pattern(12, 3, 1);
    const Tensor x = ctx.from_vector<float>(xv, {3, 4});
    const Tensor m = ctx.from_vector<bool>(mv, {3, 4});
    out = forge::masked_select(x, m, &*arena);
    tape = forge::nonzero_per_row(m, &tapes);  // its arena dies with this block
    expect = naive_masked_select(xv, {3, 4}, mv, {3, 4});
    REQUIRE(ctx.pool().outstanding() == 2);
  }
  CHECK(forge::ExecContext::current() == before);
  CHECK(out.to_vector<float>() == expect);
  CHECK(arena->describe().str() == "host");
  CHECK(arena->stats().calls == 1);
  CHECK(tape.count() == 3);
  CHECK(tape.offsets_data()[3] == tape.values().numel());
  out = Tensor();
  tape = TapeView();
  arena.reset();
  SUCCEED("released after the context died");
}

// ---------------------------------------------------------------------------
// Values of the arena ops

TEST_CASE("arena: masked_select matches a naive loop") {
  TestContext ctx;
  Arena arena{ctx};

  struct Case {
    Dims xs, ms;
    int every, phase;
  };
  const std::vector<Case> cases = {
      {{12}, {12}, 2, 0},
      {{3, 4}, {3, 4}, 3, 1},
      {{3, 4}, {4}, 2, 1},
      {{3, 4}, {3, 1}, 2, 0},
      {{4}, {3, 4}, 5, 0},
      {{3, 1}, {1, 4}, 2, 0},
      {{2, 3, 4}, {3, 1}, 2, 1},
      {{2, 3, 4}, {2, 3, 4}, 1, 0},
      {{2, 3, 4}, {2, 3, 4}, 1000, 1},
      {{0, 4}, {4}, 1, 0},
      {{0, 4}, {0, 4}, 1, 0},
      {{3, 0}, {3, 1}, 1, 0},
      {{5}, {1}, 1, 0},
      {{5}, {1}, 2, 1},
  };
  for (const Case& c : cases) {
    const std::vector<float> xv = iota_floats(numel_of(c.xs), -3.0f);
    const std::vector<bool> mv = pattern(numel_of(c.ms), c.every, c.phase);
    const Tensor x = ctx.from_vector<float>(xv, Shape(c.xs));
    const Tensor m = ctx.from_vector<bool>(mv, Shape(c.ms));
    const Tensor out = forge::masked_select(x, m, &arena);
    const std::vector<float> expect = naive_masked_select(xv, c.xs, mv, c.ms);
    INFO("x " << x.shape() << ", mask " << m.shape());
    CHECK(out.dim() == 1);
    CHECK(out.dtype() == DType::f32);
    CHECK(out.numel() == static_cast<std::int64_t>(expect.size()));
    CHECK(out.to_vector<float>() == expect);
  }
}

TEST_CASE("arena: masked_select keeps the dtype and reads strided inputs") {
  TestContext ctx;
  Arena arena{ctx};
  SECTION("i32") {
    const Tensor x = ctx.from_vector<std::int32_t>({5, -6, 7, -8, 9, 10});
    const Tensor m = ctx.from_vector<bool>({false, true, true, false, false, true});
    const Tensor out = forge::masked_select(x, m, &arena);
    CHECK(out.dtype() == DType::i32);
    CHECK(out.to_vector<std::int32_t>() == std::vector<std::int32_t>{-6, 7, 10});
  }
  SECTION("f64") {
    const Tensor x = ctx.from_vector<double>({0.5, 1.5, 2.5});
    const Tensor m = ctx.from_vector<bool>({true, false, true});
    const Tensor out = forge::masked_select(x, m, &arena);
    CHECK(out.dtype() == DType::f64);
    CHECK(out.to_vector<double>() == std::vector<double>{0.5, 2.5});
  }
  SECTION("a transposed input is read in its own row-major order") {
    const std::vector<float> xv = iota_floats(6);
    const Tensor base = ctx.from_vector<float>(xv, {2, 3});
    const Tensor xt = base.transpose(0, 1);  // [3, 2]: rows {1,4}, {2,5}, {3,6}
    const std::vector<bool> mv = {true, false, true, true, false, true};
    const Tensor out = forge::masked_select(xt, ctx.from_vector<bool>(mv, {3, 2}), &arena);
    std::vector<float> transposed;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 2; ++c) transposed.push_back(xv[static_cast<std::size_t>(c * 3 + r)]);
    CHECK(out.to_vector<float>() == naive_masked_select(transposed, {3, 2}, mv, {3, 2}));
  }
}

TEST_CASE("arena: nonzero matches a naive loop") {
  TestContext ctx;
  Arena arena{ctx};
  SECTION("f32 of several ranks, with zero-size inputs") {
    const std::vector<Dims> shapes = {{7}, {3, 4}, {2, 3, 2}, {2, 1, 3, 2}, {0}, {0, 3}, {3, 0, 2}};
    for (const Dims& shape : shapes) {
      std::vector<float> xv(static_cast<std::size_t>(numel_of(shape)));
      for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = (i * 7) % 3 == 0 ? 0.0f : static_cast<float>(i);
      const Tensor x = ctx.from_vector<float>(xv, Shape(shape));
      const Tensor out = forge::nonzero(x, &arena);
      const std::vector<std::int64_t> expect = naive_nonzero(xv, shape);
      INFO("shape " << x.shape());
      CHECK(out.dtype() == DType::i64);
      REQUIRE(out.dim() == 2);
      CHECK(out.size(1) == static_cast<std::int64_t>(shape.size()));
      CHECK(out.size(0) * static_cast<std::int64_t>(shape.size()) == static_cast<std::int64_t>(expect.size()));
      CHECK(out.to_vector<std::int64_t>() == expect);
    }
  }
  SECTION("bool and i32 inputs") {
    const std::vector<bool> bv = {false, true, true, false, false, true};
    const Tensor b = ctx.from_vector<bool>(bv, {2, 3});
    CHECK(forge::nonzero(b, &arena).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 0, 2, 1, 2});
    const std::vector<std::int32_t> iv = {0, 0, -3, 0, 4, 0};
    const Tensor i = ctx.from_vector<std::int32_t>(iv, {3, 2});
    CHECK(forge::nonzero(i, &arena).to_vector<std::int64_t>() == naive_nonzero(iv, {3, 2}));
  }
  SECTION("a transposed input is indexed in its own shape") {
    const std::vector<float> xv = {0, 1, 2, 0, 0, 3};                      // [2, 3]
    const Tensor xt = ctx.from_vector<float>(xv, {2, 3}).transpose(0, 1);  // [3, 2]
    std::vector<float> transposed;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 2; ++c) transposed.push_back(xv[static_cast<std::size_t>(c * 3 + r)]);
    CHECK(forge::nonzero(xt, &arena).to_vector<std::int64_t>() == naive_nonzero(transposed, {3, 2}));
  }
  SECTION("all zeros") {
    const Tensor out = forge::nonzero(ctx.zeros({4, 5}), &arena);
    CHECK(out.size(0) == 0);
    CHECK(out.size(1) == 2);
  }
}

TEST_CASE("arena: rows_where gives a RowsView of the selected rows") {
  TestContext ctx;
  Arena arena{ctx};
  const std::int64_t N = 7, D = 3;
  const std::vector<float> xv = iota_floats(N * D);
  const std::vector<bool> mv = {true, false, true, true, false, false, true};
  const Tensor x = ctx.from_vector<float>(xv, {N, D});
  const Tensor m = ctx.from_vector<bool>(mv);

  const RowsView rows = forge::rows_where(x, m, &arena);
  const std::int64_t expect_count = count_true(mv);
  CHECK(rows.count() == expect_count);
  CHECK(rows.columns() == D);
  CHECK(rows.dtype() == DType::f32);
  CHECK(rows.row_stride_bytes() == static_cast<std::size_t>(D) * sizeof(float));
  std::vector<float> expect;
  for (std::int64_t i = 0; i < N; ++i)
    if (mv[static_cast<std::size_t>(i)])
      for (std::int64_t j = 0; j < D; ++j) expect.push_back(xv[static_cast<std::size_t>(i * D + j)]);
  // Read through the view's own layout: row r at data() + r * row_stride_bytes().
  std::vector<float> got;
  const auto* base = static_cast<const unsigned char*>(rows.data());
  for (std::int64_t r = 0; r < rows.count(); ++r) {
    const auto* row = reinterpret_cast<const float*>(base + static_cast<std::size_t>(r) * rows.row_stride_bytes());
    for (std::int64_t j = 0; j < rows.columns(); ++j) got.push_back(row[j]);
  }
  CHECK(got == expect);
  CHECK(rows.tensor().to_vector<float>() == expect);

  SECTION("f64 rows have an 8-byte element stride") {
    const RowsView r64 = forge::rows_where(x.to(DType::f64), m, &arena);
    CHECK(r64.dtype() == DType::f64);
    CHECK(r64.row_stride_bytes() == static_cast<std::size_t>(D) * sizeof(double));
    CHECK(r64.tensor().to_vector<float>() == expect);
  }
  SECTION("a transposed input") {
    const Tensor xt = ctx.from_vector<float>(xv, {D, N}).transpose(0, 1);  // [N, D], strided
    std::vector<float> expect_t;
    for (std::int64_t i = 0; i < N; ++i)
      if (mv[static_cast<std::size_t>(i)])
        for (std::int64_t j = 0; j < D; ++j) expect_t.push_back(xv[static_cast<std::size_t>(j * N + i)]);
    const RowsView rt = forge::rows_where(xt, m, &arena);
    CHECK(rt.count() == expect_count);
    CHECK(rt.tensor().to_vector<float>() == expect_t);
  }
  SECTION("no rows selected, and zero rows") {
    const RowsView none = forge::rows_where(x, ctx.from_vector<bool>(std::vector<bool>(7, false)), &arena);
    CHECK(none.count() == 0);
    CHECK(none.columns() == D);
    const RowsView empty = forge::rows_where(ctx.zeros({0, 4}), ctx.from_vector<bool>(std::vector<bool>{}), &arena);
    CHECK(empty.count() == 0);
    CHECK(empty.columns() == 4);
  }
}

TEST_CASE("arena: nonzero_per_row gives a TapeView with count + 1 offsets") {
  TestContext ctx;
  Arena arena{ctx};
  const std::int64_t B = 5, T = 6;
  const std::vector<bool> mv = {
      true,  false, false, true,  false, true,   // 0 3 5
      false, false, false, false, false, false,  // (none)
      true,  true,  true,  true,  true,  true,   // 0..5
      false, true,  false, false, false, false,  // 1
      false, false, false, false, false, true,   // 5
  };
  const Tensor m = ctx.from_vector<bool>(mv, {B, T});
  const TapeView tape = forge::nonzero_per_row(m, &arena);

  std::vector<std::vector<std::int64_t>> expect(static_cast<std::size_t>(B));
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      if (mv[static_cast<std::size_t>(b * T + t)]) {
        expect[static_cast<std::size_t>(b)].push_back(t);
        ++total;
      }

  CHECK(tape.count() == B);
  REQUIRE(tape.offsets().numel() == B + 1);
  CHECK(tape.offsets().dtype() == DType::i64);
  CHECK(tape.values().dtype() == DType::i64);
  CHECK(tape.values().numel() == total);
  const std::int64_t* off = tape.offsets_data();
  CHECK(off[0] == 0);
  CHECK(off[B] == total);
  const auto* values = static_cast<const std::int64_t*>(tape.data());
  for (std::int64_t b = 0; b < B; ++b) {
    INFO("item " << b);
    const auto& want = expect[static_cast<std::size_t>(b)];
    CHECK(off[b + 1] - off[b] == static_cast<std::int64_t>(want.size()));
    CHECK(std::vector<std::int64_t>(values + off[b], values + off[b + 1]) == want);
    CHECK(tape.item(b).to_vector<std::int64_t>() == want);
  }
  FORGE_REQUIRE_ERROR(out_of_range, "TapeView", tape.item(B));
  FORGE_REQUIRE_ERROR(out_of_range, "TapeView", tape.item(-1));

  SECTION("no items") {
    const TapeView none = forge::nonzero_per_row(ctx.from_vector<bool>(std::vector<bool>{}, {0, 3}), &arena);
    CHECK(none.count() == 0);
    REQUIRE(none.offsets().numel() == 1);
    CHECK(none.offsets_data()[0] == 0);
    CHECK(none.values().numel() == 0);
  }
}

TEST_CASE("arena: rows_where_per_item gives a RowsTapeView with count + 1 row offsets") {
  TestContext ctx;
  Arena arena{ctx};
  const std::int64_t B = 3, T = 4, D = 2;
  const std::vector<float> xv = iota_floats(B * T * D);
  const std::vector<bool> mv = {
      true,  false, true,  false,  // rows 0, 2
      false, false, false, false,  // none
      true,  true,  true,  true,   // all four
  };
  const Tensor x = ctx.from_vector<float>(xv, {B, T, D});
  const Tensor m = ctx.from_vector<bool>(mv, {B, T});
  const RowsTapeView tape = forge::rows_where_per_item(x, m, &arena);

  std::vector<std::vector<float>> expect(static_cast<std::size_t>(B));
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      if (mv[static_cast<std::size_t>(b * T + t)]) {
        ++total;
        for (std::int64_t d = 0; d < D; ++d)
          expect[static_cast<std::size_t>(b)].push_back(xv[static_cast<std::size_t>((b * T + t) * D + d)]);
      }

  CHECK(tape.count() == B);
  CHECK(tape.columns() == D);
  REQUIRE(tape.offsets().numel() == B + 1);
  CHECK(tape.offsets().dtype() == DType::i64);
  CHECK(tape.rows().size(0) == total);
  CHECK(tape.rows().stride(0) == D);  // packed rows
  const std::int64_t* off = tape.offsets_data();
  CHECK(off[0] == 0);
  CHECK(off[B] == total);
  const auto* rows = static_cast<const float*>(tape.data());
  for (std::int64_t b = 0; b < B; ++b) {
    INFO("item " << b);
    const auto& want = expect[static_cast<std::size_t>(b)];
    CHECK((off[b + 1] - off[b]) * D == static_cast<std::int64_t>(want.size()));
    CHECK(std::vector<float>(rows + off[b] * D, rows + off[b + 1] * D) == want);
    CHECK(tape.item(b).to_vector<float>() == want);
    CHECK(tape.item(b).size(1) == D);
  }
  FORGE_REQUIRE_ERROR(out_of_range, "RowsTapeView", tape.item(B));
}

// ---------------------------------------------------------------------------
// Order of checks, caller memory, hand-made views

TEST_CASE("arena: the arena is checked before the inputs, and any failure after that rewinds it") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>({1, 2, 3, 4});
  const Tensor float_mask = ctx.ones({4});
  const Tensor good_mask = ctx.from_vector<bool>({true, false, true, false});
  FORGE_REQUIRE_ERROR(invalid_argument, "masked_select", forge::masked_select(x, float_mask, nullptr));
  Arena arena{ctx};
  const Tensor kept = forge::masked_select(x, good_mask, &arena);
  FORGE_REQUIRE_ERROR(dtype, "masked_select", forge::masked_select(x, float_mask, &arena));
  CHECK(kept.buffer()->stale());  // a failed call leaves no outputs behind
  FORGE_REQUIRE_ERROR(invalid_argument, "nonzero", forge::nonzero(Tensor{}, &arena));
  CHECK(forge::masked_select(x, good_mask, &arena).to_vector<float>() == std::vector<float>{1, 3});
}

TEST_CASE("arena: bool masks in caller memory count any nonzero byte as true") {
  TestContext ctx;
  alignas(8) std::uint8_t bytes[4] = {0, 2, 1, 0};
  const Tensor mask = ctx.from_blob(bytes, {4}, DType::boolean);
  const Tensor x = ctx.from_vector<float>({10, 20, 30, 40});
  Arena arena{ctx};
  CHECK(forge::masked_select(x, mask, &arena).to_vector<float>() == std::vector<float>{20, 30});
  CHECK(forge::nonzero(mask, &arena).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2});
  CHECK(mask.to_vector<bool>() == std::vector<bool>{false, true, true, false});
  CHECK((mask + mask).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1, 1, 0});
}

TEST_CASE("arena: ragged views check the layout they are given") {
  TestContext ctx;
  const Tensor values = ctx.zeros({10});
  const Tensor expanded_offsets = ctx.zeros({1}, DType::i64).expand({100});
  FORGE_REQUIRE_ERROR(invalid_argument, "TapeView", TapeView(values, expanded_offsets));
  FORGE_REQUIRE_ERROR(invalid_argument, "TapeView", TapeView(values, ctx.zeros({3}, DType::f32)));
  FORGE_REQUIRE_ERROR(invalid_argument, "RowsTapeView", RowsTapeView(values, ctx.zeros({3}, DType::i64)));
  FORGE_REQUIRE_ERROR(invalid_argument, "RowsView", (void)RowsView(values));
  const TapeView tape(values, ctx.from_vector<std::int64_t>({0, 4, 10}));
  CHECK(tape.count() == 2);
  CHECK(tape.item(1).numel() == 6);
  FORGE_REQUIRE_ERROR(out_of_range, "TapeView", tape.item(2));
}
