// Element types (sizes, names, libtorch's promotion table), the two 16-bit
// float storage types (round to nearest even, checked against a naive
// nearest-value search), casts between every pair of dtypes through
// Tensor::to, and the geometry helpers of shape.h (Dims, contiguous_strides,
// broadcast_shapes, wrap_dim).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "format16.h"
#include "support.h"

namespace {

using forge::BFloat16;
using forge::Dims;
using forge::DType;
using forge::ErrorCode;
using forge::Half;
using forge::Shape;
using forge::Strides;
using forge_test::bf16_format;
using forge_test::f16_format;
using forge_test::Format16;
using forge_test::kAllDTypes;
using forge_test::kFloatDTypes;
using forge_test::TestContext;

float f(double x) { return static_cast<float>(x); }

// Converts every midpoint between two neighbouring patterns of `ref` (all are
// f32 values) and the floats just above and below it with T::from_float, and
// counts the results that differ from the nearest-even pattern; optionally
// also checks that the reference itself sends each midpoint to the even one.
template <typename T>
int midpoint_mismatches(const Format16& ref, bool check_reference_ties) {
  int mismatches = 0;
  for (std::uint32_t k = 0; k < ref.inf_bits; ++k) {
    const double mid = (ref.values[k] + ref.values[k + 1]) / 2;
    const float m = f(mid);
    if (static_cast<double>(m) != mid) {
      ++mismatches;
      continue;
    }
    const float up = std::nextafter(m, std::numeric_limits<float>::infinity());
    const float down = std::nextafter(m, 0.0f);
    for (float x : {m, up, down, -m, -up, -down}) {
      const std::uint16_t want = ref.round(static_cast<double>(x));
      const std::uint16_t got = T::from_float(x);
      if (got != want) {
        if (mismatches < 5)
          FAIL_CHECK("from_float(" << x << ") gave 0x" << std::hex << got << ", nearest-even is 0x" << want);
        ++mismatches;
      }
    }
    if (check_reference_ties && ref.round(mid) != ((k & 1u) ? k + 1 : k)) ++mismatches;
  }
  return mismatches;
}

}  // namespace

// ============================================================================
// sizes, names, promotion
// ============================================================================

TEST_CASE("dtype: dtype_size gives the bytes of each element type") {
  CHECK(forge::dtype_size(DType::f32) == 4);
  CHECK(forge::dtype_size(DType::f64) == 8);
  CHECK(forge::dtype_size(DType::f16) == 2);
  CHECK(forge::dtype_size(DType::bf16) == 2);
  CHECK(forge::dtype_size(DType::i32) == 4);
  CHECK(forge::dtype_size(DType::i64) == 8);
  CHECK(forge::dtype_size(DType::u8) == 1);
  CHECK(forge::dtype_size(DType::boolean) == 1);
  CHECK(forge::dtype_size(DType::i8) == 1);
  // The C++ storage types have those sizes too, so from_vector/to_vector can memcpy.
  CHECK(sizeof(Half) == 2);
  CHECK(sizeof(BFloat16) == 2);
}

TEST_CASE("dtype: dtype_name uses the contract's short names") {
  CHECK(forge::dtype_name(DType::f32) == "f32");
  CHECK(forge::dtype_name(DType::f64) == "f64");
  CHECK(forge::dtype_name(DType::f16) == "f16");
  CHECK(forge::dtype_name(DType::bf16) == "bf16");
  CHECK(forge::dtype_name(DType::i32) == "i32");
  CHECK(forge::dtype_name(DType::i64) == "i64");
  CHECK(forge::dtype_name(DType::u8) == "u8");
  CHECK(forge::dtype_name(DType::boolean) == "bool");
  CHECK(forge::dtype_name(DType::i8) == "i8");
}

TEST_CASE("dtype: is_floating and is_integral split the dtypes as libtorch does (bool is neither)") {
  for (DType t : kAllDTypes) {
    INFO(forge::dtype_name(t));
    const bool fl = t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
    const bool in = t == DType::i32 || t == DType::i64 || t == DType::u8 || t == DType::i8;
    CHECK(forge::is_floating(t) == fl);
    CHECK(forge::is_integral(t) == in);
  }
  CHECK(forge::dtype_v<float> == DType::f32);
  CHECK(forge::dtype_v<double> == DType::f64);
  CHECK(forge::dtype_v<Half> == DType::f16);
  CHECK(forge::dtype_v<BFloat16> == DType::bf16);
  CHECK(forge::dtype_v<std::int32_t> == DType::i32);
  CHECK(forge::dtype_v<std::int64_t> == DType::i64);
  CHECK(forge::dtype_v<std::uint8_t> == DType::u8);
  CHECK(forge::dtype_v<bool> == DType::boolean);
  CHECK(forge::dtype_v<std::int8_t> == DType::i8);
  CHECK(forge::kNumDTypes == static_cast<int>(std::size(kAllDTypes)));
}

TEST_CASE("dtype: promote_types follows libtorch's table over forge's dtypes") {
  // Rows and columns in kAllDTypes order: f32 f64 f16 bf16 i32 i64 u8 bool i8.
  // bool < u8, i8 < i32 < i64 < floats; a float beats any integer; f16 with
  // bf16 gives f32; f64 beats every other float; u8 with i8 gives i32
  // (libtorch's i16, which forge lacks).
  using D = DType;
  const DType table[9][9] = {
      /* f32  */ {D::f32, D::f64, D::f32, D::f32, D::f32, D::f32, D::f32, D::f32, D::f32},
      /* f64  */ {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
      /* f16  */ {D::f32, D::f64, D::f16, D::f32, D::f16, D::f16, D::f16, D::f16, D::f16},
      /* bf16 */ {D::f32, D::f64, D::f32, D::bf16, D::bf16, D::bf16, D::bf16, D::bf16, D::bf16},
      /* i32  */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::i32, D::i32, D::i32},
      /* i64  */ {D::f32, D::f64, D::f16, D::bf16, D::i64, D::i64, D::i64, D::i64, D::i64},
      /* u8   */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::u8, D::u8, D::i32},
      /* bool */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::u8, D::boolean, D::i8},
      /* i8   */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::i32, D::i8, D::i8},
  };
  REQUIRE(std::size(kAllDTypes) == 9);
  for (int i = 0; i < 9; ++i) {
    for (int j = 0; j < 9; ++j) {
      INFO(forge::dtype_name(kAllDTypes[i]) << " with " << forge::dtype_name(kAllDTypes[j]));
      CHECK(forge::promote_types(kAllDTypes[i], kAllDTypes[j]) == table[i][j]);
    }
  }
}

// ============================================================================
// Half (IEEE binary16)
// ============================================================================

TEST_CASE("dtype: Half pins of round to nearest even (ties, max, overflow, subnormals, NaN)") {
  auto bits = [](double x) { return Half::from_float(f(x)); };
  CHECK(bits(1.0) == 0x3c00u);
  CHECK(bits(-2.0) == 0xc000u);
  CHECK(bits(0.5) == 0x3800u);
  CHECK(bits(0.0) == 0x0000u);
  CHECK(bits(-0.0) == 0x8000u);
  // 1 + 2^-11 is half an ulp above 1: a tie, to the even pattern 1.0.
  CHECK(bits(1.0 + std::ldexp(1.0, -11)) == 0x3c00u);
  // Just above the tie rounds up.
  CHECK(bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20)) == 0x3c01u);
  // 1 + 3*2^-11 lies between 1 + 2^-10 (odd) and 1 + 2^-9 (even): up to 1 + 2^-9.
  CHECK(bits(1.0 + 3 * std::ldexp(1.0, -11)) == 0x3c02u);
  CHECK(static_cast<float>(Half(f(1.0 + 3 * std::ldexp(1.0, -11)))) == f(1.0 + std::ldexp(1.0, -9)));
  // Largest finite value, and the overflow threshold halfway to 65536.
  CHECK(bits(65504.0) == 0x7bffu);
  CHECK(bits(65519.0) == 0x7bffu);
  CHECK(bits(65520.0) == 0x7c00u);
  CHECK(bits(-65520.0) == 0xfc00u);
  CHECK(bits(1e6) == 0x7c00u);
  CHECK(bits(std::numeric_limits<double>::infinity()) == 0x7c00u);
  CHECK(bits(-std::numeric_limits<double>::infinity()) == 0xfc00u);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties to 0; 1.5 * 2^-24 ties up to 2 * 2^-24.
  CHECK(bits(std::ldexp(1.0, -24)) == 0x0001u);
  CHECK(bits(std::ldexp(1.0, -25)) == 0x0000u);
  CHECK(bits(std::ldexp(1.0, -25) * 1.0001) == 0x0001u);
  CHECK(bits(1.5 * std::ldexp(1.0, -24)) == 0x0002u);
  CHECK(bits(2.5 * std::ldexp(1.0, -24)) == 0x0002u);
  CHECK(bits(std::ldexp(1023.0, -24)) == 0x03ffu);
  CHECK(bits(std::ldexp(1.0, -14)) == 0x0400u);  // smallest normal
  CHECK(bits(-std::ldexp(1.0, -24)) == 0x8001u);
  CHECK(bits(1e-40) == 0x0000u);  // an f32 subnormal underflows to zero
  // to_float is exact.
  CHECK(Half::to_float(0x0001u) == std::ldexp(1.0f, -24));
  CHECK(Half::to_float(0x03ffu) == std::ldexp(1023.0f, -24));
  CHECK(Half::to_float(0x7bffu) == 65504.0f);
  CHECK(Half::to_float(0x3c01u) == 1.0f + std::ldexp(1.0f, -10));
  CHECK(std::isinf(Half::to_float(0x7c00u)));
  CHECK(Half::to_float(0xfc00u) < 0);
  CHECK(std::signbit(Half::to_float(0x8000u)));
  // NaN stays NaN, both ways.
  const std::uint16_t nan_bits = Half::from_float(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan_bits & 0x7c00u) == 0x7c00u);
  CHECK((nan_bits & 0x03ffu) != 0);
  CHECK(std::isnan(Half::to_float(0x7e00u)));
  CHECK(std::isnan(Half::to_float(0x7c01u)));
  CHECK(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("dtype: every Half bit pattern round-trips through float exactly") {
  const Format16& ref = f16_format();
  int mismatches = 0;
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float v = Half::to_float(h);
    if (ref.is_nan(h)) {
      if (!std::isnan(v) || !ref.is_nan(Half::from_float(v))) ++mismatches;
      continue;
    }
    // The decoded value is the textbook value, and encoding it gives the pattern back.
    if (static_cast<double>(v) != ref.value(h) || std::signbit(v) != ((h & 0x8000u) != 0)) ++mismatches;
    if (Half::from_float(v) != h) {
      if (mismatches < 5) FAIL_CHECK("pattern 0x" << std::hex << b << " came back as 0x" << Half::from_float(v));
      ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("dtype: Half rounds every midpoint to even and its neighbours to the nearer value") {
  const Format16& ref = f16_format();
  int mismatches = 0;
  mismatches += midpoint_mismatches<Half>(ref, /*check_reference_ties=*/true);
  CHECK(mismatches == 0);
}

TEST_CASE("dtype: Half agrees with a naive nearest-even search on random floats across the range") {
  const Format16& ref = f16_format();
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int mismatches = 0;
  for (int i = 0; i < 200000; ++i) {
    // Exponents from 2^-30 to 2^17 cover zero-underflow, subnormals, normals and overflow.
    const std::uint64_t r = next();
    const int e = static_cast<int>(r % 48) - 30;
    const double mant = 1.0 + static_cast<double>((r >> 8) & 0x7fffffu) * std::ldexp(1.0, -23);
    const float x = f(std::ldexp(mant, e) * ((r >> 40) & 1 ? -1.0 : 1.0));
    const std::uint16_t want = ref.round(static_cast<double>(x));
    const std::uint16_t got = Half::from_float(x);
    if (got != want) {
      if (mismatches < 5) FAIL_CHECK("from_float(" << x << ") gave 0x" << std::hex << got << ", want 0x" << want);
      ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}

// ============================================================================
// BFloat16
// ============================================================================

TEST_CASE("dtype: BFloat16 pins of round to nearest even (ties, overflow, NaN)") {
  auto bits = [](double x) { return BFloat16::from_float(f(x)); };
  CHECK(bits(1.0) == 0x3f80u);
  CHECK(bits(-1.0) == 0xbf80u);
  CHECK(bits(-0.0) == 0x8000u);
  // ulp at 1 is 2^-7: 1 + 2^-8 is a tie, to the even pattern 1.0.
  CHECK(bits(1.0 + std::ldexp(1.0, -8)) == 0x3f80u);
  CHECK(bits(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20)) == 0x3f81u);
  // 1 + 3*2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up to 1 + 2^-6.
  CHECK(bits(1.0 + 3 * std::ldexp(1.0, -8)) == 0x3f82u);
  CHECK(static_cast<float>(BFloat16(f(1.0 + 3 * std::ldexp(1.0, -8)))) == f(1.0 + std::ldexp(1.0, -6)));
  // 257 is a tie between 256 and 258: to 256 (even).
  CHECK(static_cast<float>(BFloat16(257.0f)) == 256.0f);
  CHECK(static_cast<float>(BFloat16(259.0f)) == 260.0f);
  // The largest float is above the midpoint between the largest bf16 and 2^128: infinity.
  CHECK(BFloat16::from_float(std::numeric_limits<float>::max()) == 0x7f80u);
  CHECK(BFloat16::from_float(std::bit_cast<float>(0x7f7f7fffu)) == 0x7f7fu);
  CHECK(BFloat16::from_float(std::numeric_limits<float>::infinity()) == 0x7f80u);
  CHECK(BFloat16::from_float(-std::numeric_limits<float>::infinity()) == 0xff80u);
  // Smallest subnormal float goes to zero (a tie would need 2^-134).
  CHECK(BFloat16::from_float(std::numeric_limits<float>::denorm_min()) == 0x0000u);
  CHECK(BFloat16::to_float(0x0001u) == std::ldexp(1.0f, -133));
  // NaN stays NaN, also a NaN whose payload sits only in the dropped low bits.
  CHECK(std::isnan(BFloat16::to_float(BFloat16::from_float(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(BFloat16::to_float(BFloat16::from_float(std::bit_cast<float>(0x7f800001u)))));
  CHECK(std::isnan(BFloat16::to_float(BFloat16::from_float(std::bit_cast<float>(0xff800001u)))));
}

TEST_CASE("dtype: every BFloat16 bit pattern round-trips, midpoints go to even") {
  const Format16& ref = bf16_format();
  int mismatches = 0;
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float v = BFloat16::to_float(h);
    if (ref.is_nan(h)) {
      if (!std::isnan(v) || !ref.is_nan(BFloat16::from_float(v))) ++mismatches;
      continue;
    }
    if (static_cast<double>(v) != ref.value(h)) ++mismatches;
    if (BFloat16::from_float(v) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
  mismatches = 0;
  mismatches += midpoint_mismatches<BFloat16>(ref, /*check_reference_ties=*/false);
  CHECK(mismatches == 0);
}

// ============================================================================
// casts through Tensor::to
// ============================================================================

namespace {

// Whether x is a value of dtype t (NaN counts for the float dtypes).
bool representable(long double x, DType t) {
  switch (t) {
    case DType::f64:
      return std::isnan(x) || static_cast<long double>(static_cast<double>(x)) == x;
    case DType::f32:
      return std::isnan(x) || static_cast<long double>(static_cast<float>(x)) == x;
    case DType::f16:
      return std::isnan(x) ||
             (static_cast<long double>(static_cast<double>(x)) == x &&
              f16_format().value(f16_format().round(static_cast<double>(x))) == static_cast<double>(x));
    case DType::bf16:
      return std::isnan(x) ||
             (static_cast<long double>(static_cast<double>(x)) == x &&
              bf16_format().value(bf16_format().round(static_cast<double>(x))) == static_cast<double>(x));
    case DType::i64:
      return x == std::trunc(x) && x >= -0x1p63L && x < 0x1p63L;
    case DType::i32:
      return x == std::trunc(x) && x >= -0x1p31L && x < 0x1p31L;
    case DType::u8:
      return x == std::trunc(x) && x >= 0 && x < 256;
    case DType::i8:
      return x == std::trunc(x) && x >= -128 && x < 128;
    case DType::boolean:
      return x == 0 || x == 1;
  }
  return false;
}

// The contract's conversion of a value of dtype `from` into dtype `to`:
// floats round to nearest even; float -> int truncates toward zero, saturates
// out of range, NaN -> 0; int -> narrower int wraps (two's complement);
// anything -> bool is != 0; bool -> number is 0/1.
long double reference_cast(long double x, DType from, DType to) {
  switch (to) {
    case DType::boolean:
      return (std::isnan(x) || x != 0) ? 1 : 0;
    case DType::f64:
      return static_cast<double>(x);
    case DType::f32:
      return static_cast<float>(x);
    case DType::f16:
      return f16_format().value(f16_format().round(static_cast<double>(x)));
    case DType::bf16:
      return bf16_format().value(bf16_format().round(static_cast<double>(x)));
    default:
      break;
  }
  const int bits = to == DType::i64 ? 64 : to == DType::i32 ? 32 : 8;
  const bool is_signed = to != DType::u8;
  const long double lo = is_signed ? -std::ldexp(1.0L, bits - 1) : 0.0L;
  const long double hi = is_signed ? std::ldexp(1.0L, bits - 1) : std::ldexp(1.0L, bits);  // exclusive
  if (forge::is_floating(from)) {
    if (std::isnan(x)) return 0;
    const long double t = std::trunc(x);
    if (t < lo) return lo;
    if (t >= hi) return hi - 1;
    return t;
  }
  // Integer (or bool) source: keep the low `bits` bits.
  const auto u = static_cast<std::uint64_t>(static_cast<std::int64_t>(x));
  const std::uint64_t mask = bits == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << bits) - 1);
  const std::uint64_t low = u & mask;
  if (!is_signed) return static_cast<long double>(low);
  if (bits == 64) return static_cast<long double>(static_cast<std::int64_t>(low));
  const std::uint64_t sign_bit = std::uint64_t{1} << (bits - 1);
  return (low & sign_bit)
             ? static_cast<long double>(static_cast<std::int64_t>(low) - static_cast<std::int64_t>(sign_bit << 1))
             : static_cast<long double>(low);
}

template <typename T>
T make_value(long double x) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, bool>)
    return x != 0;
  else
    return static_cast<T>(x);
}

template <typename T>
long double as_long_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return static_cast<float>(v);
  else if constexpr (std::is_same_v<T, bool>)
    return v ? 1 : 0;
  else
    return static_cast<long double>(v);
}

forge::Tensor make_tensor(forge::ExecContext& ctx, const std::vector<long double>& xs, DType t) {
  return forge::dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> v;
    for (long double x : xs) v.push_back(make_value<T>(x));
    return ctx.from_vector(v);
  });
}

// The elements of a tensor, read in its own dtype (no conversion), widened exactly.
std::vector<long double> read_exact(const forge::Tensor& t) {
  return forge::dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<long double> out;
    for (auto v : t.to_vector<T>()) out.push_back(as_long_double<T>(v));
    return out;
  });
}

std::vector<long double> cast_candidates(DType src) {
  const long double inf = std::numeric_limits<long double>::infinity();
  std::vector<long double> all;
  if (forge::is_floating(src)) {
    all = {0.0L,
           -0.0L,
           1,
           -1,
           0.5,
           -0.5,
           2.5,
           -2.5,
           2.75,
           -2.75,
           -3.75,
           7.9375,
           100.5,
           127,
           128,
           200,
           255,
           255.5,
           256,
           257,
           258,
           300,
           -129,
           -300,
           1000.25,
           2048,
           65504,
           70000,
           3e9L,
           -3e9L,
           0x1p31L,
           -0x1p31L,
           1e10L,
           -1e10L,
           0x1p40L,
           1e19L,
           -1e19L,
           0x1p63L,
           -0x1p63L,
           static_cast<long double>(1e40),
           -static_cast<long double>(1e40),
           std::ldexp(1.0L, -24),
           static_cast<long double>(1e-30),
           inf,
           -inf,
           std::numeric_limits<long double>::quiet_NaN()};
  } else {
    all = {0,
           1,
           -1,
           2,
           127,
           128,
           200,
           255,
           256,
           257,
           300,
           -129,
           -300,
           65504,
           65520,
           70000,
           2147483647.0L,
           -2147483648.0L,
           2147483648.0L,
           4294967301.0L,
           1099511627779.0L,
           9007199254740993.0L,
           static_cast<long double>(std::numeric_limits<std::int64_t>::max()),
           static_cast<long double>(std::numeric_limits<std::int64_t>::min())};
  }
  std::vector<long double> out;
  for (long double x : all)
    if (representable(x, src)) out.push_back(x);
  return out;
}

}  // namespace

TEST_CASE("dtype: Tensor::to converts between every pair of dtypes as the contract says") {
  TestContext ctx;
  for (DType src : kAllDTypes) {
    const std::vector<long double> xs = cast_candidates(src);
    REQUIRE(xs.size() >= 2);
    const forge::Tensor a = make_tensor(ctx, xs, src);
    REQUIRE(a.dtype() == src);
    // The source holds exactly the candidate values.
    const std::vector<long double> back = read_exact(a);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      INFO(forge::dtype_name(src) << " value " << static_cast<double>(xs[i]));
      if (std::isnan(xs[i]))
        CHECK(std::isnan(back[i]));
      else
        CHECK(back[i] == xs[i]);
    }
    for (DType dst : kAllDTypes) {
      const forge::Tensor b = a.to(dst);
      REQUIRE(b.dtype() == dst);
      REQUIRE(b.shape() == a.shape());
      const std::vector<long double> got = read_exact(b);
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const long double want = reference_cast(xs[i], src, dst);
        INFO(forge::dtype_name(src) << " -> " << forge::dtype_name(dst) << ": " << static_cast<double>(xs[i])
                                    << " gave " << static_cast<double>(got[i]) << ", expected "
                                    << static_cast<double>(want));
        if (std::isnan(want)) {
          CHECK(std::isnan(got[i]));
        } else {
          CHECK(got[i] == want);
          if (forge::is_floating(dst) && want == 0) CHECK(std::signbit(got[i]) == std::signbit(want));
        }
      }
    }
  }
}

TEST_CASE("dtype: to() pins: float -> int truncates toward zero and saturates with NaN -> 0 and bool is != 0") {
  TestContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const forge::Tensor x = ctx.from_vector<float>({2.7f, -2.7f, 0.5f, -0.5f, 3e9f, -3e9f, nan, inf, -inf, 300.5f});
  CHECK(x.to(DType::i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{2, -2, 0, 0, 2147483647, -2147483647 - 1, 0, 2147483647, -2147483647 - 1, 300});
  CHECK(x.to(DType::u8).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{2, 0, 0, 0, 255, 0, 0, 255, 0, 255});
  CHECK(x.to(DType::i64).to_vector<std::int64_t>()[4] == 3000000000LL);
  CHECK(x.to(DType::boolean).to_vector<bool>() ==
        std::vector<bool>{true, true, true, true, true, true, true, true, true, true});
  const forge::Tensor z = ctx.from_vector<float>({0.0f, -0.0f, 1e-30f});
  CHECK(z.to(DType::boolean).to_vector<bool>() == std::vector<bool>{false, false, true});
  const forge::Tensor b = ctx.from_vector<bool>({true, false, true});
  CHECK(b.to(DType::f32).to_vector<float>() == std::vector<float>{1, 0, 1});
  CHECK(b.to(DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 1});
  CHECK(b.to(DType::u8).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 0, 1});
  const forge::Tensor i = ctx.from_vector<std::int32_t>({-1, 0, 2, 256});
  CHECK(i.to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, false, true, true});
  CHECK(i.to(DType::u8).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{255, 0, 2, 0});
}

TEST_CASE("dtype: i8 conversions saturate from floats (NaN -> 0) and wrap from integers") {
  TestContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const forge::Tensor x =
      ctx.from_vector<float>({2.7f, -2.7f, 127.5f, 128.0f, -128.9f, -129.0f, 300.0f, -300.0f, nan, inf, -inf});
  CHECK(x.to(DType::i8).to_vector<std::int8_t>() ==
        std::vector<std::int8_t>{2, -2, 127, 127, -128, -128, 127, -128, 0, 127, -128});
  const forge::Tensor c = ctx.from_vector<std::int8_t>({-128, -1, 0, 127});
  REQUIRE(c.dtype() == DType::i8);
  CHECK(c.to(DType::f32).to_vector<float>() == std::vector<float>{-128, -1, 0, 127});
  CHECK(c.to(DType::u8).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{128, 255, 0, 127});
  CHECK(c.to(DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{-128, -1, 0, 127});
  CHECK(c.to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, true, false, true});
  CHECK(ctx.from_vector<std::int32_t>({200, -200, 256, 383}).to(DType::i8).to_vector<std::int8_t>() ==
        std::vector<std::int8_t>{-56, 56, 0, 127});
  CHECK(ctx.from_vector<std::uint8_t>({255, 128, 127}).to(DType::i8).to_vector<std::int8_t>() ==
        std::vector<std::int8_t>{-1, -128, 127});
  // full and arange check the range the dtype holds (Note [Scalar conversion]).
  CHECK(ctx.full({1}, -128, DType::i8).item<std::int8_t>() == -128);
  FORGE_REQUIRE_ERROR(out_of_range, "full", (void)ctx.full({1}, 128, DType::i8));
  FORGE_REQUIRE_ERROR(out_of_range, "arange", (void)ctx.arange(120, 130, 1, DType::i8));
  CHECK(ctx.arange(-3, 3, 2, DType::i8).to_vector<std::int8_t>() == std::vector<std::int8_t>{-3, -1, 1});
}

TEST_CASE("dtype: i8 promotes as libtorch (u8 with i8 meets at i32) and its arithmetic wraps modulo 256") {
  TestContext ctx;
  using I8 = std::vector<std::int8_t>;
  const forge::Tensor a = ctx.from_vector<std::int8_t>({100, -128, -128, 127, 16, -1});
  const forge::Tensor b = ctx.from_vector<std::int8_t>({100, -1, 1, 1, 16, -1});
  // Promotion pairs, with values that would differ had the wrong dtype been computed in.
  const forge::Tensor with_u8 = a + ctx.from_vector<std::uint8_t>({200, 255, 0, 255, 0, 255});
  REQUIRE(with_u8.dtype() == DType::i32);
  CHECK(with_u8.to_vector<std::int32_t>() == std::vector<std::int32_t>{300, 127, -128, 382, 16, 254});
  const forge::Tensor with_i32 = a + ctx.from_vector<std::int32_t>({100, -1, 0, 1, 0, 0});
  REQUIRE(with_i32.dtype() == DType::i32);
  CHECK(with_i32.to_vector<std::int32_t>() == std::vector<std::int32_t>{200, -129, -128, 128, 16, -1});
  const forge::Tensor with_bool = a + ctx.from_vector<bool>({true, true, false, true, false, false});
  REQUIRE(with_bool.dtype() == DType::i8);
  CHECK(with_bool.to_vector<std::int8_t>() == I8{101, -127, -128, -128, 16, -1});
  const forge::Tensor with_f16 = a * ctx.full({6}, 0.5, DType::f16);
  REQUIRE(with_f16.dtype() == DType::f16);
  CHECK(with_f16.to_vector<float>() == std::vector<float>{50, -64, -64, 63.5f, 8, -0.5f});
  CHECK((a + ctx.from_vector<std::int64_t>({0, 0, 0, 0, 0, 0})).dtype() == DType::i64);
  CHECK((a + 1.5).dtype() == DType::f32);
  CHECK((a + 1).dtype() == DType::i8);
  // Wrapping: libtorch's int8 results.
  CHECK((a + b).to_vector<std::int8_t>() == I8{-56, 127, -127, -128, 32, -2});
  CHECK((a - b).to_vector<std::int8_t>() == I8{0, -127, 127, 126, 0, 0});
  CHECK((a * b).to_vector<std::int8_t>() == I8{16, -128, -128, 127, 0, 1});
  CHECK((a * -1).to_vector<std::int8_t>() == I8{-100, -128, -128, -127, -16, 1});
  CHECK((a + 100).to_vector<std::int8_t>() == I8{-56, -28, -28, -29, 116, 99});
  CHECK(forge::neg(a).to_vector<std::int8_t>() == I8{-100, -128, -128, -127, -16, 1});
  CHECK(forge::abs(a).to_vector<std::int8_t>() == I8{100, -128, -128, 127, 16, 1});
  CHECK(forge::square(a).to_vector<std::int8_t>() == I8{16, 0, 0, 1, 0, 1});
  CHECK(forge::pow(ctx.from_vector<std::int8_t>({2, -2, 3}), 7).to_vector<std::int8_t>() == I8{-128, -128, -117});
  CHECK(forge::maximum(a, b).to_vector<std::int8_t>() == I8{100, -1, 1, 127, 16, -1});
  CHECK(forge::clamp(a, -100, 50).to_vector<std::int8_t>() == I8{50, -100, -100, 50, 16, -1});
  // The result wraps before it is written into a wider out (Note [Compute dtype]).
  forge::Tensor out = ctx.zeros({6}, DType::i32);
  forge::add_into(out, a, b);
  CHECK(out.to_vector<std::int32_t>() == std::vector<std::int32_t>{-56, 127, -127, -128, 32, -2});
  // Comparisons are exact; true division gives f32.
  CHECK((a < b).to_vector<bool>() == std::vector<bool>{false, true, true, false, false, false});
  CHECK((a == -128).to_vector<bool>() == std::vector<bool>{false, true, true, false, false, false});
  CHECK((a / b).to_vector<float>() == std::vector<float>{1, 128, -128, 127, 1, 1});
  // A scalar the dtype cannot hold is refused, as for the other integer dtypes.
  FORGE_REQUIRE_ERROR(out_of_range, "add", (void)(a + 128));
  FORGE_REQUIRE_ERROR(out_of_range, "eq", (void)(a == -129));
}

TEST_CASE("dtype: i8 reductions (sum and prod give i64), sorting and cumsum") {
  TestContext ctx;
  const forge::Tensor a = ctx.from_vector<std::int8_t>({100, 100, -128, 127, 3});
  const forge::Tensor s = forge::sum(a);
  REQUIRE(s.dtype() == DType::i64);
  CHECK(s.item<std::int64_t>() == 202);
  const forge::Tensor p = forge::prod(ctx.from_vector<std::int8_t>({100, 100, -128}));
  REQUIRE(p.dtype() == DType::i64);
  CHECK(p.item<std::int64_t>() == -1280000);
  CHECK(forge::amax(a).dtype() == DType::i8);
  CHECK(forge::amax(a).item<std::int8_t>() == 127);
  CHECK(forge::amin(a).item<std::int8_t>() == -128);
  CHECK(forge::argmin(a).item<std::int64_t>() == 2);
  const forge::Tensor c = forge::cumsum(a, 0);
  REQUIRE(c.dtype() == DType::i64);
  CHECK(c.to_vector<std::int64_t>() == std::vector<std::int64_t>{100, 200, 72, 199, 202});
  const auto [values, indices] = forge::sort(a);
  REQUIRE(values.dtype() == DType::i8);
  CHECK(values.to_vector<std::int8_t>() == std::vector<std::int8_t>{-128, 3, 100, 100, 127});
  CHECK(indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 4, 0, 1, 3});
  // A line long enough for the radix sort: every value, descending, then ascending again.
  std::vector<std::int8_t> all;
  for (int v = 127; v >= -128; --v) all.push_back(static_cast<std::int8_t>(v));
  for (int v = -128; v <= 127; ++v) all.push_back(static_cast<std::int8_t>(v));
  const auto [sorted, order] = forge::sort(ctx.from_vector(all), -1, /*descending=*/false, /*stable=*/true);
  const std::vector<std::int8_t> got = sorted.to_vector<std::int8_t>();
  const std::vector<std::int64_t> idx = order.to_vector<std::int64_t>();
  REQUIRE(got.size() == 512);
  CHECK(std::is_sorted(got.begin(), got.end()));
  CHECK(got.front() == -128);
  CHECK(got.back() == 127);
  CHECK(idx[0] == 255);  // -128 first appears at 255, then at 256: stable
  CHECK(idx[1] == 256);
}

TEST_CASE("dtype: to() of the same dtype returns the tensor itself and another dtype a fresh buffer") {
  TestContext ctx;
  const forge::Tensor a = ctx.ones({3}, DType::f32);
  const forge::Tensor same = a.to(DType::f32);
  CHECK(same.is_same(a));
  const auto before = ctx.stats().outstanding;
  const forge::Tensor d = a.to(DType::f64);
  CHECK(d.buffer().get() != a.buffer().get());
  CHECK(ctx.stats().outstanding == before + 1);
  CHECK(d.to_vector<double>() == std::vector<double>{1, 1, 1});
}

TEST_CASE("dtype: to() converts non-contiguous views in logical order") {
  TestContext ctx;
  const forge::Tensor a = ctx.from_vector<float>({1.5f, -2.5f, 3.5f, -4.5f, 5.5f, -6.5f}, {2, 3});
  const forge::Tensor t = a.t().to(DType::i32);  // [3, 2]
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.is_contiguous());
  CHECK(t.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, -4, -2, 5, 3, -6});
}

// ============================================================================
// Dims / Shape
// ============================================================================

TEST_CASE("shape: Dims basics (rank, numel, indexing, equality, str)") {
  const Dims d{2, 3, 4};
  CHECK(d.rank() == 3);
  CHECK(d.size() == 3);
  CHECK_FALSE(d.empty());
  CHECK(d[0] == 2);
  CHECK(d[2] == 4);
  CHECK(d.back() == 4);
  CHECK(d.numel() == 24);
  CHECK(d.vec() == std::vector<std::int64_t>{2, 3, 4});
  CHECK(d.str() == "[2, 3, 4]");
  CHECK(Dims{}.rank() == 0);
  CHECK(Dims{}.empty());
  CHECK(Dims{}.numel() == 1);
  CHECK(Dims{}.str() == "[]");
  CHECK(Dims{2, 0, 5}.numel() == 0);
  CHECK(Dims{2, 3} == Dims{2, 3});
  CHECK_FALSE(Dims{2, 3} == Dims{3, 2});
  CHECK_FALSE(Dims{2, 3} == Dims{2, 3, 1});
  CHECK(Dims(std::vector<std::int64_t>{5, 6}) == Dims{5, 6});
  CHECK(Dims::filled(3, 7) == Dims{7, 7, 7});

  Dims e{1, 2};
  e.push_back(3);
  CHECK(e == Dims{1, 2, 3});
  e.insert(0, 9);
  CHECK(e == Dims{9, 1, 2, 3});
  e.insert(4, 8);
  CHECK(e == Dims{9, 1, 2, 3, 8});
  e.erase(1);
  CHECK(e == Dims{9, 2, 3, 8});
  e.erase(3);
  CHECK(e == Dims{9, 2, 3});
  e.resize(5, 1);
  CHECK(e == Dims{9, 2, 3, 1, 1});
  e.resize(1);
  CHECK(e == Dims{9});
  std::ostringstream os;
  os << Dims{4, 5};
  CHECK(os.str() == "[4, 5]");
}

TEST_CASE("shape: a rank above 8 throws invalid_argument naming shape however it is reached") {
  const Dims eight{1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(eight.rank() == forge::kMaxRank);
  std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "shape", Dims({1, 2, 3, 4, 5, 6, 7, 8, 9}));
  CHECK_THAT(msg, Catch::Contains("9"));
  FORGE_REQUIRE_ERROR(invalid_argument, "shape", Dims(std::vector<std::int64_t>(9, 1)));
  FORGE_REQUIRE_ERROR(invalid_argument, "shape", Dims::filled(9, 1));
  {
    Dims d = eight;
    FORGE_REQUIRE_ERROR(invalid_argument, "shape", d.push_back(1));
    CHECK(d == eight);  // unchanged by the failure
  }
  {
    Dims d = eight;
    FORGE_REQUIRE_ERROR(invalid_argument, "shape", d.insert(0, 1));
    CHECK(d == eight);
  }
  {
    Dims d = eight;
    FORGE_REQUIRE_ERROR(invalid_argument, "shape", d.resize(9));
    CHECK(d == eight);
  }
}

TEST_CASE("shape: contiguous_strides is row-major, treating size 0 and 1 as 1 (as libtorch)") {
  CHECK(forge::contiguous_strides(Shape{2, 3, 4}) == Strides{12, 4, 1});
  CHECK(forge::contiguous_strides(Shape{5}) == Strides{1});
  CHECK(forge::contiguous_strides(Shape{}) == Strides{});
  CHECK(forge::contiguous_strides(Shape{2, 1, 3}) == Strides{3, 3, 1});
  CHECK(forge::contiguous_strides(Shape{2, 0, 3}) == Strides{3, 3, 1});
  CHECK(forge::contiguous_strides(Shape{1, 1, 1, 1, 1, 1, 1, 2}) == Strides{2, 2, 2, 2, 2, 2, 2, 1});
  // A naive check on a few more shapes: stride[d] = prod(max(1, size[e])) over e > d.
  for (const Shape& s : {Shape{7, 6, 5, 4}, Shape{3, 0, 2, 1}, Shape{1, 9}}) {
    const Strides st = forge::contiguous_strides(s);
    REQUIRE(st.rank() == s.rank());
    for (int d = 0; d < s.rank(); ++d) {
      std::int64_t expected = 1;
      for (int e = d + 1; e < s.rank(); ++e) expected *= std::max<std::int64_t>(1, s[e]);
      CHECK(st[d] == expected);
    }
  }
}

TEST_CASE("shape: broadcast_shapes follows NumPy and names the op when shapes do not broadcast") {
  using forge::broadcast_shapes;
  CHECK(broadcast_shapes(Shape{4, 1, 3}, Shape{2, 3}, "t") == Shape{4, 2, 3});
  CHECK(broadcast_shapes(Shape{2, 3}, Shape{4, 1, 3}, "t") == Shape{4, 2, 3});
  CHECK(broadcast_shapes(Shape{}, Shape{5}, "t") == Shape{5});
  CHECK(broadcast_shapes(Shape{5}, Shape{}, "t") == Shape{5});
  CHECK(broadcast_shapes(Shape{}, Shape{}, "t") == Shape{});
  CHECK(broadcast_shapes(Shape{3, 1}, Shape{1, 4}, "t") == Shape{3, 4});
  CHECK(broadcast_shapes(Shape{0}, Shape{1}, "t") == Shape{0});
  CHECK(broadcast_shapes(Shape{2, 1}, Shape{1, 0}, "t") == Shape{2, 0});
  CHECK(broadcast_shapes(Shape{1, 1, 1, 1, 1, 1, 1, 6}, Shape{5, 1}, "t") == Shape{1, 1, 1, 1, 1, 1, 5, 6});
  std::string msg = FORGE_REQUIRE_ERROR(shape, "myop", broadcast_shapes(Shape{2, 3}, Shape{4, 3}, "myop"));
  CHECK_THAT(msg, Catch::Contains("[2, 3]") && Catch::Contains("[4, 3]"));
  FORGE_REQUIRE_ERROR(shape, "myop", broadcast_shapes(Shape{0}, Shape{2}, "myop"));
  FORGE_REQUIRE_ERROR(shape, "myop", broadcast_shapes(Shape{3}, Shape{4, 2}, "myop"));
}

TEST_CASE("shape: wrap_dim wraps negative dims and rejects out-of-range ones with out_of_range") {
  CHECK(forge::wrap_dim(0, 3, "t") == 0);
  CHECK(forge::wrap_dim(2, 3, "t") == 2);
  CHECK(forge::wrap_dim(-1, 3, "t") == 2);
  CHECK(forge::wrap_dim(-3, 3, "t") == 0);
  CHECK(forge::wrap_dim(0, 0, "t") == 0);  // a 0-d tensor accepts 0 and -1, as libtorch
  CHECK(forge::wrap_dim(-1, 0, "t") == 0);
  std::string msg = FORGE_REQUIRE_ERROR(out_of_range, "myop", forge::wrap_dim(3, 3, "myop"));
  CHECK_THAT(msg, Catch::Contains("3"));
  FORGE_REQUIRE_ERROR(out_of_range, "myop", forge::wrap_dim(-4, 3, "myop"));
  FORGE_REQUIRE_ERROR(out_of_range, "myop", forge::wrap_dim(1, 0, "myop"));
}
