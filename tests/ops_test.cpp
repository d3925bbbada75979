// add, mul, relu against naive loops written here: NumPy broadcasting and
// libtorch promotion reimplemented by hand, inputs read straight from their
// buffers through their own strides, arithmetic in double for the float
// dtypes (rounded once, to nearest even, to the result dtype) and two's
// complement wrapping for the integers. Covers every dtype, broadcast and
// zero-size shapes, non-contiguous inputs (transposed, sliced with a step,
// expanded), the parallel path, the _into forms and the operators.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "format16.h"
#include "reference.h"
#include "support.h"

namespace {

using forge::BFloat16;
using forge::DType;
using forge::ErrorCode;
using forge::Half;
using forge::Shape;
using forge::Tensor;
using forge_test::kAllDTypes;
using forge_test::kFloatDTypes;
using forge_test::TestContext;
using Index = std::vector<std::int64_t>;

// ---- the reference semantics ----

int int_bits(DType t) { return t == DType::i64 ? 64 : t == DType::i32 ? 32 : 8; }

// libtorch's promotion over forge's dtypes, restated: bool < u8 < i32 < i64 <
// floats; two different 16-bit floats meet at f32; f64 beats every float.
DType reference_promote(DType a, DType b) {
  if (a == b) return a;
  const bool fa = forge::is_floating(a), fb = forge::is_floating(b);
  if (fa && fb) return (a == DType::f64 || b == DType::f64) ? DType::f64 : DType::f32;
  if (fa) return a;
  if (fb) return b;
  auto rank = [](DType t) {
    return t == DType::boolean ? 0 : t == DType::u8 || t == DType::i8 ? 1 : t == DType::i32 ? 2 : 3;
  };
  if (rank(a) == rank(b)) return DType::i32;  // u8 with i8: libtorch's i16, which forge lacks
  return rank(a) > rank(b) ? a : b;
}

// A value (exact, as long double) rounded into dtype t; only the conversions
// promotion needs (anything into a float; bool or a narrower int into an int).
long double to_dtype(long double v, DType t) {
  switch (t) {
    case DType::f64:
      return static_cast<double>(v);
    case DType::f32:
      return static_cast<float>(v);
    case DType::f16:
      return forge_test::f16_format().value(forge_test::f16_format().round(static_cast<double>(v)));
    case DType::bf16:
      return forge_test::bf16_format().value(forge_test::bf16_format().round(static_cast<double>(v)));
    case DType::boolean:
      return (std::isnan(v) || v != 0) ? 1 : 0;
    default:
      return v;
  }
}

// The low int_bits(t) bits of u, read as a value of integer dtype t.
long double wrap(std::uint64_t u, DType t) {
  const int bits = int_bits(t);
  if (bits == 64) return static_cast<long double>(static_cast<std::int64_t>(u));
  const std::uint64_t low = u & ((std::uint64_t{1} << bits) - 1);
  if (t == DType::u8) return static_cast<long double>(low);
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  return static_cast<long double>(static_cast<std::int64_t>(low ^ sign) - static_cast<std::int64_t>(sign));
}

enum class Op { add, mul, relu };

// x (op) y computed in dtype t (both already values of t).
long double apply(Op op, long double x, long double y, DType t) {
  if (t == DType::boolean) return op == Op::add ? ((x != 0 || y != 0) ? 1 : 0) : ((x != 0 && y != 0) ? 1 : 0);
  if (forge::is_floating(t)) {
    const double a = static_cast<double>(x), b = static_cast<double>(y);
    return to_dtype(op == Op::add ? a + b : a * b, t);
  }
  // Unsigned 64-bit arithmetic wraps modulo 2^64, which keeps every low bit right.
  const auto ux = static_cast<std::uint64_t>(static_cast<std::int64_t>(x));
  const auto uy = static_cast<std::uint64_t>(static_cast<std::int64_t>(y));
  return wrap(op == Op::add ? ux + uy : ux * uy, t);
}

long double reference_relu(long double x) {
  if (std::isnan(x)) return x;
  return x > 0 ? x : 0;
}

// ---- reading tensors naively ----

// The element at `index`, read from the buffer with the tensor's own strides, widened exactly.
long double read_at(const Tensor& t, const std::int64_t* index) {
  std::int64_t off = t.offset();
  for (int d = 0; d < t.dim(); ++d) off += index[d] * t.strides()[d];
  const std::byte* p = t.buffer()->data() + off * static_cast<std::int64_t>(t.element_size());
  return forge::dispatch_dtype(t.dtype(), [&](auto tag) -> long double {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, p, sizeof(T));
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return static_cast<float>(v);
    else if constexpr (std::is_same_v<T, bool>)
      return v ? 1 : 0;
    else
      return static_cast<long double>(v);
  });
}

Shape reference_broadcast(const Shape& a, const Shape& b) {
  const int r = std::max(a.rank(), b.rank());
  Shape out = Shape::filled(r, 1);
  for (int i = 0; i < r; ++i) {
    const int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    REQUIRE((da == db || da == 1 || db == 1));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The input index that broadcasting reads for output index `out` (rank r).
void input_index(const Shape& in_shape, const Index& out, int r, Index& in) {
  const int lead = r - in_shape.rank();
  in.resize(static_cast<std::size_t>(in_shape.rank()));
  for (int d = 0; d < in_shape.rank(); ++d)
    in[static_cast<std::size_t>(d)] = in_shape[d] == 1 ? 0 : out[static_cast<std::size_t>(d + lead)];
}

bool same_value(long double got, long double want) {
  if (std::isnan(want)) return std::isnan(got);
  return got == want;
}

// Checks out = op(a, b) (or relu(a) when b is undefined) element by element.
// The result is computed in the promoted dtype, then converted to out's dtype
// when an _into wrote into another one.
void check_against_reference(Op op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const bool unary = op == Op::relu;
  const Shape shape = unary ? a.shape() : reference_broadcast(a.shape(), b.shape());
  const DType dtype = unary ? a.dtype() : reference_promote(a.dtype(), b.dtype());
  std::string what = a.shape().str() + " " + std::string(forge::dtype_name(a.dtype()));
  if (!unary) what += " with " + b.shape().str() + " " + std::string(forge::dtype_name(b.dtype()));
  INFO(what << " into " << forge::dtype_name(out.dtype()));
  REQUIRE(out.shape() == shape);
  const int r = shape.rank();
  Index idx(static_cast<std::size_t>(r), 0), ia, ib;
  int mismatches = 0;
  for (std::int64_t n = 0; n < shape.numel(); ++n) {
    long double want;
    input_index(a.shape(), idx, r, ia);
    const long double x = to_dtype(read_at(a, ia.data()), dtype);
    if (unary) {
      want = reference_relu(x);
    } else {
      input_index(b.shape(), idx, r, ib);
      const long double y = to_dtype(read_at(b, ib.data()), dtype);
      want = apply(op, x, y, dtype);
    }
    want = out.dtype() == dtype ? want : to_dtype(want, out.dtype());
    const long double got = read_at(out, idx.data());
    if (!same_value(got, want)) {
      if (mismatches < 3) {
        std::string where;
        for (auto i : idx) where += std::to_string(i) + ",";
        FAIL_CHECK("at [" << where << "] got " << static_cast<double>(got) << ", expected "
                          << static_cast<double>(want));
      }
      ++mismatches;
    }
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < shape[d]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
  CHECK(mismatches == 0);
}

// ---- making inputs ----

struct Gen {
  std::mt19937_64 rng{20240601};
  // A random value of dtype t (exactly representable in it).
  long double value(DType t) {
    switch (t) {
      case DType::f32:
      case DType::f64:
      case DType::f16:
      case DType::bf16: {
        const double v = std::uniform_real_distribution<double>(-8, 8)(rng);
        return to_dtype(v, t);
      }
      case DType::i32:
        return static_cast<std::int32_t>(static_cast<std::uint32_t>(rng()));
      case DType::i64:
        return static_cast<long double>(static_cast<std::int64_t>(rng()));
      case DType::u8:
        return static_cast<long double>(rng() & 0xffu);
      case DType::i8:
        return static_cast<long double>(static_cast<std::int8_t>(static_cast<std::uint8_t>(rng())));
      case DType::boolean:
        return static_cast<long double>(rng() & 1u);
    }
    return 0;
  }
  // Small integers, so that conversions to any float are exact.
  long double small(DType t) {
    if (t == DType::boolean) return static_cast<long double>(rng() & 1u);
    if (t == DType::u8) return static_cast<long double>(rng() % 200);
    if (forge::is_floating(t))
      return to_dtype(std::ldexp(static_cast<double>(static_cast<std::int64_t>(rng() % 2001) - 1000), -3), t);
    return static_cast<long double>(static_cast<std::int64_t>(rng() % 201) - 100);
  }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n)); }
};

Tensor from_values(forge::ExecContext& ctx, const std::vector<long double>& xs, const Shape& shape, DType t) {
  return forge::dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> v;
    v.reserve(xs.size());
    for (long double x : xs) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        v.push_back(T(static_cast<float>(x)));
      else if constexpr (std::is_same_v<T, bool>)
        v.push_back(x != 0);
      else
        v.push_back(static_cast<T>(x));
    }
    return ctx.from_vector(v, shape);
  });
}

using Layout = forge_test::reference::View;
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::packed:
      return "packed";
    case Layout::transposed:
      return "transposed";
    case Layout::stepped:
      return "stepped";
    case Layout::expanded:
      return "expanded";
    case Layout::offset:
      return "offset";
  }
  return "?";
}

// A tensor of logical shape `shape` with random values, laid out as asked.
Tensor make_input(forge::ExecContext& ctx, Gen& gen, const Shape& shape, DType t, Layout layout, bool small = false) {
  auto fill = [&](const Shape& s) {
    std::vector<long double> xs(static_cast<std::size_t>(s.numel()));
    for (auto& x : xs) x = small ? gen.small(t) : gen.value(t);
    return from_values(ctx, xs, s, t);
  };
  return forge_test::reference::view_of(shape, layout, fill);
}

struct ShapePair {
  Shape a, b;
};

std::vector<ShapePair> broadcast_cases(Gen& gen) {
  std::vector<ShapePair> cases = {
      {{4, 1, 3}, {2, 3}}, {{}, {5}},
      {{5}, {}},           {{}, {}},
      {{3, 1}, {1, 4}},    {{2, 0, 3}, {3}},
      {{0}, {1}},          {{1}, {7}},
      {{6, 5}, {6, 5}},    {{2, 3, 4, 5}, {3, 1, 5}},
      {{1, 1, 1}, {1}},    {{7, 1, 1, 3}, {1, 5, 2, 1}},
      {{3, 0}, {1, 1}},    {{1, 1, 1, 1, 1, 2}, {2, 1}},
  };
  // Random ones: an output shape, each operand a suffix of it with some dims set to 1.
  for (int k = 0; k < 12; ++k) {
    const int r = static_cast<int>(gen.below(5));
    Shape s;
    for (int d = 0; d < r; ++d) s.push_back(gen.below(20) == 0 ? 0 : 1 + gen.below(4));
    auto operand = [&](int rank) {
      Shape o;
      for (int d = r - rank; d < r; ++d) o.push_back(gen.below(3) == 0 ? 1 : s[d]);
      return o;
    };
    cases.push_back({operand(r), operand(static_cast<int>(gen.below(r + 1)))});
    if (gen.below(2)) std::swap(cases.back().a, cases.back().b);
  }
  return cases;
}

}  // namespace

// ============================================================================
// add, mul, relu against the reference
// ============================================================================

TEST_CASE("ops: add and mul match naive loops on broadcast shapes and every layout, in every dtype") {
  TestContext ctx;
  Gen gen;
  const std::vector<ShapePair> cases = broadcast_cases(gen);
  const std::pair<Layout, Layout> layouts[] = {{Layout::packed, Layout::packed},
                                               {Layout::offset, Layout::offset},
                                               {Layout::transposed, Layout::stepped},
                                               {Layout::expanded, Layout::transposed}};
  for (DType t : kAllDTypes) {
    for (const ShapePair& c : cases) {
      for (const auto& [la, lb] : layouts) {
        INFO(forge::dtype_name(t) << " " << c.a << " (" << layout_name(la) << ") with " << c.b << " ("
                                  << layout_name(lb) << ")");
        const Tensor a = make_input(ctx, gen, c.a, t, la);
        const Tensor b = make_input(ctx, gen, c.b, t, lb);
        const Tensor s = forge::add(a, b);
        CHECK(s.dtype() == t);
        CHECK(s.is_contiguous());
        check_against_reference(Op::add, a, b, s);
        const Tensor p = forge::mul(a, b);
        CHECK(p.dtype() == t);
        check_against_reference(Op::mul, a, b, p);
      }
    }
  }
}

TEST_CASE("ops: relu matches a naive loop in every dtype but bool, on every layout") {
  TestContext ctx;
  Gen gen;
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::i8}) {
    for (const Shape& s : {Shape{}, Shape{7}, Shape{3, 5}, Shape{2, 0, 3}, Shape{4, 1, 6}, Shape{2, 3, 4, 5}}) {
      for (Layout l : {Layout::packed, Layout::offset, Layout::transposed, Layout::stepped, Layout::expanded}) {
        INFO(forge::dtype_name(t) << " " << s << " " << layout_name(l));
        const Tensor x = make_input(ctx, gen, s, t, l);
        const Tensor y = forge::relu(x);
        CHECK(y.dtype() == t);
        check_against_reference(Op::relu, x, Tensor(), y);
        check_against_reference(Op::relu, x, Tensor(), x.relu());
      }
    }
  }
}

TEST_CASE("ops: relu keeps NaN and infinities, zeroes negatives") {
  TestContext ctx;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(forge::dtype_name(t));
    const Tensor x = ctx.from_vector<double>({nan, -inf, inf, -1.5, 0, 2.5, -nan}).to(t);
    const std::vector<double> y = forge::relu(x).to_vector<double>();
    REQUIRE(y.size() == 7);
    CHECK(std::isnan(y[0]));
    CHECK(y[1] == 0);
    CHECK(y[2] == inf);
    CHECK(y[3] == 0);
    CHECK(y[4] == 0);
    CHECK(y[5] == 2.5);
    CHECK(std::isnan(y[6]));
  }
}

TEST_CASE("ops: relu of a bool tensor is a dtype error") {
  TestContext ctx;
  const Tensor b = ctx.from_vector<bool>({true, false});
  const auto before = ctx.stats().outstanding;
  FORGE_REQUIRE_ERROR(dtype, "relu", forge::relu(b));
  FORGE_REQUIRE_ERROR(dtype, "relu", b.relu());
  Tensor out = ctx.zeros({2}, DType::boolean);
  const auto before_into = ctx.stats().outstanding;
  FORGE_REQUIRE_ERROR(dtype, "relu_into", forge::relu_into(out, b));
  CHECK(ctx.stats().outstanding == before_into);
  CHECK(before_into == before + 1);
}

TEST_CASE("ops: bool add is logical or, bool mul is logical and") {
  TestContext ctx;
  const Tensor a = ctx.from_vector<bool>({false, false, true, true});
  const Tensor b = ctx.from_vector<bool>({false, true, false, true});
  CHECK(forge::add(a, b).dtype() == DType::boolean);
  CHECK(forge::add(a, b).to_vector<bool>() == std::vector<bool>{false, true, true, true});
  CHECK(forge::mul(a, b).to_vector<bool>() == std::vector<bool>{false, false, false, true});
  // Stored as 0/1 bytes, never 2.
  CHECK(forge::add(a, b).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1, 1, 1});
  CHECK(forge::add(a.t(), ctx.full({}, 1, DType::boolean)).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{1, 1, 1, 1});
}

TEST_CASE("ops: integer add and mul wrap around on overflow") {
  TestContext ctx;
  const std::int32_t i32max = std::numeric_limits<std::int32_t>::max(),
                     i32min = std::numeric_limits<std::int32_t>::min();
  const std::int64_t i64max = std::numeric_limits<std::int64_t>::max(),
                     i64min = std::numeric_limits<std::int64_t>::min();
  CHECK(forge::add(ctx.from_vector<std::int32_t>({i32max, i32min}), ctx.from_vector<std::int32_t>({1, -1}))
            .to_vector<std::int32_t>() == std::vector<std::int32_t>{i32min, i32max});
  CHECK(
      forge::mul(ctx.from_vector<std::int32_t>({65536, i32min, 3}), ctx.from_vector<std::int32_t>({65536, -1, i32max}))
          .to_vector<std::int32_t>() == std::vector<std::int32_t>{0, i32min, 2147483645});
  CHECK(forge::add(ctx.from_vector<std::int64_t>({i64max}), ctx.from_vector<std::int64_t>({1}))
            .to_vector<std::int64_t>() == std::vector<std::int64_t>{i64min});
  CHECK(
      forge::mul(ctx.from_vector<std::int64_t>({std::int64_t{1} << 62, i64min}), ctx.from_vector<std::int64_t>({4, -1}))
          .to_vector<std::int64_t>() == std::vector<std::int64_t>{0, i64min});
  CHECK(forge::add(ctx.from_vector<std::uint8_t>({200, 255}), ctx.from_vector<std::uint8_t>({100, 1}))
            .to_vector<std::uint8_t>() == std::vector<std::uint8_t>{44, 0});
  CHECK(forge::mul(ctx.from_vector<std::uint8_t>({16, 255}), ctx.from_vector<std::uint8_t>({16, 255}))
            .to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1});
}

TEST_CASE("ops: float add and mul follow IEEE (overflow to inf, inf - inf and 0 * inf are NaN)") {
  TestContext ctx;
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(forge::dtype_name(t));
    const Tensor a = ctx.from_vector<double>({inf, 0, 1, -2}).to(t);
    const Tensor b = ctx.from_vector<double>({-inf, inf, 1, 3}).to(t);
    check_against_reference(Op::add, a, b, forge::add(a, b));
    check_against_reference(Op::mul, a, b, forge::mul(a, b));
    CHECK(std::isnan(forge::add(a, b).to_vector<double>()[0]));
    CHECK(std::isnan(forge::mul(a, b).to_vector<double>()[1]));
  }
  const Tensor h = ctx.full({1}, 65504, DType::f16);
  CHECK(std::isinf(forge::add(h, h).to_vector<float>()[0]));
  // f16 sums round to nearest even: 2048 + 1 is a tie between 2048 and 2050.
  const Tensor x = ctx.full({1}, 2048, DType::f16), one = ctx.full({1}, 1, DType::f16);
  CHECK(forge::add(x, one).to_vector<float>()[0] == 2048.0f);
  CHECK(forge::add(ctx.full({1}, 2050, DType::f16), one).to_vector<float>()[0] == 2052.0f);
}

TEST_CASE("ops: mixed dtypes promote as libtorch (i64 + f32 -> f32, bool + i32 -> i32, f16 + bf16 -> f32, ...)") {
  TestContext ctx;
  Gen gen;
  const std::pair<DType, DType> pins[] = {
      {DType::i64, DType::f32}, {DType::boolean, DType::i32}, {DType::f16, DType::bf16}};
  const DType pinned[] = {DType::f32, DType::i32, DType::f32};
  for (int k = 0; k < 3; ++k) {
    const Tensor a = make_input(ctx, gen, {3}, pins[k].first, Layout::packed, true);
    const Tensor b = make_input(ctx, gen, {3}, pins[k].second, Layout::packed, true);
    CHECK(forge::add(a, b).dtype() == pinned[k]);
    CHECK(forge::mul(b, a).dtype() == pinned[k]);
  }
  // Every pair, against the reference, with broadcasting and a non-contiguous operand.
  for (DType ta : kAllDTypes) {
    for (DType tb : kAllDTypes) {
      INFO(forge::dtype_name(ta) << " with " << forge::dtype_name(tb));
      const Tensor a = make_input(ctx, gen, {4, 1, 3}, ta, Layout::stepped, true);
      const Tensor b = make_input(ctx, gen, {2, 3}, tb, Layout::transposed, true);
      const Tensor s = forge::add(a, b);
      CHECK(s.dtype() == reference_promote(ta, tb));
      check_against_reference(Op::add, a, b, s);
      const Tensor p = forge::mul(a, b);
      CHECK(p.dtype() == reference_promote(ta, tb));
      check_against_reference(Op::mul, a, b, p);
    }
  }
}

TEST_CASE("ops: results are fresh packed tensors and leave the inputs untouched") {
  TestContext ctx;
  const Tensor a = ctx.from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = ctx.from_vector<float>({10, 20, 30});
  const std::uint32_t va = a.version();
  const auto before = ctx.stats().outstanding;
  const Tensor s = forge::add(a.t(), b.view({3, 1}));
  CHECK(ctx.stats().outstanding == before + 1);
  CHECK(s.buffer().get() != a.buffer().get());
  CHECK(s.shape() == Shape{3, 2});
  CHECK(s.is_contiguous());
  CHECK(s.to_vector<float>() == std::vector<float>{11, 14, 22, 25, 33, 36});
  CHECK(a.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(a.version() == va);
  CHECK(&s.runtime() == &ctx.runtime());
}

TEST_CASE("ops: large tensors (parallel path) match naive loops") {
  TestContext ctx;
  REQUIRE(ctx.threads() == 2);
  Gen gen;
  const std::int64_t n = std::int64_t{1} << 20;
  {  // same shape, packed: the fast path above the grain
    const Tensor a = make_input(ctx, gen, {n}, DType::f32, Layout::packed);
    const Tensor b = make_input(ctx, gen, {n}, DType::f32, Layout::packed);
    check_against_reference(Op::add, a, b, forge::add(a, b));
    check_against_reference(Op::mul, a, b, forge::mul(a, b));
    check_against_reference(Op::relu, a, Tensor(), forge::relu(a));
  }
  {  // transposed with a broadcast row
    const Tensor a = make_input(ctx, gen, {1024, 1024}, DType::f32, Layout::transposed);
    const Tensor b = make_input(ctx, gen, {1024}, DType::f32, Layout::packed);
    check_against_reference(Op::add, a, b, forge::add(a, b));
    check_against_reference(Op::mul, b, a, forge::mul(b, a));
  }
  {  // integers, stepped, with promotion
    const Tensor a = make_input(ctx, gen, {512, 2048}, DType::i64, Layout::stepped);
    const Tensor b = make_input(ctx, gen, {512, 1}, DType::i32, Layout::packed);
    check_against_reference(Op::add, a, b, forge::add(a, b));
    check_against_reference(Op::mul, a, b, forge::mul(a, b));
  }
  {  // 16-bit floats and relu on a strided view
    const Tensor a = make_input(ctx, gen, {256, 4096}, DType::bf16, Layout::stepped);
    const Tensor b = make_input(ctx, gen, {256, 4096}, DType::bf16, Layout::packed);
    check_against_reference(Op::add, a, b, forge::add(a, b));
    check_against_reference(Op::relu, a, Tensor(), forge::relu(a));
    const Tensor h = make_input(ctx, gen, {n}, DType::f16, Layout::packed);
    check_against_reference(Op::mul, h, h, forge::mul(h, h));
  }
  {  // _into, in place, large
    Tensor a = make_input(ctx, gen, {n}, DType::f64, Layout::packed);
    const Tensor a0 = a.clone();
    const Tensor b = make_input(ctx, gen, {1024, 1024}, DType::f64, Layout::transposed).reshape({n});
    forge::add_into(a, a, b);
    check_against_reference(Op::add, a0, b, a);
  }
}

// ============================================================================
// the _into forms
// ============================================================================

TEST_CASE("ops: add_into, mul_into and relu_into write the result into out") {
  TestContext ctx;
  Gen gen;
  const Tensor a = make_input(ctx, gen, {3}, DType::f32, Layout::packed);
  const Tensor b = make_input(ctx, gen, {2, 1}, DType::f32, Layout::packed);
  Tensor out = ctx.empty({2, 3});
  const auto before = ctx.stats().outstanding;
  Tensor& r = forge::add_into(out, a, b);
  CHECK(&r == &out);
  CHECK(ctx.stats().outstanding == before);  // nothing allocated for a same-dtype result
  check_against_reference(Op::add, a, b, out);
  forge::mul_into(out, a, b);
  check_against_reference(Op::mul, a, b, out);
  forge::relu_into(out, forge::add(a, b));
  check_against_reference(Op::relu, forge::add(a, b), Tensor(), out);
  // Same shapes and dtypes, all packed but at offsets into bigger buffers (the contiguous fast path).
  for (DType t : kAllDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor x = make_input(ctx, gen, {4, 5}, t, Layout::offset);
    const Tensor y = make_input(ctx, gen, {4, 5}, t, Layout::offset);
    Tensor big = ctx.zeros({6, 5}, t);
    Tensor window = big.narrow(0, 1, 4);
    forge::add_into(window, x, y);
    check_against_reference(Op::add, x, y, window);
    forge::mul_into(window, x, y);
    check_against_reference(Op::mul, x, y, window);
    // The rows around the window stay zero.
    const std::vector<double> all = big.to_vector<double>();
    for (int k : {0, 1, 2, 3, 4, 25, 26, 27, 28, 29}) CHECK(all[static_cast<std::size_t>(k)] == 0);
  }
  // Into a transposed destination.
  Tensor base = ctx.zeros({3, 2});
  Tensor tout = base.t();
  forge::add_into(tout, a, b);
  check_against_reference(Op::add, a, b, tout);
  CHECK(base.buffer().get() == tout.buffer().get());
  // Into a wider dtype: the result is computed in the promoted dtype, then converted.
  const Tensor fa = ctx.from_vector<float>({0.1f, 1e8f, 3});
  const Tensor fb = ctx.from_vector<float>({0.2f, 1, 4});
  Tensor wide = ctx.zeros({3}, DType::f64);
  forge::add_into(wide, fa, fb);
  CHECK(wide.to_vector<double>() ==
        std::vector<double>{static_cast<double>(0.1f + 0.2f), static_cast<double>(1e8f + 1.0f), 7.0});
  // An integer result into a float out.
  Tensor fl = ctx.zeros({2}, DType::f32);
  forge::mul_into(fl, ctx.from_vector<std::int32_t>({3, -4}), ctx.from_vector<std::int32_t>({5, 6}));
  CHECK(fl.to_vector<float>() == std::vector<float>{15, -24});
}

TEST_CASE("ops: _into refuses an out of the wrong shape or a dtype that cannot hold the result") {
  TestContext ctx;
  const Tensor a = ctx.ones({2, 3}), b = ctx.ones({3});
  Tensor wrong_shape = ctx.zeros({3, 2});
  Tensor longs = ctx.zeros({2, 3}, DType::i64);
  Tensor bools = ctx.zeros({2, 3}, DType::boolean);
  Tensor small = ctx.zeros({1, 3});
  const auto before = ctx.stats().outstanding;
  std::string msg = FORGE_REQUIRE_ERROR(shape, "add_into", forge::add_into(wrong_shape, a, b));
  CHECK_THAT(msg, Catch::Contains("[3, 2]") && Catch::Contains("[2, 3]"));
  FORGE_REQUIRE_ERROR(shape, "mul_into", forge::mul_into(wrong_shape, a, b));
  FORGE_REQUIRE_ERROR(shape, "relu_into", forge::relu_into(wrong_shape, a));
  // out must not broadcast either: a [1, 3] out for a [2, 3] result.
  FORGE_REQUIRE_ERROR(shape, "add_into", forge::add_into(small, a, b));
  msg = FORGE_REQUIRE_ERROR(dtype, "add_into", forge::add_into(longs, a, b));  // float result into i64
  CHECK_THAT(msg, Catch::Contains("f32") && Catch::Contains("i64"));
  FORGE_REQUIRE_ERROR(dtype, "mul_into", forge::mul_into(longs, a, b));
  FORGE_REQUIRE_ERROR(dtype, "add_into",
                      forge::add_into(bools, ctx.ones({2, 3}, DType::i32), ctx.ones({3}, DType::i32)));
  FORGE_REQUIRE_ERROR(dtype, "relu_into", forge::relu_into(longs, a));
  CHECK(ctx.stats().outstanding == before);  // the i32 inputs made inside the call are released again
}

TEST_CASE("ops: a failed _into leaves out and the pool as they were") {
  TestContext ctx;
  const Tensor a = ctx.ones({2, 3}), b = ctx.ones({3});
  const Tensor ia = ctx.ones({2, 3}, DType::i32), ib = ctx.ones({3}, DType::i32);
  Tensor longs = ctx.full({2, 3}, 7, DType::i64);
  Tensor bools = ctx.zeros({2, 3}, DType::boolean);
  Tensor wrong = ctx.full({3, 2}, 7);
  const std::uint32_t v_longs = longs.version(), v_wrong = wrong.version();
  const auto before = ctx.stats().outstanding;
  FORGE_REQUIRE_ERROR(dtype, "add_into", forge::add_into(longs, a, b));
  FORGE_REQUIRE_ERROR(dtype, "add_into", forge::add_into(bools, ia, ib));
  FORGE_REQUIRE_ERROR(shape, "mul_into", forge::mul_into(wrong, a, b));
  CHECK(ctx.stats().outstanding == before);
  CHECK(longs.to_vector<std::int64_t>() == std::vector<std::int64_t>(6, 7));
  CHECK(wrong.to_vector<float>() == std::vector<float>(6, 7));
  CHECK(longs.version() == v_longs);
  CHECK(wrong.version() == v_wrong);
}

TEST_CASE("ops: out may alias an input exactly (in place)") {
  TestContext ctx;
  Gen gen;
  for (DType t : {DType::f32, DType::i32, DType::bf16}) {
    INFO(forge::dtype_name(t));
    Tensor a = make_input(ctx, gen, {4, 5}, t, Layout::packed);
    const Tensor b = make_input(ctx, gen, {5}, t, Layout::packed);
    const Tensor a0 = a.clone();
    forge::add_into(a, a, b);
    check_against_reference(Op::add, a0, b, a);
    Tensor c = make_input(ctx, gen, {5}, t, Layout::packed);
    const Tensor c0 = c.clone();
    forge::mul_into(c, b, c);  // out is the second input
    check_against_reference(Op::mul, b, c0, c);
    Tensor d = make_input(ctx, gen, {3, 3}, t, Layout::packed);
    const Tensor d0 = d.clone();
    forge::add_into(d, d, d);
    check_against_reference(Op::add, d0, d0, d);
  }
  // In place on a non-contiguous view (a column of a matrix).
  Tensor m = ctx.from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor col = m.select(1, 1);
  forge::mul_into(col, col, ctx.full({}, 10.0));
  CHECK(m.to_vector<float>() == std::vector<float>{1, 20, 3, 40, 5, 60});
  Tensor x = ctx.from_vector<float>({-1, 2, -3});
  forge::relu_into(x, x);
  CHECK(x.to_vector<float>() == std::vector<float>{0, 2, 0});
}

TEST_CASE("ops: out partially overlapping an input is invalid_argument but disjoint views of one buffer are fine") {
  TestContext ctx;
  Tensor buf = ctx.arange(8);
  Tensor out = buf.narrow(0, 0, 4);
  const Tensor shifted = buf.narrow(0, 1, 4);
  const Tensor ones = ctx.ones({4});
  const auto before = ctx.stats().outstanding;
  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "add_into", forge::add_into(out, shifted, ones));
  CHECK_THAT(msg, Catch::Contains("overlap"));
  FORGE_REQUIRE_ERROR(invalid_argument, "mul_into", forge::mul_into(out, ones, shifted));
  FORGE_REQUIRE_ERROR(invalid_argument, "relu_into", forge::relu_into(out, shifted));
  // The same memory in another layout is a partial overlap too.
  Tensor sq = ctx.from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor sqt = sq.t();
  FORGE_REQUIRE_ERROR(invalid_argument, "add_into", forge::add_into(sqt, sq, ctx.zeros({2, 2})));
  CHECK(ctx.stats().outstanding == before + 1);  // sq; nothing of the failed calls
  CHECK(buf.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(sq.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  // Disjoint halves of one buffer.
  const Tensor upper = buf.narrow(0, 4, 4);
  forge::add_into(out, upper, ones);
  CHECK(buf.to_vector<float>() == std::vector<float>{5, 6, 7, 8, 4, 5, 6, 7});
}

TEST_CASE("ops: an expanded out is invalid_argument") {
  TestContext ctx;
  Tensor e = ctx.zeros({3, 1}).expand({3, 4});
  const Tensor a = ctx.ones({3, 4});
  const auto before = ctx.stats().outstanding;
  FORGE_REQUIRE_ERROR(invalid_argument, "add_into", forge::add_into(e, a, a));
  FORGE_REQUIRE_ERROR(invalid_argument, "mul_into", forge::mul_into(e, a, a));
  FORGE_REQUIRE_ERROR(invalid_argument, "relu_into", forge::relu_into(e, a));
  CHECK(ctx.stats().outstanding == before);
}

// ============================================================================
// operators and methods
// ============================================================================

TEST_CASE("ops: operators + and * and the Tensor methods are add and mul") {
  TestContext ctx;
  Gen gen;
  const Tensor a = make_input(ctx, gen, {2, 3}, DType::f32, Layout::packed);
  const Tensor b = make_input(ctx, gen, {3}, DType::f32, Layout::stepped);
  const Tensor c = make_input(ctx, gen, {2, 1}, DType::f32, Layout::packed);
  check_against_reference(Op::add, a, b, a + b);
  check_against_reference(Op::mul, a, b, a * b);
  check_against_reference(Op::add, a, b, a.add(b));
  check_against_reference(Op::mul, a, b, a.mul(b));
  // Precedence: a + b * c is a + (b * c).
  const Tensor bc = b * c;
  check_against_reference(Op::add, a, bc, a + b * c);
  const Tensor i = ctx.from_vector<std::int64_t>({1, 2, 3});
  CHECK((i + i * i).to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 6, 12});
  FORGE_REQUIRE_ERROR(shape, "add", (void)(a + ctx.ones({4})));
  FORGE_REQUIRE_ERROR(shape, "mul", (void)(a * ctx.ones({2})));
}
