// Tensors: creation (every dtype it applies to), reading (to_vector, item),
// copies (clone, contiguous, fill_, zero_, copy_ with broadcasting and dtype
// conversion), the version counter of in-place writes, and printing as
// libtorch prints (aten/src/ATen/core/Formatting.cpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support.h"

namespace {

using forge::BFloat16;
using forge::DType;
using forge::ErrorCode;
using forge::Half;
using forge::Shape;
using forge::Strides;
using forge::Tensor;
using forge_test::kAllDTypes;
using forge_test::kFloatDTypes;
using forge_test::TestContext;

// The element at `index` read straight from the buffer with the tensor's own
// strides and offset (no kernel involved), widened to double.
double read_at(const Tensor& t, const std::vector<std::int64_t>& index) {
  std::int64_t off = t.offset();
  for (int d = 0; d < t.dim(); ++d) off += index[static_cast<std::size_t>(d)] * t.strides()[d];
  const std::byte* p = t.buffer()->data() + off * static_cast<std::int64_t>(t.element_size());
  return forge::dispatch_dtype(t.dtype(), [&](auto tag) -> double {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, p, sizeof(T));
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return static_cast<float>(v);
    else
      return static_cast<double>(v);
  });
}

// Every element in row-major order of the logical index, read with read_at.
std::vector<double> read_all(const Tensor& t) {
  std::vector<double> out;
  const std::int64_t n = t.numel();
  std::vector<std::int64_t> index(static_cast<std::size_t>(t.dim()), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    out.push_back(read_at(t, index));
    for (int d = t.dim() - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < t.shape()[d]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

std::vector<double> iota(std::int64_t n, double start = 0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::string print(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace

// ============================================================================
// creation
// ============================================================================

TEST_CASE("tensor: empty gives a contiguous pooled tensor of the shape and dtype, for every dtype") {
  TestContext ctx;
  for (DType t : kAllDTypes) {
    INFO(forge::dtype_name(t));
    const auto before = ctx.stats().outstanding;
    const Tensor e = ctx.empty({2, 3, 4}, t);
    CHECK(ctx.stats().outstanding == before + 1);
    CHECK(e.defined());
    CHECK(e.dtype() == t);
    CHECK(e.shape() == Shape{2, 3, 4});
    CHECK(e.strides() == Strides{12, 4, 1});
    CHECK(e.dim() == 3);
    CHECK(e.numel() == 24);
    CHECK(e.offset() == 0);
    CHECK(e.element_size() == forge::dtype_size(t));
    CHECK(e.nbytes() == 24 * forge::dtype_size(t));
    CHECK(e.is_contiguous());
    CHECK(e.buffer()->nbytes() >= e.nbytes());
    CHECK(e.buffer()->pooled());
    CHECK(&e.runtime() == &ctx.runtime());
    CHECK(e.size(-1) == 4);
    CHECK(e.stride(0) == 12);
  }
  const Tensor z = ctx.empty({2, 0, 3});
  CHECK(z.numel() == 0);
  CHECK(z.shape() == Shape{2, 0, 3});
  const Tensor s = ctx.empty({});
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
}

TEST_CASE("tensor: zeros, ones and full hold their value in every dtype") {
  TestContext ctx;
  for (DType t : kAllDTypes) {
    INFO(forge::dtype_name(t));
    CHECK(ctx.zeros({2, 3}, t).to_vector<double>() == std::vector<double>(6, 0.0));
    CHECK(ctx.ones({3, 2}, t).to_vector<double>() == std::vector<double>(6, 1.0));
    if (t == DType::boolean) {  // bool takes 0 and 1 only (Note [Scalar conversion])
      FORGE_REQUIRE_ERROR(out_of_range, "full", (void)ctx.full({4}, 2.5, t));
      CHECK(ctx.full({4}, true, t).to_vector<bool>() == std::vector<bool>(4, true));
      continue;
    }
    const Tensor f = ctx.full({4}, 2.5, t);
    CHECK(f.dtype() == t);
    const double expected = forge::is_floating(t) ? 2.5 : 2.0;  // ints truncate
    CHECK(f.to_vector<double>() == std::vector<double>(4, expected));
  }
  CHECK(ctx.full({2}, -7, DType::i32).to_vector<std::int32_t>() == std::vector<std::int32_t>{-7, -7});
  CHECK(ctx.full({2}, 0.0, DType::boolean).to_vector<bool>() == std::vector<bool>{false, false});
  CHECK(ctx.full({}, 3.25).item<float>() == 3.25f);
  CHECK(ctx.zeros({0, 5}).numel() == 0);
  // The free functions use the current context.
  const Tensor g = forge::zeros({3});
  CHECK(&g.runtime() == &ctx.runtime());
  CHECK(forge::ones({2}, DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1});
  CHECK(forge::full({2}, 4.0).to_vector<float>() == std::vector<float>{4, 4});
}

// Note [Scalar conversion]: these used to saturate (1e30 -> 2147483647,
// -1 -> 0 in u8, 2 -> true).
TEST_CASE("tensor: full, fill_ and the ranges refuse a value that does not fit the dtype, naming op, value and dtype") {
  TestContext ctx;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN(), kInf = std::numeric_limits<double>::infinity();
  const auto before = ctx.stats().outstanding;
  CHECK(FORGE_REQUIRE_ERROR(out_of_range, "full", (void)ctx.full({2}, 1e30, DType::i32)) ==
        "[full] value 1e+30 does not fit in i32");
  CHECK(FORGE_REQUIRE_ERROR(out_of_range, "full", (void)ctx.full({2}, -1, DType::u8)) ==
        "[full] value -1 does not fit in u8");
  CHECK(FORGE_REQUIRE_ERROR(out_of_range, "full", (void)ctx.full({2}, 2, DType::boolean)) ==
        "[full] value 2 does not fit in bool (only 0 and 1 do)");
  CHECK(FORGE_REQUIRE_ERROR(out_of_range, "full", (void)ctx.full({2}, 2147483647.5, DType::i32)) ==
        "[full] value 2147483647.5 does not fit in i32");
  struct Bad {
    double value;
    DType dtype;
  };
  for (const Bad& b : {Bad{256, DType::u8},      Bad{-1.0, DType::u8},           Bad{255.5, DType::u8},
                       Bad{-0.5, DType::u8},     Bad{-2147483648.5, DType::i32}, Bad{0x1p63, DType::i64},
                       Bad{3e9, DType::i32},     Bad{-2147483649.0, DType::i32}, Bad{9.3e18, DType::i64},
                       Bad{kNaN, DType::i64},    Bad{kInf, DType::u8},           Bad{-kInf, DType::i32},
                       Bad{0.5, DType::boolean}, Bad{kNaN, DType::boolean},      Bad{-1, DType::boolean},
                       Bad{1e6, DType::f16},     Bad{1e39, DType::bf16},         Bad{1e300, DType::f32},
                       Bad{128, DType::i8},      Bad{-129, DType::i8},           Bad{127.5, DType::i8},
                       Bad{kNaN, DType::i8}}) {
    CAPTURE(b.value, forge::dtype_name(b.dtype));
    FORGE_REQUIRE_ERROR(out_of_range, "full", (void)ctx.full({2}, b.value, b.dtype));
    FORGE_REQUIRE_ERROR(out_of_range, "full", (void)forge::full({2}, b.value, b.dtype));
    Tensor x = ctx.zeros({2}, b.dtype);
    FORGE_REQUIRE_ERROR(out_of_range, "fill_", x.fill_(b.value));
    CHECK(x.to_vector<double>() == std::vector<double>{0, 0});  // untouched
    FORGE_REQUIRE_ERROR(out_of_range, "pad", (void)forge::pad(x, {1, 1}, forge::PadMode::constant, b.value));
    Tensor padded = ctx.zeros({4}, b.dtype);
    FORGE_REQUIRE_ERROR(out_of_range, "pad_into",
                        forge::pad_into(padded, x, {1, 1}, forge::PadMode::constant, b.value));
  }
  FORGE_REQUIRE_ERROR(out_of_range, "full", (void)ctx.full({2}, std::int64_t{1} << 31, DType::i32));
  FORGE_REQUIRE_ERROR(out_of_range, "arange", (void)ctx.arange(250, 300, 1, DType::u8));
  FORGE_REQUIRE_ERROR(out_of_range, "arange", (void)ctx.arange(-1, 5, 1, DType::u8));
  FORGE_REQUIRE_ERROR(out_of_range, "linspace", (void)ctx.linspace(0, 3e9, 3, DType::i32));
  CHECK(ctx.stats().outstanding == before);

  // What fits: the edges of each range, floats within it (truncated), inf and NaN in floats,
  // and i64 values past 2^53 exactly.
  CHECK(ctx.full({1}, 255, DType::u8).item<std::uint8_t>() == 255);
  CHECK(ctx.full({1}, 254.9, DType::u8).item<std::uint8_t>() == 254);
  CHECK(ctx.full({1}, -128, DType::i8).item<std::int8_t>() == -128);
  CHECK(ctx.full({1}, -127.9, DType::i8).item<std::int8_t>() == -127);
  CHECK(ctx.full({1}, -2147483647.9, DType::i32).item<std::int32_t>() == -2147483647);
  CHECK(ctx.full({1}, -0x1p63, DType::i64).item<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
  CHECK(ctx.full({1}, std::numeric_limits<std::int64_t>::min(), DType::i64).item<std::int64_t>() ==
        std::numeric_limits<std::int64_t>::min());
  CHECK(ctx.full({1}, (std::int64_t{1} << 53) + 1, DType::i64).item<std::int64_t>() == (std::int64_t{1} << 53) + 1);
  CHECK(ctx.full({1}, 1.0, DType::boolean).item<bool>());
  CHECK(!ctx.full({1}, false, DType::boolean).item<bool>());
  CHECK(std::isinf(ctx.full({1}, kInf, DType::f16).item<float>()));
  CHECK(std::isnan(ctx.full({1}, kNaN, DType::bf16).item<float>()));
  CHECK(ctx.full({1}, 65504, DType::f16).item<float>() == 65504);
  CHECK(ctx.full({1}, 1e-300, DType::f32).item<float>() == 0);  // rounds to zero: fits
  Tensor y = ctx.zeros({2}, DType::i64);
  y.fill_((std::int64_t{1} << 62) + 1);
  CHECK(y.to_vector<std::int64_t>() == std::vector<std::int64_t>(2, (std::int64_t{1} << 62) + 1));
  CHECK(forge::pad(ctx.zeros({1}, DType::u8), {1, 1}, forge::PadMode::constant, 255).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{255, 0, 255});
  // reflect and replicate never read the value.
  CHECK(forge::pad(ctx.zeros({2}, DType::u8), {1, 1}, forge::PadMode::replicate, 1e9).numel() == 4);
  CHECK(ctx.arange(250, 256, 1, DType::u8).to_vector<double>() == std::vector<double>{250, 251, 252, 253, 254, 255});
}

TEST_CASE("tensor: the free creation functions need a live context and use the innermost one") {
  FORGE_REQUIRE_ERROR(invalid_argument, "zeros", forge::zeros({2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "from_vector", forge::from_vector<float>({1.0f}));
  TestContext outer;
  {
    TestContext inner;
    CHECK(&forge::zeros({2}).runtime() == &inner.runtime());
  }
  CHECK(&forge::zeros({2}).runtime() == &outer.runtime());
  CHECK(forge::ExecContext::current() == &outer);
}

TEST_CASE("tensor: arange counts up and down, with fractional and negative steps, in every numeric dtype") {
  TestContext ctx;
  CHECK(ctx.arange(5).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(ctx.arange(5).dtype() == DType::f32);
  CHECK(ctx.arange(1, 2.5, 0.5).to_vector<float>() == std::vector<float>{1, 1.5, 2});
  CHECK(ctx.arange(3, -3, -1.5, DType::f64).to_vector<double>() == std::vector<double>{3, 1.5, 0, -1.5});
  CHECK(ctx.arange(5, 0, -1, DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{5, 4, 3, 2, 1});
  CHECK(ctx.arange(0, 1, 0.3, DType::f64).numel() == 4);  // 0, .3, .6, .9: ceil((end - start) / step)
  CHECK(ctx.arange(2, 2).numel() == 0);
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::i8}) {
    INFO(forge::dtype_name(t));
    const Tensor a = ctx.arange(0, 6, 1, t);
    CHECK(a.dtype() == t);
    CHECK(a.shape() == Shape{6});
    CHECK(a.to_vector<double>() == iota(6));
  }
  FORGE_REQUIRE_ERROR(invalid_argument, "arange", ctx.arange(0, 5, -1));
  FORGE_REQUIRE_ERROR(invalid_argument, "arange", ctx.arange(0, 5, 0));
  FORGE_REQUIRE_ERROR(invalid_argument, "arange", ctx.arange(0, std::numeric_limits<double>::infinity()));
}

TEST_CASE("tensor: linspace hits both endpoints exactly and spaces the rest evenly") {
  TestContext ctx;
  CHECK(ctx.linspace(0, 1, 5, DType::f64).to_vector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  for (std::int64_t steps : {2, 3, 7, 10, 101}) {
    for (DType t : {DType::f32, DType::f64}) {
      INFO("steps " << steps << " " << forge::dtype_name(t));
      const double start = -1.3, end = 2.7;
      const Tensor l = ctx.linspace(start, end, steps, t);
      REQUIRE(l.shape() == Shape{steps});
      const std::vector<double> v = l.to_vector<double>();
      const double round = t == DType::f32 ? 1e-6 : 1e-12;
      CHECK(v.front() == (t == DType::f32 ? static_cast<double>(static_cast<float>(start)) : start));
      CHECK(v.back() == (t == DType::f32 ? static_cast<double>(static_cast<float>(end)) : end));
      const double step = (end - start) / static_cast<double>(steps - 1);
      for (std::int64_t i = 0; i < steps; ++i)
        CHECK(std::fabs(v[static_cast<std::size_t>(i)] - (start + step * static_cast<double>(i))) <= round * 4);
    }
  }
  CHECK(ctx.linspace(0, 8, 5, DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 2, 4, 6, 8});
  CHECK(ctx.linspace(10, 0, 3, DType::f32).to_vector<float>() == std::vector<float>{10, 5, 0});
  CHECK(ctx.linspace(0, 1, 0).numel() == 0);
  FORGE_REQUIRE_ERROR(invalid_argument, "linspace", ctx.linspace(0, 1, -1));
}

TEST_CASE("tensor: linspace with one step gives the start, as libtorch does") {
  TestContext ctx;
  // libtorch's linspace_out fills `start` when steps == 1.
  CHECK(ctx.linspace(2, 5, 1, DType::f64).to_vector<double>() == std::vector<double>{2});
}

TEST_CASE("tensor: eye is the identity, also rectangular and in every dtype") {
  TestContext ctx;
  for (DType t : kAllDTypes) {
    for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{3, -1}, {2, 4}, {4, 2}, {1, 1}, {3, 0}}) {
      INFO(forge::dtype_name(t) << " eye(" << n << ", " << m << ")");
      const Tensor e = ctx.eye(n, m, t);
      const std::int64_t cols = m < 0 ? n : m;
      REQUIRE(e.shape() == Shape{n, cols});
      CHECK(e.dtype() == t);
      const std::vector<double> v = e.to_vector<double>();
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          CHECK(v[static_cast<std::size_t>(i * cols + j)] == (i == j ? 1.0 : 0.0));
    }
  }
  CHECK(ctx.eye(0).shape() == Shape{0, 0});
  FORGE_REQUIRE_ERROR(invalid_argument, "eye", ctx.eye(-1));
}

TEST_CASE("tensor: rand lies in the half-open unit interval for every float dtype") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor r = ctx.rand({100000}, t);
    CHECK(r.dtype() == t);
    const std::vector<double> v = r.to_vector<double>();
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    CHECK(*lo >= 0.0);
    CHECK(*hi < 1.0);
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    CHECK(std::fabs(mean - 0.5) < 0.01);
    CHECK(*hi - *lo > 0.9);
  }
  FORGE_REQUIRE_ERROR(dtype, "rand", ctx.rand({2}, DType::i32));
}

TEST_CASE("tensor: randn has mean about 0 and standard deviation about 1") {
  TestContext ctx;
  for (DType t : kFloatDTypes) {
    INFO(forge::dtype_name(t));
    const std::vector<double> v = ctx.randn({100000}, t).to_vector<double>();
    double sum = 0, sq = 0;
    for (double x : v) {
      sum += x;
      sq += x * x;
    }
    CHECK(std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }));
    const double n = static_cast<double>(v.size());
    const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    CHECK(std::fabs(mean) < 0.02);
    CHECK(std::fabs(sd - 1.0) < 0.02);
    // Roughly 68% within one standard deviation.
    const auto inside = std::count_if(v.begin(), v.end(), [](double x) { return std::fabs(x) < 1.0; });
    CHECK(std::fabs(static_cast<double>(inside) / n - 0.6827) < 0.01);
  }
  FORGE_REQUIRE_ERROR(dtype, "randn", ctx.randn({2}, DType::i64));
}

TEST_CASE("tensor: manual_seed makes rand and randn repeat and a different seed differs") {
  TestContext ctx;
  ctx.manual_seed(42);
  const std::vector<float> a = ctx.rand({64}).to_vector<float>();
  const std::vector<float> an = ctx.randn({64}).to_vector<float>();
  ctx.manual_seed(42);
  CHECK(ctx.rand({64}).to_vector<float>() == a);
  CHECK(ctx.randn({64}).to_vector<float>() == an);
  ctx.manual_seed(43);
  CHECK(ctx.rand({64}).to_vector<float>() != a);
  // Two draws in a row differ.
  CHECK(ctx.rand({64}).to_vector<float>() != ctx.rand({64}).to_vector<float>());
}

TEST_CASE("tensor: from_vector round-trips every dtype and checks the count against the shape") {
  TestContext ctx;
  CHECK(ctx.from_vector<float>({1.5f, -2, 3}).to_vector<float>() == std::vector<float>{1.5f, -2, 3});
  CHECK(ctx.from_vector<double>({1e300, -0.1}).to_vector<double>() == std::vector<double>{1e300, -0.1});
  CHECK(ctx.from_vector<std::int32_t>({-5, 7}).to_vector<std::int32_t>() == std::vector<std::int32_t>{-5, 7});
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  CHECK(ctx.from_vector<std::int64_t>({big, -big}).to_vector<std::int64_t>() == std::vector<std::int64_t>{big, -big});
  CHECK(ctx.from_vector<std::uint8_t>({0, 255}).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 255});
  CHECK(ctx.from_vector<bool>({true, false, true}).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(ctx.from_vector<bool>({true}).dtype() == DType::boolean);
  const Tensor h = ctx.from_vector<Half>({Half(1.5f), Half(-65504.0f)});
  CHECK(h.dtype() == DType::f16);
  CHECK(h.to_vector<float>() == std::vector<float>{1.5f, -65504.0f});
  const Tensor b = ctx.from_vector<BFloat16>({BFloat16(0.75f), BFloat16(-3.0f)});
  CHECK(b.dtype() == DType::bf16);
  CHECK(b.to_vector<float>() == std::vector<float>{0.75f, -3.0f});
  const Tensor m = ctx.from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(m.shape() == Shape{2, 3});
  CHECK(read_all(m) == iota(6, 1));
  const Tensor s = ctx.from_vector<float>({9}, {});
  CHECK(s.dim() == 0);
  CHECK(s.item<float>() == 9);
  CHECK(ctx.from_vector<float>({}, {0, 3}).shape() == Shape{0, 3});
  std::string msg = FORGE_REQUIRE_ERROR(shape, "from_vector", ctx.from_vector<float>({1, 2, 3}, {2, 2}));
  CHECK_THAT(msg, Catch::Contains("3") && Catch::Contains("[2, 2]"));
  FORGE_REQUIRE_ERROR(invalid_argument, "from_vector", ctx.from_vector<float>({1, 2}, {-1, -2}));
}

TEST_CASE("tensor: from_blob shares the caller's memory and releases it once, after the last view") {
  TestContext ctx;
  alignas(64) float data[6] = {1, 2, 3, 4, 5, 6};
  int released = 0;
  const auto before = ctx.stats().outstanding;
  {
    Tensor t = ctx.from_blob(data, {2, 3}, DType::f32, [&] { ++released; });
    CHECK(ctx.stats().outstanding == before);  // not a pooled buffer
    CHECK_FALSE(t.buffer()->pooled());
    CHECK(t.data_ptr<float>() == data);
    CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
    data[0] = 10;  // the caller's writes show through
    CHECK(t.to_vector<float>()[0] == 10);
    t.fill_(7);  // and the tensor's writes land in the caller's memory
    CHECK(data[5] == 7);
    Tensor v = t.select(0, 1);
    t = Tensor();
    CHECK(released == 0);
    CHECK(v.to_vector<float>() == std::vector<float>{7, 7, 7});
    v = Tensor();
    CHECK(released == 1);
  }
  CHECK(released == 1);
  std::int64_t ints[3] = {4, 5, 6};
  CHECK(ctx.from_blob(ints, {3}, DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{4, 5, 6});
  // Misaligned for the dtype, or null with elements: refused.
  FORGE_REQUIRE_ERROR(invalid_argument, "from_blob", ctx.from_blob(reinterpret_cast<char*>(data) + 1, {2}, DType::f32));
  FORGE_REQUIRE_ERROR(invalid_argument, "from_blob", ctx.from_blob(nullptr, {2}, DType::f32));
  FORGE_REQUIRE_ERROR(invalid_argument, "from_blob", ctx.from_blob(data, {-2}, DType::f32));
}

// ============================================================================
// reading
// ============================================================================

TEST_CASE("tensor: to_vector reads views in logical order and converts dtypes") {
  TestContext ctx;
  const Tensor m = ctx.from_vector<std::int32_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  CHECK(m.t().to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(m.slice(1, 0, 4, 2).to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 10});
  CHECK(m.to_vector<bool>()[0] == false);
  CHECK(m.to_vector<bool>()[1] == true);
  CHECK(ctx.zeros({0}).to_vector<float>().empty());
  CHECK(Tensor().to_vector<float>().empty());
}

TEST_CASE("tensor: item reads the single element and refuses any other count") {
  TestContext ctx;
  CHECK(ctx.full({}, 2.5).item<float>() == 2.5f);
  CHECK(ctx.full({1, 1}, 7, DType::i64).item<std::int64_t>() == 7);
  CHECK(ctx.full({1}, 3, DType::i32).item<double>() == 3.0);  // converts
  CHECK(ctx.full({}, 1, DType::boolean).item<bool>());
  CHECK(ctx.arange(10).narrow(0, 4, 1).item<float>() == 4.0f);
  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "item", ctx.zeros({2, 3}).item<float>());
  CHECK_THAT(msg, Catch::Contains("[2, 3]") && Catch::Contains("6"));
  FORGE_REQUIRE_ERROR(invalid_argument, "item", ctx.zeros({0}).item<float>());
  FORGE_REQUIRE_ERROR(invalid_argument, "item", Tensor().item<float>());
}

TEST_CASE("tensor: data_ptr checks the dtype and points at the first element of a view") {
  TestContext ctx;
  const Tensor a = ctx.arange(10);
  CHECK(a.data_ptr<float>()[3] == 3.0f);
  CHECK(a.narrow(0, 4, 3).data_ptr<float>() == a.data_ptr<float>() + 4);
  FORGE_REQUIRE_ERROR(dtype, "data_ptr", a.data_ptr<double>());
  FORGE_REQUIRE_ERROR(invalid_argument, "data_ptr", Tensor().data_ptr<float>());
}

// ============================================================================
// copies
// ============================================================================

TEST_CASE("tensor: clone is a packed copy in a new buffer, independent of the original") {
  TestContext ctx;
  const Tensor base = ctx.from_vector<double>(iota(12), {3, 4});
  for (const Tensor& src : {base, base.t(), base.slice(1, 1, 4, 2), base.select(1, 2)}) {
    const Tensor c = src.clone();
    CHECK(c.buffer().get() != src.buffer().get());
    CHECK(c.is_contiguous());
    CHECK(c.shape() == src.shape());
    CHECK(c.strides() == forge::contiguous_strides(src.shape()));
    CHECK(c.offset() == 0);
    CHECK(c.dtype() == src.dtype());
    CHECK(read_all(c) == read_all(src));
  }
  Tensor c = base.clone();
  c.fill_(-1);
  CHECK(read_all(base) == iota(12));
  CHECK(ctx.zeros({2, 0}).clone().shape() == Shape{2, 0});
}

TEST_CASE("tensor: contiguous returns the same tensor when packed, a packed copy of a transposed view") {
  TestContext ctx;
  const Tensor a = ctx.from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const auto before = ctx.stats().outstanding;
  const Tensor same = a.contiguous();
  CHECK(same.buffer().get() == a.buffer().get());
  CHECK(same.offset() == a.offset());
  CHECK(ctx.stats().outstanding == before);
  const Tensor t = a.t();
  CHECK_FALSE(t.is_contiguous());
  const Tensor packed = t.contiguous();
  CHECK(packed.buffer().get() != a.buffer().get());
  CHECK(packed.is_contiguous());
  CHECK(packed.shape() == Shape{3, 2});
  CHECK(packed.strides() == Strides{2, 1});
  CHECK(packed.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(ctx.stats().outstanding == before + 1);
  // A narrowed row is contiguous: no copy.
  CHECK(a.select(0, 1).contiguous().buffer().get() == a.buffer().get());
  // A column with step is not.
  CHECK(a.select(1, 1).contiguous().buffer().get() != a.buffer().get());
  // An expanded view packs into real copies of the repeated values.
  const Tensor e = ctx.from_vector<float>({1, 2}, {2, 1}).expand({2, 3}).contiguous();
  CHECK(e.strides() == Strides{3, 1});
  CHECK(e.to_vector<float>() == std::vector<float>{1, 1, 1, 2, 2, 2});
}

TEST_CASE("tensor: fill_ and zero_ write every element of every dtype, and only the view's elements") {
  TestContext ctx;
  for (DType t : kAllDTypes) {
    INFO(forge::dtype_name(t));
    Tensor x = ctx.empty({3, 5}, t);
    x.fill_(1);
    CHECK(x.to_vector<double>() == std::vector<double>(15, 1.0));
    x.zero_();
    CHECK(x.to_vector<double>() == std::vector<double>(15, 0.0));
  }
  Tensor base = ctx.zeros({4, 4});
  Tensor col = base.select(1, 2);
  col.fill_(5);
  Tensor corner = base.slice(0, 0, 4, 3).slice(1, 0, 1);  // rows 0 and 3, column 0
  corner.fill_(-1);
  const std::vector<double> v = read_all(base);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const double want = j == 2 ? 5 : (j == 0 && (i == 0 || i == 3)) ? -1 : 0;
      CHECK(v[static_cast<std::size_t>(i * 4 + j)] == want);
    }
}

TEST_CASE("tensor: copy_ broadcasts the source and converts its dtype") {
  TestContext ctx;
  Tensor dst = ctx.zeros({2, 3});
  dst.copy_(ctx.from_vector<float>({1, 2, 3}));
  CHECK(dst.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
  dst.copy_(ctx.from_vector<float>({7, 8}, {2, 1}));
  CHECK(dst.to_vector<float>() == std::vector<float>{7, 7, 7, 8, 8, 8});
  dst.copy_(ctx.full({}, 4.5));
  CHECK(dst.to_vector<float>() == std::vector<float>(6, 4.5f));

  Tensor ints = ctx.zeros({4}, DType::i32);
  ints.copy_(ctx.from_vector<double>({1.9, -1.9, 300.2, -0.5}));
  CHECK(ints.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, -1, 300, 0});
  Tensor halves = ctx.zeros({2}, DType::f16);
  halves.copy_(ctx.from_vector<float>({1.0f + std::ldexp(1.0f, -11), 65520.0f}));
  CHECK(halves.to_vector<float>()[0] == 1.0f);
  CHECK(std::isinf(halves.to_vector<float>()[1]));
  Tensor flags = ctx.zeros({3}, DType::boolean);
  flags.copy_(ctx.from_vector<float>({0.0f, 0.5f, -2.0f}));
  CHECK(flags.to_vector<bool>() == std::vector<bool>{false, true, true});
  Tensor bytes = ctx.zeros({2, 2}, DType::u8);
  bytes.copy_(ctx.from_vector<bool>({true, false}));
  CHECK(bytes.to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 0, 1, 0});

  // Into a transposed destination: element [i, j] of the view is [j, i] of the base.
  Tensor base = ctx.zeros({2, 3});
  Tensor view = base.t();
  view.copy_(ctx.from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  CHECK(base.to_vector<float>() == std::vector<float>{1, 3, 5, 2, 4, 6});

  std::string msg = FORGE_REQUIRE_ERROR(shape, "copy_", dst.copy_(ctx.zeros({3, 2})));
  CHECK_THAT(msg, Catch::Contains("[3, 2]"));
  FORGE_REQUIRE_ERROR(shape, "copy_", dst.copy_(ctx.zeros({4, 2, 3})));  // would grow the destination
}

TEST_CASE("tensor: copy_ between overlapping views of one buffer reads the source before writing") {
  TestContext ctx;
  Tensor t = ctx.from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor dst = t.narrow(0, 1, 5);
  const Tensor src = t.narrow(0, 0, 5);
  try {
    dst.copy_(src);
  } catch (const forge::Error& e) {  // refusing the overlap is acceptable too, if it leaves t as it was
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(t.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    return;
  }
  CHECK(t.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4, 6, 7, 8, 9});
}

TEST_CASE("tensor: every in-place write bumps the version counter that all views share") {
  TestContext ctx;
  Tensor t = ctx.zeros({2, 3});
  Tensor view = t.select(0, 1);
  std::uint32_t v = t.version();
  auto bumped = [&](const char* what) {
    INFO(what);
    CHECK(t.version() > v);
    CHECK(view.version() == t.version());
    v = t.version();
  };
  t.fill_(1);
  bumped("fill_");
  t.zero_();
  bumped("zero_");
  t.copy_(ctx.ones({3}));
  bumped("copy_");
  view.fill_(2);
  bumped("fill_ through a view");
  forge::add_into(t, t, t);
  bumped("add_into");
  forge::mul_into(t, t, t);
  bumped("mul_into");
  forge::relu_into(t, t);
  bumped("relu_into");
  // Reading, viewing and out-of-place ops do not.
  (void)t.to_vector<float>();
  (void)t.t().contiguous();
  (void)forge::add(t, t);
  (void)t.clone();
  CHECK(t.version() == v);
}

// ============================================================================
// printing, as libtorch prints
// ============================================================================

TEST_CASE("tensor: printing an integer-valued float matrix gives libtorch's rows and footer") {
  TestContext ctx;
  const Tensor m = ctx.from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  // setw(expMax + 1) per value, " " between columns.
  CHECK(print(m) == " 1  2  3\n 4  5  6\n[ CPUFloatType{2,3} ]");
  CHECK(m.str() == print(m));
  CHECK(print(ctx.from_vector<float>({10, -2, 30, 4}, {2, 2})) == " 10  -2\n 30   4\n[ CPUFloatType{2,2} ]");
  // A transposed view prints in logical order.
  CHECK(print(m.t()) == " 1  4\n 2  5\n 3  6\n[ CPUFloatType{3,2} ]");
}

TEST_CASE("tensor: printing a 1-D tensor gives a column") {
  TestContext ctx;
  CHECK(print(ctx.arange(1, 4, 1, DType::i64)) == " 1\n 2\n 3\n[ CPULongType{3} ]");
  CHECK(print(ctx.from_vector<bool>({true, false, true})) == " 1\n 0\n 1\n[ CPUBoolType{3} ]");
  CHECK(print(ctx.from_vector<double>({0.25, 10.5, -2})) == "  0.2500\n 10.5000\n -2.0000\n[ CPUDoubleType{3} ]");
}

TEST_CASE("tensor: printing names every dtype's libtorch type in the footer") {
  TestContext ctx;
  const std::pair<DType, const char*> names[] = {
      {DType::f32, "CPUFloatType"},     {DType::f64, "CPUDoubleType"},   {DType::f16, "CPUHalfType"},
      {DType::bf16, "CPUBFloat16Type"}, {DType::i32, "CPUIntType"},      {DType::i64, "CPULongType"},
      {DType::u8, "CPUByteType"},       {DType::boolean, "CPUBoolType"}, {DType::i8, "CPUCharType"}};
  for (const auto& [t, name] : names) {
    INFO(name);
    CHECK(print(ctx.ones({2}, t)) == std::string(" 1\n 1\n[ ") + name + "{2} ]");
    CHECK(print(ctx.zeros({2, 0}, t)) == std::string("[ ") + name + "{2,0} ]");
  }
}

TEST_CASE("tensor: printing a 0-d tensor gives the value then an empty shape") {
  TestContext ctx;
  CHECK(print(ctx.full({}, 7, DType::i64)) == "7\n[ CPULongType{} ]");
  CHECK(print(ctx.full({}, -2, DType::f32)) == "-2\n[ CPUFloatType{} ]");
}

TEST_CASE("tensor: printing a non-integer 0-d tensor uses the default float format, as libtorch") {
  TestContext ctx;
  // libtorch: stream << defaultfloat << value << '\n' (not the fixed 4-decimal matrix format).
  CHECK(print(ctx.full({}, 3.5, DType::f32)) == "3.5\n[ CPUFloatType{} ]");
}

TEST_CASE("tensor: printing non-integer floats uses 4 decimals at a common width") {
  TestContext ctx;
  // expMax = 1 gives width 7 and fixed 4 decimals.
  CHECK(print(ctx.from_vector<float>({0.5f, 1.25f, 2.5f, -3.75f}, {2, 2})) ==
        " 0.5000  1.2500\n 2.5000 -3.7500\n[ CPUFloatType{2,2} ]");
  // A NaN does not change the format of the others.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string s = print(ctx.from_vector<double>({1.5, nan}));
  CHECK_THAT(s, Catch::StartsWith(" 1.5000\n"));
  CHECK_THAT(s, Catch::EndsWith("\n[ CPUDoubleType{2} ]"));
}

TEST_CASE("tensor: printing a 3-D tensor gives libtorch's (i,.,.) blocks with indented rows") {
  TestContext ctx;
  const Tensor t = ctx.from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  // libtorch prints each slice with __printMatrix(..., indent = 1): every row starts with one extra space.
  CHECK(print(t) == "(1,.,.) = \n  1  2\n  3  4\n\n(2,.,.) = \n  5  6\n  7  8\n[ CPUFloatType{2,2,2} ]");
}

TEST_CASE("tensor: printing a 3-D tensor names each block and prints its values") {
  TestContext ctx;
  const Tensor t = ctx.from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 2, 2});
  const std::string s = print(t);
  // Block headers in order, the values of each block after its header, and the footer.
  const auto h1 = s.find("(1,.,.) = \n"), h2 = s.find("(2,.,.) = \n"), h3 = s.find("(3,.,.) = \n");
  REQUIRE(h1 == 0);
  REQUIRE(h2 != std::string::npos);
  REQUIRE(h3 != std::string::npos);
  CHECK(h1 < h2);
  CHECK(h2 < h3);
  CHECK(s.find(" 4\n", h1) < h2);
  CHECK(s.find(" 8\n", h2) < h3);
  CHECK(s.find("12\n", h3) != std::string::npos);
  CHECK_THAT(s, Catch::EndsWith("[ CPUFloatType{3,2,2} ]"));
}

TEST_CASE("tensor: printing small values uses libtorch's scale line") {
  TestContext ctx;
  // expMax = -2 < 0: width 7, scale 10^(expMax-1) printed with the default float format.
  CHECK(print(ctx.from_vector<double>({0.001, 0.0025})) == "0.001 *\n 1.0000\n 2.5000\n[ CPUDoubleType{2} ]");
}

TEST_CASE("tensor: printing leaves the stream's format as it was, and undefined tensors print a marker") {
  TestContext ctx;
  std::ostringstream os;
  os << ctx.from_vector<float>({0.5f, 1.5f}) << "|" << 1.25 << "|" << 100.0;
  CHECK_THAT(os.str(), Catch::EndsWith("|1.25|100"));
  CHECK(print(Tensor()) == "[ Tensor (undefined) ]");
}
