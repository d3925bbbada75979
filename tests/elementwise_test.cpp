// Binary elementwise ops, comparisons, logic, where and masked_fill against
// naive loops written here: libtorch's promotion and result_type restated by
// hand, inputs read straight from their buffers through their own strides,
// float arithmetic in double rounded once to the result dtype, integer
// arithmetic modulo 2^bits. Covers every dtype and mixed pairs, broadcasting
// with size-1 and zero-size dims, non-contiguous views, the parallel and the
// streaming paths, tensor-scalar forms, the _into forms (with casts into out),
// table tests of the integer and bool semantics, and every error path.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
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
using forge::Half;
using forge::Scalar;
using forge::Shape;
using forge::Tensor;
using forge_test::kAllDTypes;
using forge_test::TestContext;
using Index = std::vector<std::int64_t>;
using LD = long double;

const LD kNaN = std::numeric_limits<LD>::quiet_NaN();

// ---- the reference semantics ----

int int_bits(DType t) { return t == DType::i64 ? 64 : t == DType::i32 ? 32 : 8; }

DType ref_promote(DType a, DType b) {
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

// tensor (op) scalar: a float scalar makes integers and bool f32; an integer
// scalar makes bool i64; otherwise the tensor's dtype.
DType ref_result_type(DType t, const Scalar& s) {
  if (s.is_floating() && !forge::is_floating(t)) return DType::f32;
  if (s.is_integral() && t == DType::boolean) return DType::i64;
  return t;
}

// The low int_bits(t) bits of u as a value of integer dtype t.
LD wrap(std::uint64_t u, DType t) {
  const int bits = int_bits(t);
  if (bits == 64) return static_cast<LD>(static_cast<std::int64_t>(u));
  const std::uint64_t low = u & ((std::uint64_t{1} << bits) - 1);
  if (t == DType::u8) return static_cast<LD>(low);
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  return static_cast<LD>(static_cast<std::int64_t>(low ^ sign) - static_cast<std::int64_t>(sign));
}

std::uint64_t bits_of(LD v) { return static_cast<std::uint64_t>(static_cast<std::int64_t>(v)); }

// v (exact) converted into dtype t: floats round to nearest even, integers
// wrap, bool is "nonzero".
LD to_dtype(LD v, DType t) {
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
      return wrap(bits_of(v), t);
  }
}

enum class B { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge, land, lor };
bool gives_bool(B op) { return op >= B::eq; }

LD int_pow(LD base, LD exponent, DType t) {
  auto e = static_cast<std::int64_t>(exponent);
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2) ? -1 : 1;
    return 0;
  }
  std::uint64_t result = 1, b = bits_of(base);
  for (; e; e /= 2, b *= b)
    if (e & 1) result *= b;
  return wrap(result, t);
}

// x (op) y for values already in the compute dtype c (the promoted dtype, or
// f32 for the division of integers).
LD ref_binary(B op, LD x, LD y, DType c) {
  switch (op) {
    case B::eq:
      return x == y;
    case B::ne:
      return x != y;
    case B::lt:
      return x < y;
    case B::le:
      return x <= y;
    case B::gt:
      return x > y;
    case B::ge:
      return x >= y;
    case B::land:
      return x != 0 && y != 0;
    case B::lor:
      return x != 0 || y != 0;
    default:
      break;
  }
  if (op == B::maximum || op == B::minimum) {
    if (std::isnan(x) || std::isnan(y)) return kNaN;
    return op == B::maximum ? std::max(x, y) : std::min(x, y);
  }
  if (forge::is_floating(c)) {
    const double a = static_cast<double>(x), b = static_cast<double>(y);
    double r = 0;
    switch (op) {
      case B::add:
        r = a + b;
        break;
      case B::sub:
        r = a - b;
        break;
      case B::mul:
        r = a * b;
        break;
      case B::div:
        r = a / b;
        break;
      default:
        r = std::pow(a, b);
        break;
    }
    return to_dtype(r, c);
  }
  if (c == DType::boolean) return op == B::add ? (x != 0 || y != 0) : (x != 0 && y != 0);
  switch (op) {
    case B::add:
      return wrap(bits_of(x) + bits_of(y), c);
    case B::sub:
      return wrap(bits_of(x) - bits_of(y), c);
    case B::mul:
      return wrap(bits_of(x) * bits_of(y), c);
    default:
      return int_pow(x, y, c);
  }
}

DType compute_of(B op, DType promoted) { return op == B::div && !forge::is_floating(promoted) ? DType::f32 : promoted; }
DType result_of(B op, DType promoted) { return gives_bool(op) ? DType::boolean : compute_of(op, promoted); }

// Only pow (std::pow in f32 against pow in double) is not exact.
double rel_tolerance(B op, DType t) {
  if (op != B::pow || !forge::is_floating(t)) return 0;
  switch (t) {
    case DType::f64:
      return 1e-14;
    case DType::f32:
      return 1e-6;
    case DType::f16:
      return 1e-3;
    default:
      return 8e-3;
  }
}

bool close(LD got, LD want, double rtol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want) || rtol == 0) return got == want;
  return std::fabs(static_cast<double>(got - want)) <= rtol * std::fabs(static_cast<double>(want));
}

// ---- reading tensors naively ----

LD read_at(const Tensor& t, const std::int64_t* index) {
  std::int64_t off = t.offset();
  for (int d = 0; d < t.dim(); ++d) off += index[d] * t.strides()[d];
  const std::byte* p = t.buffer()->data() + off * static_cast<std::int64_t>(t.element_size());
  return forge::dispatch_dtype(t.dtype(), [&](auto tag) -> LD {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      std::uint8_t byte;
      std::memcpy(&byte, p, 1);
      return byte != 0;
    } else {
      T v;
      std::memcpy(&v, p, sizeof(T));
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        return static_cast<float>(v);
      else
        return static_cast<LD>(v);
    }
  });
}

Shape ref_broadcast(const Shape& a, const Shape& b) {
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

// The value broadcasting reads from t for output index `out` (rank r).
LD read_broadcast(const Tensor& t, const Index& out, int r) {
  Index in(static_cast<std::size_t>(t.dim()));
  const int lead = r - t.dim();
  for (int d = 0; d < t.dim(); ++d)
    in[static_cast<std::size_t>(d)] = t.shape()[d] == 1 ? 0 : out[static_cast<std::size_t>(d + lead)];
  return read_at(t, in.data());
}

// Calls f(index) for every index of shape, row-major.
void for_each_index(const Shape& shape, const std::function<void(const Index&)>& f) {
  const int r = shape.rank();
  Index idx(static_cast<std::size_t>(r), 0);
  for (std::int64_t n = 0; n < shape.numel(); ++n) {
    f(idx);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < shape[d]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
}

std::string index_str(const Index& idx) {
  std::string s;
  for (auto i : idx) s += std::to_string(i) + ",";
  return s;
}

// out against op over the broadcast of x and y, each a tensor or a scalar
// (given as a 0-d reference value through `scalar`). `promoted` is the dtype
// the inputs are converted to; a result of another dtype than out's is then
// converted into out's.
struct Side {
  const Tensor* tensor;
  LD scalar;
};

void check_binary(B op, const Side& x, const Side& y, DType promoted, const Tensor& out) {
  const DType c = compute_of(op, promoted);
  const DType result = result_of(op, promoted);
  const double rtol = rel_tolerance(op, result);
  const Shape shape = x.tensor && y.tensor ? ref_broadcast(x.tensor->shape(), y.tensor->shape())
                      : x.tensor           ? x.tensor->shape()
                                           : y.tensor->shape();
  REQUIRE(out.shape() == shape);
  int mismatches = 0;
  for_each_index(shape, [&](const Index& idx) {
    // Tensor inputs convert to the promoted dtype, then (true division) to
    // f32; a scalar is given already converted to the compute dtype.
    const LD a = x.tensor ? to_dtype(to_dtype(read_broadcast(*x.tensor, idx, shape.rank()), promoted), c) : x.scalar;
    const LD b = y.tensor ? to_dtype(to_dtype(read_broadcast(*y.tensor, idx, shape.rank()), promoted), c) : y.scalar;
    LD want = ref_binary(op, a, b, c);
    if (out.dtype() != result) want = to_dtype(want, out.dtype());
    const LD got = read_at(out, idx.data());
    if (!close(got, want, rtol)) {
      if (mismatches++ < 3)
        FAIL_CHECK("at [" << index_str(idx) << "] " << static_cast<double>(a) << ", " << static_cast<double>(b)
                          << ": got " << static_cast<double>(got) << ", expected " << static_cast<double>(want));
    }
  });
  CHECK(mismatches == 0);
}

// ---- the ops under test ----

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
using BinaryIntoFn = Tensor& (*)(Tensor&, const Tensor&, const Tensor&);
using ScalarFn = Tensor (*)(const Tensor&, Scalar);

struct BinaryCase {
  B op;
  const char* name;
  BinaryFn fn;
  BinaryIntoFn into;
  ScalarFn scalar;  // tensor (op) scalar, null where the API has no such form
};

const BinaryCase kBinary[] = {
    {B::add, "add", [](const Tensor& a, const Tensor& b) { return forge::add(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::add_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::add(a, s); }},
    {B::sub, "sub", [](const Tensor& a, const Tensor& b) { return forge::sub(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::sub_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::sub(a, s); }},
    {B::mul, "mul", [](const Tensor& a, const Tensor& b) { return forge::mul(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::mul_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::mul(a, s); }},
    {B::div, "div", [](const Tensor& a, const Tensor& b) { return forge::div(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::div_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::div(a, s); }},
    {B::pow, "pow", [](const Tensor& a, const Tensor& b) { return forge::pow(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::pow_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::pow(a, s); }},
    {B::maximum, "maximum", [](const Tensor& a, const Tensor& b) { return forge::maximum(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::maximum_into(o, a, b); }, nullptr},
    {B::minimum, "minimum", [](const Tensor& a, const Tensor& b) { return forge::minimum(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::minimum_into(o, a, b); }, nullptr},
    {B::eq, "eq", [](const Tensor& a, const Tensor& b) { return forge::eq(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::eq_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::eq(a, s); }},
    {B::ne, "ne", [](const Tensor& a, const Tensor& b) { return forge::ne(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::ne_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::ne(a, s); }},
    {B::lt, "lt", [](const Tensor& a, const Tensor& b) { return forge::lt(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::lt_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::lt(a, s); }},
    {B::le, "le", [](const Tensor& a, const Tensor& b) { return forge::le(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::le_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::le(a, s); }},
    {B::gt, "gt", [](const Tensor& a, const Tensor& b) { return forge::gt(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::gt_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::gt(a, s); }},
    {B::ge, "ge", [](const Tensor& a, const Tensor& b) { return forge::ge(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::ge_into(o, a, b); },
     [](const Tensor& a, Scalar s) { return forge::ge(a, s); }},
    {B::land, "logical_and", [](const Tensor& a, const Tensor& b) { return forge::logical_and(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::logical_and_into(o, a, b); }, nullptr},
    {B::lor, "logical_or", [](const Tensor& a, const Tensor& b) { return forge::logical_or(a, b); },
     [](Tensor& o, const Tensor& a, const Tensor& b) -> Tensor& { return forge::logical_or_into(o, a, b); }, nullptr},
};

// sub refuses any bool operand (tensor or scalar), pow two bool operands, as libtorch.
bool takes(B op, DType a, bool b_is_bool, DType promoted) {
  if (op == B::sub) return a != DType::boolean && !b_is_bool;
  return !(op == B::pow && promoted == DType::boolean);
}
bool takes(B op, DType a, DType b) { return takes(op, a, b == DType::boolean, ref_promote(a, b)); }

// ---- making inputs ----

enum class Values { full, small, positive };

struct Gen {
  std::mt19937_64 rng{20261130};
  LD value(DType t, Values kind) {
    if (t == DType::boolean) return static_cast<LD>(rng() & 1u);
    if (kind == Values::positive) {  // bases for pow: 0.5 .. 4, or 0 .. 5
      if (forge::is_floating(t)) return to_dtype(0.5 + std::uniform_real_distribution<double>(0, 3.5)(rng), t);
      return static_cast<LD>(rng() % 6);
    }
    if (kind == Values::small) {  // exponents: -3 .. 3, in steps of 1/4 for floats
      if (forge::is_floating(t)) return to_dtype(static_cast<double>(static_cast<int>(rng() % 25) - 12) / 4, t);
      return t == DType::u8 ? static_cast<LD>(rng() % 4) : static_cast<LD>(static_cast<int>(rng() % 7) - 3);
    }
    if (forge::is_floating(t)) {
      // Some exact ties and zeros, so that comparisons and maximum see equal values.
      if (rng() % 8 == 0) return static_cast<LD>(static_cast<int>(rng() % 5) - 2);
      return to_dtype(std::uniform_real_distribution<double>(-8, 8)(rng), t);
    }
    if (rng() % 8 == 0) return static_cast<LD>(rng() % 3);
    return wrap(rng(), t);
  }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n)); }
};

Tensor from_values(forge::ExecContext& ctx, const std::vector<LD>& xs, const Shape& shape, DType t) {
  return forge::dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> v;
    v.reserve(xs.size());
    for (LD x : xs) {
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
  const char* names[] = {"packed", "transposed", "stepped", "expanded", "offset"};
  return names[static_cast<int>(l)];
}

Tensor make_input(forge::ExecContext& ctx, Gen& gen, const Shape& shape, DType t, Layout layout,
                  Values kind = Values::full) {
  auto fill = [&](const Shape& s) {
    std::vector<LD> xs(static_cast<std::size_t>(s.numel()));
    for (auto& x : xs) x = gen.value(t, kind);
    return from_values(ctx, xs, s, t);
  };
  return forge_test::reference::view_of(shape, layout, fill);
}

struct ShapePair {
  Shape a, b;
};

std::vector<ShapePair> broadcast_cases(Gen& gen) {
  std::vector<ShapePair> cases = {
      {{4, 1, 3}, {2, 3}},
      {{}, {5}},
      {{5}, {}},
      {{}, {}},
      {{3, 1}, {1, 4}},
      {{2, 0, 3}, {3}},
      {{0}, {1}},
      {{1}, {37}},
      {{6, 35}, {6, 35}},
      {{2, 3, 4, 5}, {3, 1, 5}},
      {{7, 1, 1, 3}, {1, 5, 2, 1}},
      {{3, 0}, {1, 1}},
      {{9, 33}, {33}},
  };
  for (int k = 0; k < 6; ++k) {
    const int r = static_cast<int>(gen.below(5));
    Shape s;
    for (int d = 0; d < r; ++d) s.push_back(gen.below(20) == 0 ? 0 : 1 + gen.below(5));
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

Values values_for(B op, bool exponent) {
  if (op != B::pow) return Values::full;
  return exponent ? Values::small : Values::positive;
}

std::vector<std::int32_t> i32s(const Tensor& t) { return t.to_vector<std::int32_t>(); }
std::vector<std::uint8_t> u8s(const Tensor& t) { return t.to_vector<std::uint8_t>(); }
std::vector<bool> bools(const Tensor& t) { return t.to_vector<bool>(); }
std::vector<double> f64s(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

// ============================================================================
// binary ops against the reference
// ============================================================================

TEST_CASE("elementwise: every binary op matches naive loops on broadcast shapes and layouts, in every dtype",
          "[elementwise]") {
  TestContext ctx;
  Gen gen;
  const std::vector<ShapePair> cases = broadcast_cases(gen);
  const std::pair<Layout, Layout> layouts[] = {
      {Layout::packed, Layout::packed}, {Layout::offset, Layout::transposed}, {Layout::expanded, Layout::stepped}};
  for (const BinaryCase& bc : kBinary) {
    for (DType t : kAllDTypes) {
      if (!takes(bc.op, t, t)) continue;
      for (const ShapePair& c : cases) {
        for (const auto& [la, lb] : layouts) {
          INFO(bc.name << " " << forge::dtype_name(t) << " " << c.a << " (" << layout_name(la) << ") with " << c.b
                       << " (" << layout_name(lb) << ")");
          const Tensor a = make_input(ctx, gen, c.a, t, la, values_for(bc.op, false));
          const Tensor b = make_input(ctx, gen, c.b, t, lb, values_for(bc.op, true));
          const Tensor out = bc.fn(a, b);
          CHECK(out.dtype() == result_of(bc.op, t));
          CHECK(out.is_contiguous());
          check_binary(bc.op, {&a, 0}, {&b, 0}, t, out);
        }
      }
    }
  }
}

TEST_CASE("elementwise: mixed dtype pairs promote as libtorch and compute in the promoted dtype", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  for (const BinaryCase& bc : kBinary) {
    for (DType ta : kAllDTypes) {
      for (DType tb : kAllDTypes) {
        const DType p = ref_promote(ta, tb);
        INFO(bc.name << " " << forge::dtype_name(ta) << " with " << forge::dtype_name(tb));
        if (!takes(bc.op, ta, tb)) {
          FORGE_REQUIRE_ERROR(dtype, bc.name, (void)bc.fn(ctx.zeros({2}, ta), ctx.zeros({2}, tb)));
          continue;
        }
        const Tensor a = make_input(ctx, gen, {4, 1, 3}, ta, Layout::stepped, values_for(bc.op, false));
        const Tensor b = make_input(ctx, gen, {2, 3}, tb, Layout::transposed, values_for(bc.op, true));
        const Tensor out = bc.fn(a, b);
        CHECK(out.dtype() == result_of(bc.op, p));
        check_binary(bc.op, {&a, 0}, {&b, 0}, p, out);
      }
    }
  }
}

TEST_CASE("elementwise: tensor-scalar forms use result_type and the scalar rounded to it", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  const Scalar scalars[] = {Scalar(3),    Scalar(-2),   Scalar(1000),  Scalar(0.3),
                            Scalar(-2.5), Scalar(true), Scalar(false), Scalar(std::int64_t{1} << 40)};
  for (const BinaryCase& bc : kBinary) {
    if (!bc.scalar) continue;
    for (DType t : kAllDTypes) {
      for (const Scalar& s : scalars) {
        const DType p = ref_result_type(t, s);
        // Division of integers by a scalar outside i32 would convert differently; keep to values that fit.
        if (bc.op == B::div && s.is_integral() && std::llabs(s.to_int()) > 1000) continue;
        if (bc.op == B::pow && !s.is_floating() && s.to_int() > 3) continue;
        INFO(bc.name << " " << forge::dtype_name(t) << " with scalar " << s.to_double());
        const Tensor a = make_input(ctx, gen, {3, 5}, t, Layout::transposed, values_for(bc.op, false));
        if (!takes(bc.op, t, s.is_bool(), p) ||
            (bc.op == B::pow && !forge::is_floating(p) && !s.is_floating() && s.to_int() < 0)) {
          forge_test::expect_error(
              bc.op == B::pow && p != DType::boolean ? forge::ErrorCode::invalid_argument : forge::ErrorCode::dtype,
              bc.name, [&] { (void)bc.scalar(a, s); });
          continue;
        }
        // An integer compute dtype takes only a scalar it can hold (Note [Scalar conversion]).
        const DType c = compute_of(bc.op, p);
        if (forge::is_integral(c) && !s.is_floating() && to_dtype(static_cast<LD>(s.to_int()), c) != s.to_int()) {
          FORGE_REQUIRE_ERROR(out_of_range, bc.name, (void)bc.scalar(a, s));
          continue;
        }
        const Tensor out = bc.scalar(a, s);
        CHECK(out.dtype() == result_of(bc.op, p));
        // The scalar converts straight to the compute dtype.
        const LD sv = to_dtype(s.is_floating() ? static_cast<LD>(s.to_double()) : static_cast<LD>(s.to_int()),
                               compute_of(bc.op, p));
        check_binary(bc.op, {&a, 0}, {nullptr, sv}, p, out);
      }
    }
  }
}

TEST_CASE("elementwise: scalar-first sub, div and pow", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  for (DType t : kAllDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor x = make_input(ctx, gen, {4, 3}, t, Layout::stepped, Values::small);
    if (t != DType::boolean) {
      check_binary(B::sub, {nullptr, 7}, {&x, 0}, t, forge::sub(7, x));
      check_binary(B::sub, {nullptr, 7}, {&x, 0}, t, 7 - x);
      check_binary(B::sub, {nullptr, to_dtype(1.5, ref_result_type(t, 1.5))}, {&x, 0}, ref_result_type(t, 1.5),
                   forge::sub(1.5, x));
    } else {
      FORGE_REQUIRE_ERROR(dtype, "sub", (void)forge::sub(true, x));
    }
    check_binary(B::div, {nullptr, 6}, {&x, 0}, ref_result_type(t, 6), forge::div(6, x));
    check_binary(B::div, {nullptr, 6}, {&x, 0}, ref_result_type(t, 6), 6 / x);
    if (ref_result_type(t, 2) != DType::boolean)
      check_binary(B::pow, {nullptr, 2}, {&x, 0}, ref_result_type(t, 2), forge::pow(2, x));
    check_binary(B::pow, {nullptr, to_dtype(0.5, ref_result_type(t, 0.5))}, {&x, 0}, ref_result_type(t, 0.5),
                 forge::pow(0.5, x));
  }
}

TEST_CASE("elementwise: large inputs take the parallel and the streaming paths and still match", "[elementwise]") {
  TestContext ctx;
  REQUIRE(ctx.threads() == 2);
  Gen gen;
  const std::int64_t big = (std::int64_t{8} << 20) / 4 + 77;  // an f32 output past the streaming threshold
  {
    const Tensor a = make_input(ctx, gen, {big}, DType::f32, Layout::packed);
    const Tensor b = make_input(ctx, gen, {big}, DType::f32, Layout::offset);  // not 64-byte aligned
    check_binary(B::add, {&a, 0}, {&b, 0}, DType::f32, a + b);
    check_binary(B::mul, {&a, 0}, {nullptr, to_dtype(0.7, DType::f32)}, DType::f32, a * 0.7);
    check_binary(B::lt, {&a, 0}, {&b, 0}, DType::f32, a < b);
    Tensor out = ctx.empty({big + 3}).narrow(0, 1, big);  // an unaligned destination
    forge::sub_into(out, a, b);
    check_binary(B::sub, {&a, 0}, {&b, 0}, DType::f32, out);
  }
  {  // a row broadcast over [1100, 2048]
    const Tensor a = make_input(ctx, gen, {1100, 2048}, DType::f32, Layout::packed);
    const Tensor bias = make_input(ctx, gen, {2048}, DType::f32, Layout::packed);
    check_binary(B::add, {&a, 0}, {&bias, 0}, DType::f32, a + bias);
    check_binary(B::maximum, {&bias, 0}, {&a, 0}, DType::f32, forge::maximum(bias, a));
  }
  {  // parallel with conversions: i64 against a broadcast u8 column, f16, bool results
    const Tensor a = make_input(ctx, gen, {300, 257}, DType::i64, Layout::transposed);
    const Tensor b = make_input(ctx, gen, {300, 1}, DType::u8, Layout::packed);
    check_binary(B::sub, {&a, 0}, {&b, 0}, DType::i64, a - b);
    check_binary(B::div, {&a, 0}, {&b, 0}, DType::i64, a / b);
    const Tensor h = make_input(ctx, gen, {300, 257}, DType::f16, Layout::stepped);
    check_binary(B::mul, {&h, 0}, {&h, 0}, DType::f16, h * h);
    check_binary(B::ge, {&h, 0}, {&a, 0}, DType::f16, h >= a);
  }
}

// ============================================================================
// _into forms
// ============================================================================

TEST_CASE("elementwise: _into writes the result converted into out's dtype, in place or not", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  // (inputs' dtype, out's dtype) pairs that can_cast allows.
  const std::pair<DType, DType> pairs[] = {
      {DType::f16, DType::f32}, {DType::bf16, DType::f64},    {DType::i32, DType::i64}, {DType::i64, DType::u8},
      {DType::i32, DType::f32}, {DType::boolean, DType::f16}, {DType::u8, DType::i32},  {DType::f32, DType::f16},
      {DType::i8, DType::i32},  {DType::i8, DType::f32},      {DType::i32, DType::i8},  {DType::u8, DType::i8}};
  for (const BinaryCase& bc : kBinary) {
    for (const auto& [t, to] : pairs) {
      const DType result = result_of(bc.op, t);
      if (!takes(bc.op, t, t) || !((forge::is_floating(to) || !forge::is_floating(result)) &&
                                   (result == DType::boolean || to != DType::boolean)))
        continue;
      INFO(bc.name << " " << forge::dtype_name(t) << " into " << forge::dtype_name(to));
      const Tensor a = make_input(ctx, gen, {5, 4}, t, Layout::transposed, values_for(bc.op, false));
      const Tensor b = make_input(ctx, gen, {4}, t, Layout::packed, values_for(bc.op, true));
      Tensor out = ctx.full({5, 4}, 99, to);
      const std::uint32_t v = out.version();
      Tensor& r = bc.into(out, a, b);
      CHECK(&r == &out);
      CHECK(out.version() != v);
      check_binary(bc.op, {&a, 0}, {&b, 0}, t, out);
      // Into a transposed view.
      Tensor base = ctx.zeros({4, 5}, to);
      Tensor view = base.t();
      bc.into(view, a, b);
      check_binary(bc.op, {&a, 0}, {&b, 0}, t, view);
    }
  }
  // In place, exactly aliasing an input (and through the operators).
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::f16, DType::i8}) {
    INFO(forge::dtype_name(t));
    Tensor x = make_input(ctx, gen, {6, 7}, t, Layout::packed);
    const Tensor y = make_input(ctx, gen, {7}, t, Layout::packed);
    Tensor before = x.clone();
    forge::add_into(x, x, y);
    check_binary(B::add, {&before, 0}, {&y, 0}, t, x);
    before = x.clone();
    x *= y;
    check_binary(B::mul, {&before, 0}, {&y, 0}, t, x);
    before = x.clone();
    x -= 3;
    check_binary(B::sub, {&before, 0}, {nullptr, 3}, t, x);
    before = x.clone();
    x += 2;
    check_binary(B::add, {&before, 0}, {nullptr, 2}, t, x);
    if (forge::is_floating(t)) {
      before = x.clone();
      x /= y;
      check_binary(B::div, {&before, 0}, {&y, 0}, t, x);
      before = x.clone();
      x /= 4;
      check_binary(B::div, {&before, 0}, {nullptr, 4}, t, x);
    } else {
      FORGE_REQUIRE_ERROR(dtype, "div_into", x /= y);
    }
  }
  // Scalar _into forms.
  Tensor o = ctx.zeros({3}, DType::f64);
  const Tensor i = ctx.from_vector<std::int32_t>({1, 2, 3});
  forge::add_into(o, i, 0.5);
  CHECK(f64s(o) == std::vector<double>{1.5, 2.5, 3.5});
  forge::sub_into(o, i, 1);
  CHECK(f64s(o) == std::vector<double>{0, 1, 2});
  forge::mul_into(o, i, 3);
  CHECK(f64s(o) == std::vector<double>{3, 6, 9});
  forge::div_into(o, i, 2);
  CHECK(f64s(o) == std::vector<double>{0.5, 1, 1.5});
  forge::pow_into(o, i, 2);
  CHECK(f64s(o) == std::vector<double>{1, 4, 9});
}

// ============================================================================
// integer and bool semantics, pinned
// ============================================================================

TEST_CASE("elementwise: division is true division, integers and bool give f32", "[elementwise]") {
  TestContext ctx;
  const Tensor a = ctx.from_vector<std::int32_t>({7, -7, 7, -7, 0, 1, -1});
  const Tensor b = ctx.from_vector<std::int32_t>({2, 2, -2, -2, 0, 0, 0});
  const Tensor q = a / b;
  REQUIRE(q.dtype() == DType::f32);
  const std::vector<float> v = q.to_vector<float>();
  CHECK(v[0] == 3.5f);
  CHECK(v[1] == -3.5f);
  CHECK(v[2] == -3.5f);
  CHECK(v[3] == 3.5f);
  CHECK(std::isnan(v[4]));
  CHECK(v[5] == std::numeric_limits<float>::infinity());
  CHECK(v[6] == -std::numeric_limits<float>::infinity());
  const Tensor t = ctx.from_vector<bool>({true, false, true});
  CHECK((t / t).dtype() == DType::f32);
  CHECK((ctx.from_vector<std::uint8_t>({200}) / 8).to_vector<float>() == std::vector<float>{25.0f});
  CHECK((ctx.from_vector<std::int64_t>({1}) / 3).to_vector<float>() == std::vector<float>{1.0f / 3.0f});
  CHECK(forge::div(ctx.from_vector<std::int32_t>({3}), 2.0).dtype() == DType::f32);
  CHECK(forge::div(ctx.full({1}, 3, DType::f16), 2).dtype() == DType::f16);
}

TEST_CASE("elementwise: integer sub wraps, neg-free u8 arithmetic wraps modulo 256", "[elementwise]") {
  TestContext ctx;
  const std::int32_t mn = std::numeric_limits<std::int32_t>::min(), mx = std::numeric_limits<std::int32_t>::max();
  CHECK(i32s(ctx.from_vector<std::int32_t>({mn, mx}) - ctx.from_vector<std::int32_t>({1, -1})) ==
        std::vector<std::int32_t>{mx, mn});
  CHECK(u8s(ctx.from_vector<std::uint8_t>({3, 250}) - ctx.from_vector<std::uint8_t>({5, 250})) ==
        std::vector<std::uint8_t>{254, 0});
  CHECK(u8s(ctx.from_vector<std::uint8_t>({250}) + 10) == std::vector<std::uint8_t>{4});
  CHECK(u8s(forge::sub(1, ctx.from_vector<std::uint8_t>({2}))) == std::vector<std::uint8_t>{255});
}

// Note [Scalar conversion]: libtorch wraps these (u8 == 256 is true there,
// i32 + 2^32 adds nothing); forge refuses a scalar its compute dtype cannot hold.
TEST_CASE("elementwise: an integer op refuses a scalar that does not fit its dtype, naming op, value and dtype",
          "[elementwise]") {
  TestContext ctx;
  const Tensor u = ctx.from_vector<std::uint8_t>({1, 7});
  const Tensor i = ctx.from_vector<std::int32_t>({5, 6});
  Tensor into = ctx.zeros({2}, DType::u8);
  const auto before = ctx.stats().outstanding;
  const std::string message = FORGE_REQUIRE_ERROR(out_of_range, "add", (void)(u + (-1)));
  CHECK(message == "[add] scalar -1 does not fit in u8");
  FORGE_REQUIRE_ERROR(out_of_range, "eq", (void)(u == 256));
  FORGE_REQUIRE_ERROR(out_of_range, "eq", (void)(u == -1));
  FORGE_REQUIRE_ERROR(out_of_range, "mul", (void)(u * 256));
  FORGE_REQUIRE_ERROR(out_of_range, "sub", (void)forge::sub(300, u));
  FORGE_REQUIRE_ERROR(out_of_range, "add", (void)(i + (std::int64_t{1} << 32)));
  FORGE_REQUIRE_ERROR(out_of_range, "lt", (void)(i < (std::int64_t{1} << 40)));
  FORGE_REQUIRE_ERROR(out_of_range, "pow", (void)forge::pow(i, std::int64_t{1} << 40));
  FORGE_REQUIRE_ERROR(out_of_range, "pow", (void)forge::pow(std::int64_t{1} << 33, i));
  FORGE_REQUIRE_ERROR(out_of_range, "add_into", forge::add_into(into, u, 256));
  CHECK(ctx.stats().outstanding == before);
  // Scalars that fit, and float scalars, which make the result float: no refusal.
  CHECK(u8s(u + 255) == std::vector<std::uint8_t>{0, 6});  // the arithmetic itself still wraps
  CHECK(bools(u == 255) == std::vector<bool>{false, false});
  CHECK(i32s(i + std::numeric_limits<std::int32_t>::min()) ==
        std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min() + 5,
                                  std::numeric_limits<std::int32_t>::min() + 6});
  CHECK(f64s(u + 0.5) == std::vector<double>{1.5, 7.5});
  CHECK(f64s(i * 0.5) == std::vector<double>{2.5, 3});
  CHECK(f64s(forge::div(i, std::int64_t{1} << 40)) == std::vector<double>{std::ldexp(5.0, -40), std::ldexp(6.0, -40)});
  // The same in where's scalar (the result is the tensor's integer dtype).
  const Tensor cond = ctx.from_vector<bool>({true, false});
  FORGE_REQUIRE_ERROR(out_of_range, "where", (void)forge::where(cond, i, std::int64_t{1} << 40));
  FORGE_REQUIRE_ERROR(out_of_range, "where", (void)forge::where(cond, u, -1));
  CHECK(i32s(forge::where(cond, i, -3)) == std::vector<std::int32_t>{5, -3});
}

TEST_CASE("elementwise: integer pow (negative exponents give 0 except for 1 and -1)", "[elementwise]") {
  TestContext ctx;
  const Tensor base = ctx.from_vector<std::int32_t>({2, 2, 1, -1, -1, 0, 3, -2, 5});
  const Tensor ex = ctx.from_vector<std::int32_t>({10, -1, -5, -3, -2, 0, 19, 3, 0});
  const Tensor p = forge::pow(base, ex);
  REQUIRE(p.dtype() == DType::i32);
  CHECK(i32s(p) == std::vector<std::int32_t>{1024, 0, 1, -1, 1, 1, 1162261467, -8, 1});
  // Wrapping: 3^21 mod 2^32, and 2^8 in u8.
  CHECK(i32s(forge::pow(ctx.from_vector<std::int32_t>({3}), 21)) ==
        std::vector<std::int32_t>{static_cast<std::int32_t>(static_cast<std::uint32_t>(10460353203ull))});
  CHECK(u8s(forge::pow(ctx.from_vector<std::uint8_t>({2, 3}), 8)) == std::vector<std::uint8_t>{0, 161});
  // Tensor to a negative integer scalar is refused, as in libtorch; a float exponent is fine.
  FORGE_REQUIRE_ERROR(invalid_argument, "pow", (void)forge::pow(base, -1));
  CHECK(forge::pow(base, -1.0).dtype() == DType::f32);
  CHECK(forge::pow(2, ctx.from_vector<std::int64_t>({-1, 3})).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{0, 8});
  // Bool: pow of two bool tensors is refused; bool to an integer power is i64.
  const Tensor t = ctx.from_vector<bool>({true, false});
  FORGE_REQUIRE_ERROR(dtype, "pow", (void)forge::pow(t, t));
  CHECK(forge::pow(t, 2).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
}

TEST_CASE("elementwise: bool arithmetic (or, and, no sub) and bool with scalars", "[elementwise]") {
  TestContext ctx;
  const Tensor a = ctx.from_vector<bool>({false, false, true, true});
  const Tensor b = ctx.from_vector<bool>({false, true, false, true});
  CHECK(bools(forge::maximum(a, b)) == std::vector<bool>{false, true, true, true});
  CHECK(bools(forge::minimum(a, b)) == std::vector<bool>{false, false, false, true});
  FORGE_REQUIRE_ERROR(dtype, "sub", (void)(a - b));
  FORGE_REQUIRE_ERROR(dtype, "sub", (void)(a - true));
  CHECK((a + 1).dtype() == DType::i64);
  CHECK((a + 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1, 2, 2});
  CHECK((a + true).dtype() == DType::boolean);
  CHECK((a * 0.5).dtype() == DType::f32);
  // Subtraction refuses a bool operand of any kind, as libtorch.
  FORGE_REQUIRE_ERROR(dtype, "sub", (void)(a - 1));
  FORGE_REQUIRE_ERROR(dtype, "sub", (void)(ctx.from_vector<std::int32_t>({1, 2, 3, 4}) - a));
  FORGE_REQUIRE_ERROR(dtype, "sub", (void)(ctx.from_vector<std::int32_t>({1}) - true));
  FORGE_REQUIRE_ERROR(dtype, "sub", (void)forge::sub(1, a));
  Tensor o = ctx.zeros({4}, DType::i64);
  FORGE_REQUIRE_ERROR(dtype, "sub_into", forge::sub_into(o, a, 1));
  CHECK((a + ctx.from_vector<std::uint8_t>({1, 1, 1, 1})).dtype() == DType::u8);
  CHECK(bools(a == b) == std::vector<bool>{true, false, false, true});
  CHECK(bools(a < b) == std::vector<bool>{false, true, false, false});
  CHECK(bools(a == 1) == std::vector<bool>{false, false, true, true});
}

TEST_CASE("elementwise: comparisons compare in the promoted dtype", "[elementwise]") {
  TestContext ctx;
  // 2049 is not an f16: compared as f16 it rounds to 2048.
  const Tensor i = ctx.from_vector<std::int32_t>({2049, 2049, -1});
  const Tensor h = ctx.from_vector<float>({2048, 2050, 0}).to(DType::f16);
  CHECK(bools(i == h) == std::vector<bool>{true, false, false});
  CHECK(bools(i < h) == std::vector<bool>{false, true, true});
  // u8 against i32 compares as i32 (200 > -1), not as bytes.
  CHECK(bools(ctx.from_vector<std::uint8_t>({200}) > ctx.from_vector<std::int32_t>({-1})) == std::vector<bool>{true});
  // An int tensor against a float scalar compares in f32.
  CHECK(bools(ctx.from_vector<std::int32_t>({1, 2}) < 1.5) == std::vector<bool>{true, false});
  // An f32 tensor against a double scalar: the scalar is rounded to f32 first.
  CHECK(bools(ctx.from_vector<float>({0.1f}) == 0.1) == std::vector<bool>{true});
  // NaN is unequal to everything, itself included.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor n = ctx.from_vector<double>({nan, 1});
  CHECK(bools(n == n) == std::vector<bool>{false, true});
  CHECK(bools(n != n) == std::vector<bool>{true, false});
  CHECK(bools(n <= 1) == std::vector<bool>{false, true});
  // Results are stored as 0/1 bytes.
  CHECK(u8s(n == n) == std::vector<std::uint8_t>{0, 1});
  // Comparisons write into any out dtype.
  Tensor o = ctx.full({2}, 7, DType::f32);
  forge::lt_into(o, ctx.from_vector<float>({1, 2}), ctx.from_vector<float>({2, 1}));
  CHECK(o.to_vector<float>() == std::vector<float>{1, 0});
}

TEST_CASE("elementwise: maximum and minimum propagate NaN from either side", "[elementwise]") {
  TestContext ctx;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType t : forge_test::kFloatDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor a = ctx.from_vector<double>({nan, 1, nan, -inf, 2}).to(t);
    const Tensor b = ctx.from_vector<double>({1, nan, nan, 0, 2}).to(t);
    const std::vector<double> mx = f64s(forge::maximum(a, b)), mn = f64s(forge::minimum(a, b));
    for (int k = 0; k < 3; ++k) {
      CHECK(std::isnan(mx[static_cast<std::size_t>(k)]));
      CHECK(std::isnan(mn[static_cast<std::size_t>(k)]));
    }
    CHECK(mx[3] == 0);
    CHECK(mn[3] == -inf);
    CHECK(mx[4] == 2);
  }
}

TEST_CASE("elementwise: 16-bit results round once, also when written into a wider out", "[elementwise]") {
  TestContext ctx;
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10 in f16: it rounds to 1, even into f32.
  const Tensor one = ctx.full({1}, 1, DType::f16);
  const Tensor tiny = ctx.full({1}, std::ldexp(1.0, -11), DType::f16);
  Tensor out = ctx.zeros({1}, DType::f32);
  forge::add_into(out, one, tiny);
  CHECK(out.to_vector<float>()[0] == 1.0f);
  CHECK((one + tiny).to_vector<float>()[0] == 1.0f);
  // bf16 with an f32 out: the same.
  const Tensor bone = ctx.full({1}, 1, DType::bf16);
  const Tensor btiny = ctx.full({1}, std::ldexp(1.0, -8), DType::bf16);
  forge::add_into(out, bone, btiny);
  CHECK(out.to_vector<float>()[0] == 1.0f);
  // The scalar of an f16 op is rounded to f16: 0.1 is 0.0999755859375.
  CHECK((ctx.full({1}, 0, DType::f16) + 0.1).to_vector<double>()[0] == 0.0999755859375);
}

TEST_CASE("elementwise: logical ops treat nonzero (and NaN) as true", "[elementwise]") {
  TestContext ctx;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor f = ctx.from_vector<double>({0, -0.0, nan, 2, 0});
  const Tensor i = ctx.from_vector<std::int32_t>({1, 1, 0, 5, 0});
  CHECK(bools(forge::logical_not(f)) == std::vector<bool>{true, true, false, false, true});
  CHECK(bools(f.logical_not()) == std::vector<bool>{true, true, false, false, true});
  CHECK(bools(forge::logical_and(f, i)) == std::vector<bool>{false, false, false, true, false});
  CHECK(bools(forge::logical_or(f, i)) == std::vector<bool>{true, true, true, true, false});
  CHECK(bools(forge::logical_not(ctx.from_vector<std::uint8_t>({0, 255}))) == std::vector<bool>{true, false});
  Gen gen;
  for (DType t : kAllDTypes) {
    INFO(forge::dtype_name(t));
    const Tensor x = make_input(ctx, gen, {3, 4}, t, Layout::transposed);
    const Tensor y = forge::logical_not(x);
    REQUIRE(y.dtype() == DType::boolean);
    check_binary(B::eq, {&x, 0}, {nullptr, 0}, t, y);
    Tensor o = ctx.zeros({3, 4}, DType::i32);
    forge::logical_not_into(o, x);
    check_binary(B::eq, {&x, 0}, {nullptr, 0}, t, o);
  }
}

// ============================================================================
// where and masked_fill
// ============================================================================

namespace {

void check_where(const Tensor& cond, const Side& a, const Side& b, DType dtype, const Tensor& out) {
  Shape shape = cond.shape();
  if (a.tensor) shape = ref_broadcast(shape, a.tensor->shape());
  if (b.tensor) shape = ref_broadcast(shape, b.tensor->shape());
  REQUIRE(out.shape() == shape);
  int mismatches = 0;
  for_each_index(shape, [&](const Index& idx) {
    const bool c = read_broadcast(cond, idx, shape.rank()) != 0;
    const Side& s = c ? a : b;
    LD want = to_dtype(s.tensor ? read_broadcast(*s.tensor, idx, shape.rank()) : s.scalar, dtype);
    if (out.dtype() != dtype) want = to_dtype(want, out.dtype());
    const LD got = read_at(out, idx.data());
    if (!close(got, want, 0) && mismatches++ < 3)
      FAIL_CHECK("at [" << index_str(idx) << "] got " << static_cast<double>(got) << ", expected "
                        << static_cast<double>(want));
  });
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("elementwise: where broadcasts its three operands and promotes a with b", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  const Shape shapes[][3] = {{{4, 1, 3}, {2, 3}, {3}},
                             {{}, {5}, {}},
                             {{2, 0}, {1}, {2, 1}},
                             {{6, 35}, {6, 35}, {6, 35}},
                             {{300, 1}, {1, 257}, {300, 257}}};
  const std::pair<DType, DType> pairs[] = {{DType::f32, DType::f32},    {DType::i32, DType::f16},
                                           {DType::u8, DType::boolean}, {DType::bf16, DType::f64},
                                           {DType::i64, DType::i64},    {DType::boolean, DType::boolean},
                                           {DType::i8, DType::u8},      {DType::i8, DType::i8}};
  for (const auto& s : shapes) {
    for (const auto& [ta, tb] : pairs) {
      INFO(s[0] << " " << s[1] << " " << forge::dtype_name(ta) << " " << s[2] << " " << forge::dtype_name(tb));
      const Tensor cond = make_input(ctx, gen, s[0], DType::boolean, Layout::stepped);
      const Tensor a = make_input(ctx, gen, s[1], ta, Layout::transposed);
      const Tensor b = make_input(ctx, gen, s[2], tb, Layout::offset);
      const DType p = ref_promote(ta, tb);
      const Tensor out = forge::where(cond, a, b);
      CHECK(out.dtype() == p);
      check_where(cond, {&a, 0}, {&b, 0}, p, out);
      const Tensor ws = forge::where(cond, a, 2.5);
      CHECK(ws.dtype() == ref_result_type(ta, 2.5));
      check_where(cond, {&a, 0}, {nullptr, 2.5}, ref_result_type(ta, 2.5), ws);
      if (p != DType::boolean) {
        Tensor into = ctx.full(out.shape(), 5, DType::f64);
        forge::where_into(into, cond, a, b);
        check_where(cond, {&a, 0}, {&b, 0}, p, into);
      }
    }
  }
}

TEST_CASE("elementwise: masked_fill keeps x's dtype and converts the value into it", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  for (DType t : kAllDTypes) {
    for (const Shape& ms : {Shape{5, 4}, Shape{4}, Shape{5, 1}, Shape{}}) {
      INFO(forge::dtype_name(t) << " mask " << ms);
      const Tensor x = make_input(ctx, gen, {5, 4}, t, Layout::transposed);
      const Tensor mask = make_input(ctx, gen, ms, DType::boolean, Layout::packed);
      const Scalar value = forge::is_floating(t) ? Scalar(-1.25) : Scalar(1);
      const Tensor y = forge::masked_fill(x, mask, value);
      CHECK(y.dtype() == t);
      check_where(mask, {nullptr, value.to_double()}, {&x, 0}, t, y);
      check_where(mask, {nullptr, value.to_double()}, {&x, 0}, t, x.masked_fill(mask, value));
      Tensor into = x.clone();
      forge::masked_fill_into(into, into, mask, value);  // in place
      check_where(mask, {nullptr, value.to_double()}, {&x, 0}, t, into);
    }
  }
  // A float value into an integer tensor truncates; one out of range is refused.
  const Tensor i = ctx.from_vector<std::int32_t>({1, 2});
  const Tensor m = ctx.from_vector<bool>({true, false});
  CHECK(i32s(forge::masked_fill(i, m, 2.7)) == std::vector<std::int32_t>{2, 2});
  CHECK(i32s(forge::masked_fill(i, m, -2.7)) == std::vector<std::int32_t>{-2, 2});
  const Tensor u = ctx.from_vector<std::uint8_t>({1, 2});
  const auto before = ctx.stats().outstanding;
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(u, m, 256));
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(u, m, -1));
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(i, m, 3e9));
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(ctx.zeros({2}, DType::f16), m, 1e6));
  CHECK(ctx.stats().outstanding == before);
  // bool takes 0 and 1 only; NaN and inf fit no integer dtype (Note [Scalar conversion]).
  const Tensor b = ctx.from_vector<bool>({false, true});
  const auto with_b = ctx.stats().outstanding;
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(b, m, 2));
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(b, m, 0.5));
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(b, m, -1));
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(i, m, std::nan("")));
  FORGE_REQUIRE_ERROR(out_of_range, "masked_fill", (void)forge::masked_fill(i, m, INFINITY));
  CHECK(ctx.stats().outstanding == with_b);
  CHECK(bools(forge::masked_fill(b, m, 1)) == std::vector<bool>{true, true});
  CHECK(bools(forge::masked_fill(forge::logical_not(b), m, 0.0)) == std::vector<bool>{false, false});
  // inf and NaN fill floats.
  const std::vector<double> f = f64s(forge::masked_fill(ctx.zeros({2}, DType::f16), m, INFINITY));
  CHECK(std::isinf(f[0]));
  CHECK(std::isnan(f64s(forge::masked_fill(ctx.zeros({2}), m, NAN))[0]));
}

// ============================================================================
// bad input
// ============================================================================

TEST_CASE("elementwise: bad input is refused with the op's name and leaks nothing", "[elementwise]") {
  TestContext ctx;
  TestContext other;
  const Tensor a = ctx.zeros({2, 3});
  const Tensor b3 = ctx.zeros({3});
  const Tensor b4 = ctx.zeros({4});
  const Tensor foreign = other.zeros({2, 3});
  const Tensor cond = ctx.zeros({2, 3}, DType::boolean);
  const Tensor undefined;
  const auto before = ctx.stats().outstanding;
  for (const BinaryCase& bc : kBinary) {
    INFO(bc.name);
    const std::string into = std::string(bc.name) + "_into";
    FORGE_REQUIRE_ERROR(invalid_argument, bc.name, (void)bc.fn(undefined, a));
    FORGE_REQUIRE_ERROR(invalid_argument, bc.name, (void)bc.fn(a, undefined));
    FORGE_REQUIRE_ERROR(shape, bc.name, (void)bc.fn(a, b4));
    FORGE_REQUIRE_ERROR(device, bc.name, (void)bc.fn(a, foreign));
    if (bc.scalar) FORGE_REQUIRE_ERROR(invalid_argument, bc.name, (void)bc.scalar(undefined, 1));
    Tensor out = ctx.zeros({2, 3}, gives_bool(bc.op) ? DType::boolean : DType::f32);
    Tensor undefined_out;
    FORGE_REQUIRE_ERROR(invalid_argument, into, bc.into(undefined_out, a, b3));
    FORGE_REQUIRE_ERROR(invalid_argument, into, bc.into(out, undefined, b3));
    FORGE_REQUIRE_ERROR(shape, into, bc.into(out, a, b4));
    Tensor wrong_shape = ctx.zeros({3, 2}, out.dtype());
    FORGE_REQUIRE_ERROR(shape, into, bc.into(wrong_shape, a, b3));
    Tensor foreign_out = other.zeros({2, 3}, out.dtype());
    FORGE_REQUIRE_ERROR(device, into, bc.into(foreign_out, a, b3));
    FORGE_REQUIRE_ERROR(device, into, bc.into(out, a, foreign));
    if (!gives_bool(bc.op)) {
      Tensor int_out = ctx.zeros({2, 3}, DType::i32);  // f32 results do not go into integers
      FORGE_REQUIRE_ERROR(dtype, into, bc.into(int_out, a, b3));
    }
    const Tensor ints = ctx.zeros({2, 3}, DType::i32);
    Tensor bool_out = ctx.zeros({2, 3}, DType::boolean);
    if (!gives_bool(bc.op)) FORGE_REQUIRE_ERROR(dtype, into, bc.into(bool_out, ints, ints));
    Tensor expanded = ctx.zeros({1, 3}, out.dtype()).expand({2, 3});
    FORGE_REQUIRE_ERROR(invalid_argument, into, bc.into(expanded, a, b3));
    // out overlapping an input partially (shifted by one element).
    Tensor storage = ctx.zeros({7}, DType::f32);
    const Tensor in = storage.narrow(0, 0, 6).view({2, 3});
    Tensor shifted = storage.narrow(0, 1, 6).view({2, 3});
    if (!gives_bool(bc.op)) FORGE_REQUIRE_ERROR(invalid_argument, into, bc.into(shifted, in, b3));
  }
  FORGE_REQUIRE_ERROR(invalid_argument, "logical_not", (void)forge::logical_not(undefined));
  Tensor bool_out = ctx.zeros({2, 3}, DType::boolean);
  FORGE_REQUIRE_ERROR(shape, "logical_not_into", forge::logical_not_into(bool_out, b3));
  Tensor f_out = ctx.zeros({2, 3});
  (void)forge::logical_not_into(f_out, a);  // bool into f32 is allowed
  // where
  FORGE_REQUIRE_ERROR(dtype, "where", (void)forge::where(a, a, a));
  FORGE_REQUIRE_ERROR(shape, "where", (void)forge::where(cond, a, b4));
  FORGE_REQUIRE_ERROR(shape, "where", (void)forge::where(cond, b4, 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "where", (void)forge::where(undefined, a, a));
  FORGE_REQUIRE_ERROR(device, "where", (void)forge::where(cond, foreign, a));
  Tensor wout = ctx.zeros({2, 3}, DType::i32);
  FORGE_REQUIRE_ERROR(dtype, "where_into", forge::where_into(wout, cond, a, a));
  Tensor wshape = ctx.zeros({3});
  FORGE_REQUIRE_ERROR(shape, "where_into", forge::where_into(wshape, cond, a, a));
  // masked_fill
  FORGE_REQUIRE_ERROR(dtype, "masked_fill", (void)forge::masked_fill(a, a, 1));
  FORGE_REQUIRE_ERROR(shape, "masked_fill", (void)forge::masked_fill(b3, cond, 1));  // the mask would grow x
  FORGE_REQUIRE_ERROR(device, "masked_fill", (void)forge::masked_fill(foreign, cond, 1));
  Tensor mout = ctx.zeros({2, 3}, DType::boolean);
  FORGE_REQUIRE_ERROR(dtype, "masked_fill_into", forge::masked_fill_into(mout, a, cond, 1));
  CHECK(ctx.stats().outstanding == before + 5);  // the five outs made after the loop, nothing from failed calls
}
