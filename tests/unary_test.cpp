// Unary elementwise ops and clamp against naive loops written here: each
// function evaluated in double with the standard library (or its textbook
// formula), inputs read straight from their buffers through their own strides
// and converted to the compute dtype first, results rounded to the result
// dtype and compared with a tolerance per dtype (exact for the ops that are).
// Covers every dtype, every layout, the block, parallel and streaming paths,
// special values, the _into forms and every error path.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <optional>
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

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

int int_bits(DType t) { return t == DType::i64 ? 64 : t == DType::i32 ? 32 : 8; }

LD wrap(std::uint64_t u, DType t) {
  const int bits = int_bits(t);
  if (bits == 64) return static_cast<LD>(static_cast<std::int64_t>(u));
  const std::uint64_t low = u & ((std::uint64_t{1} << bits) - 1);
  if (t == DType::u8) return static_cast<LD>(low);
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  return static_cast<LD>(static_cast<std::int64_t>(low ^ sign) - static_cast<std::int64_t>(sign));
}
std::uint64_t bits_of(LD v) { return static_cast<std::uint64_t>(static_cast<std::int64_t>(v)); }

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

// ---- the ops and their references ----

enum class Rule { keep, keep_no_bool, square, floating };

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<Tensor&(Tensor&, const Tensor&)> into;
  std::function<double(double)> ref;  // on floating values
  Rule rule;
  bool exact;  // correctly rounded in every dtype (no tolerance)
};

double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double ref_gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double ref_softplus(double x, double beta, double threshold) {
  return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
}
double ref_elu(double x, double alpha) { return x <= 0 ? std::expm1(x) * alpha : x; }
double ref_sign(double x) { return std::isnan(x) ? 0 : (x > 0) - (x < 0); }

#define FORGE_UNARY(name)                         \
  [](const Tensor& x) { return forge::name(x); }, \
      [](Tensor& o, const Tensor& x) -> Tensor& { return forge::name##_into(o, x); }

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", FORGE_UNARY(neg), [](double x) { return -x; }, Rule::keep_no_bool, true},
      {"abs", FORGE_UNARY(abs), [](double x) { return std::fabs(x); }, Rule::keep, true},
      {"sign", FORGE_UNARY(sign), ref_sign, Rule::keep, true},
      {"square", FORGE_UNARY(square), [](double x) { return x * x; }, Rule::square, true},
      {"relu", FORGE_UNARY(relu), [](double x) { return std::isnan(x) ? x
                                                        : x > 0       ? x
                                                                      : 0; }, Rule::keep_no_bool, true},
      {"exp", FORGE_UNARY(exp), [](double x) { return std::exp(x); }, Rule::floating, false},
      {"expm1", FORGE_UNARY(expm1), [](double x) { return std::expm1(x); }, Rule::floating, false},
      {"log", FORGE_UNARY(log), [](double x) { return std::log(x); }, Rule::floating, false},
      {"log1p", FORGE_UNARY(log1p), [](double x) { return std::log1p(x); }, Rule::floating, false},
      {"sqrt", FORGE_UNARY(sqrt), [](double x) { return std::sqrt(x); }, Rule::floating, true},
      {"rsqrt", FORGE_UNARY(rsqrt), [](double x) { return 1 / std::sqrt(x); }, Rule::floating, false},
      {"reciprocal", FORGE_UNARY(reciprocal), [](double x) { return 1 / x; }, Rule::floating, true},
      {"sin", FORGE_UNARY(sin), [](double x) { return std::sin(x); }, Rule::floating, false},
      {"cos", FORGE_UNARY(cos), [](double x) { return std::cos(x); }, Rule::floating, false},
      {"tanh", FORGE_UNARY(tanh), [](double x) { return std::tanh(x); }, Rule::floating, false},
      {"sigmoid", FORGE_UNARY(sigmoid), ref_sigmoid, Rule::floating, false},
      {"gelu", FORGE_UNARY(gelu), ref_gelu, Rule::floating, false},
      {"gelu_tanh", [](const Tensor& x) { return forge::gelu(x, forge::GeluApproximation::tanh); },
       [](Tensor& o, const Tensor& x) -> Tensor& { return forge::gelu_into(o, x, forge::GeluApproximation::tanh); },
       ref_gelu_tanh, Rule::floating, false},
      {"silu", FORGE_UNARY(silu), [](double x) { return x * ref_sigmoid(x); }, Rule::floating, false},
      {"erf", FORGE_UNARY(erf), [](double x) { return std::erf(x); }, Rule::floating, false},
      {"leaky_relu", FORGE_UNARY(leaky_relu), [](double x) { return x > 0 ? x : x * 0.01; }, Rule::floating, false},
      {"leaky_relu_0.2", [](const Tensor& x) { return forge::leaky_relu(x, 0.2); },
       [](Tensor& o, const Tensor& x) -> Tensor& { return forge::leaky_relu_into(o, x, 0.2); },
       [](double x) { return x > 0 ? x : x * 0.2; }, Rule::floating, false},
      {"softplus", FORGE_UNARY(softplus), [](double x) { return ref_softplus(x, 1, 20); }, Rule::floating, false},
      {"softplus_2_3", [](const Tensor& x) { return forge::softplus(x, 2, 3); },
       [](Tensor& o, const Tensor& x) -> Tensor& { return forge::softplus_into(o, x, 2, 3); },
       [](double x) { return ref_softplus(x, 2, 3); }, Rule::floating, false},
      {"elu", FORGE_UNARY(elu), [](double x) { return ref_elu(x, 1); }, Rule::floating, false},
      {"elu_0.5", [](const Tensor& x) { return forge::elu(x, 0.5); },
       [](Tensor& o, const Tensor& x) -> Tensor& { return forge::elu_into(o, x, 0.5); },
       [](double x) { return ref_elu(x, 0.5); }, Rule::floating, false},
  };
  return cases;
}

DType result_of(Rule rule, DType t) {
  switch (rule) {
    case Rule::keep:
    case Rule::keep_no_bool:
      return t;
    case Rule::square:
      return t == DType::boolean ? DType::i64 : t;
    default:
      return forge::is_floating(t) ? t : DType::f32;
  }
}

// The op's value for x (already in the compute dtype c), in c.
LD reference(const UnaryCase& uc, LD x, DType c) {
  if (!forge::is_floating(c)) {  // integer and bool semantics of the dtype-keeping ops
    const std::string name = uc.name;
    if (c == DType::boolean) return x;  // abs, sign
    if (name == "neg") return wrap(0 - bits_of(x), c);
    if (name == "abs") return x < 0 ? wrap(0 - bits_of(x), c) : x;
    if (name == "sign") return (x > 0) - (x < 0);
    if (name == "square") return wrap(bits_of(x) * bits_of(x), c);
    return x > 0 ? x : 0;  // relu
  }
  return to_dtype(uc.ref(static_cast<double>(x)), c);
}

struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-12, 1e-14};
    case DType::f32:
      return {1e-5, 1e-6};
    case DType::f16:
      return {1.5e-3, 1e-4};
    default:
      return {1.2e-2, 1e-3};
  }
}

// Within the tolerance of the coarser of the compute and the output dtype.
bool close(LD got, LD want, bool exact, DType compute, DType out) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want) || exact || !forge::is_floating(compute)) return got == want;
  const Tolerance a = tolerance(compute), b = tolerance(forge::is_floating(out) ? out : compute);
  const Tolerance tol = a.rtol > b.rtol ? a : b;
  return std::fabs(static_cast<double>(got - want)) <= tol.atol + tol.rtol * std::fabs(static_cast<double>(want));
}

// out against f(x) element by element: x converts to the compute dtype, the
// result to out's dtype when an _into wrote into another one.
void check_unary(const std::string& what, const std::function<LD(LD, DType)>& f, bool exact, DType compute,
                 const Tensor& x, const Tensor& out) {
  INFO(what << " " << forge::dtype_name(x.dtype()) << " " << x.shape() << " into " << forge::dtype_name(out.dtype()));
  REQUIRE(out.shape() == x.shape());
  int mismatches = 0;
  for_each_index(x.shape(), [&](const Index& idx) {
    const LD in = to_dtype(read_at(x, idx.data()), compute);
    LD want = f(in, compute);
    if (out.dtype() != compute) want = to_dtype(want, out.dtype());
    const LD got = read_at(out, idx.data());
    if (!close(got, want, exact, compute, out.dtype()) && mismatches++ < 3)
      FAIL_CHECK("at x = " << static_cast<double>(in) << ": got " << static_cast<double>(got) << ", expected "
                           << static_cast<double>(want));
  });
  CHECK(mismatches == 0);
}

void check_case(const UnaryCase& uc, const Tensor& x, const Tensor& out) {
  const DType c = result_of(uc.rule, x.dtype());
  check_unary(
      uc.name, [&](LD v, DType t) { return reference(uc, v, t); }, uc.exact, c, x, out);
}

// The op's name in its errors: the case label up to its parameters.
std::string op_name(const std::string& label) {
  for (const char* op : {"leaky_relu", "softplus", "gelu", "elu"})
    if (label.rfind(op, 0) == 0) return op;
  return label;
}

bool takes(const UnaryCase& uc, DType t) { return !(uc.rule == Rule::keep_no_bool && t == DType::boolean); }

// ---- inputs ----

struct Gen {
  std::mt19937_64 rng{77};
  LD value(DType t) {
    if (t == DType::boolean) return static_cast<LD>(rng() & 1u);
    if (forge::is_floating(t)) return to_dtype(std::uniform_real_distribution<double>(-8, 8)(rng), t);
    if (t == DType::u8) return static_cast<LD>(rng() % 256);
    if (rng() % 16 == 0) return wrap(rng(), t);  // the extremes, for wrapping
    return static_cast<LD>(static_cast<int>(rng() % 201) - 100);
  }
};

Tensor from_values(forge::ExecContext& ctx, const std::vector<LD>& xs, const Shape& shape, DType t) {
  return forge::dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> v;
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

Tensor make_input(forge::ExecContext& ctx, Gen& gen, const Shape& shape, DType t, Layout layout) {
  auto fill = [&](const Shape& s) {
    std::vector<LD> xs(static_cast<std::size_t>(s.numel()));
    for (auto& x : xs) x = gen.value(t);
    return from_values(ctx, xs, s, t);
  };
  return forge_test::reference::view_of(shape, layout, fill);
}

}  // namespace

TEST_CASE("unary: every op matches the reference in every dtype and layout", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  const Shape shapes[] = {{}, {7}, {3, 5}, {2, 0, 3}, {4, 1, 6}, {2, 3, 4, 5}, {40, 37}};
  const Layout layouts[] = {Layout::packed, Layout::transposed, Layout::stepped, Layout::expanded, Layout::offset};
  for (const UnaryCase& uc : unary_cases()) {
    for (DType t : kAllDTypes) {
      if (!takes(uc, t)) continue;
      for (const Shape& s : shapes) {
        for (Layout l : layouts) {
          INFO("layout " << static_cast<int>(l));
          const Tensor x = make_input(ctx, gen, s, t, l);
          const Tensor y = uc.fn(x);
          CHECK(y.dtype() == result_of(uc.rule, t));
          CHECK(y.is_contiguous());
          check_case(uc, x, y);
        }
      }
    }
  }
}

TEST_CASE("unary: special values (zeros, infinities, NaN, overflow) in every float dtype", "[elementwise]") {
  TestContext ctx;
  const std::vector<double> specials = {0.0,    -0.0,  kInf, -kInf, kNaN, 1e-30, -1e-30, 88.5,  89.0, -87.0, -104.0,
                                        -200.0, 200.0, 3.9,  -3.9,  4.5,  -6.0,  8.5,    -20.0, 20.5, 1e-4,  -5e-4};
  for (const UnaryCase& uc : unary_cases()) {
    for (DType t : forge_test::kFloatDTypes) {
      const Tensor x = ctx.from_vector<double>(specials).to(t);
      check_case(uc, x, uc.fn(x));
    }
  }
}

TEST_CASE("unary: large inputs take the parallel and streaming paths", "[elementwise]") {
  TestContext ctx;
  REQUIRE(ctx.threads() == 2);
  Gen gen;
  const std::int64_t big = (std::int64_t{8} << 20) / 4 + 13;
  const Tensor x = make_input(ctx, gen, {big}, DType::f32, Layout::offset);
  for (const char* name : {"gelu", "exp", "sigmoid", "neg"}) {
    for (const UnaryCase& uc : unary_cases())
      if (uc.name == std::string(name)) check_case(uc, x, uc.fn(x));
  }
  const Tensor h = make_input(ctx, gen, {700, 300}, DType::bf16, Layout::transposed);
  for (const UnaryCase& uc : unary_cases())
    if (uc.name == std::string("tanh")) check_case(uc, h, uc.fn(h));
}

TEST_CASE("unary: _into writes into out's dtype, in place or into a view", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  const std::pair<DType, DType> pairs[] = {{DType::f16, DType::f32},     {DType::i32, DType::f64},
                                           {DType::f32, DType::f32},     {DType::i32, DType::i64},
                                           {DType::boolean, DType::f32}, {DType::bf16, DType::f16}};
  for (const UnaryCase& uc : unary_cases()) {
    for (const auto& [t, to] : pairs) {
      const DType result = result_of(uc.rule, t);
      if (!takes(uc, t) || (forge::is_floating(result) && !forge::is_floating(to))) continue;
      const Tensor x = make_input(ctx, gen, {5, 6}, t, Layout::transposed);
      Tensor out = ctx.full({5, 6}, 3, to);
      const std::uint32_t v = out.version();
      Tensor& r = uc.into(out, x);
      CHECK(&r == &out);
      CHECK(out.version() != v);
      check_case(uc, x, out);
      Tensor base = ctx.zeros({6, 5}, to);
      Tensor view = base.t();
      uc.into(view, x);
      check_case(uc, x, view);
    }
    if (takes(uc, DType::f32)) {  // exactly in place
      Tensor y = make_input(ctx, gen, {9, 4}, DType::f32, Layout::packed);
      const Tensor before = y.clone();
      uc.into(y, y);
      check_case(uc, before, y);
    }
  }
}

TEST_CASE("unary: integer and bool semantics (wrapping, sign, square of bool)", "[elementwise]") {
  TestContext ctx;
  const std::int32_t mn = std::numeric_limits<std::int32_t>::min();
  const Tensor i = ctx.from_vector<std::int32_t>({mn, -5, 0, 7});
  CHECK(forge::neg(i).to_vector<std::int32_t>() == std::vector<std::int32_t>{mn, 5, 0, -7});
  CHECK(forge::abs(i).to_vector<std::int32_t>() == std::vector<std::int32_t>{mn, 5, 0, 7});
  CHECK(forge::sign(i).to_vector<std::int32_t>() == std::vector<std::int32_t>{-1, -1, 0, 1});
  CHECK(forge::square(ctx.from_vector<std::int32_t>({46341, -3})).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{-2147479015, 9});
  const Tensor u = ctx.from_vector<std::uint8_t>({0, 1, 200});
  CHECK(forge::neg(u).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 255, 56});
  CHECK(forge::abs(u).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1, 200});
  CHECK(forge::sign(u).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1, 1});
  CHECK((-u).dtype() == DType::u8);
  const Tensor b = ctx.from_vector<bool>({true, false});
  CHECK(forge::abs(b).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(forge::sign(b).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(forge::square(b).dtype() == DType::i64);
  CHECK(forge::square(b).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  FORGE_REQUIRE_ERROR(dtype, "neg", (void)forge::neg(b));
  FORGE_REQUIRE_ERROR(dtype, "neg", (void)(-b));
  FORGE_REQUIRE_ERROR(dtype, "relu", (void)forge::relu(b));
  // Float functions of integers and bool compute in f32.
  CHECK(forge::exp(b).dtype() == DType::f32);
  CHECK(forge::sqrt(ctx.from_vector<std::int64_t>({4, 2})).to_vector<float>() ==
        std::vector<float>{2.0f, std::sqrt(2.0f)});
  CHECK(forge::reciprocal(ctx.from_vector<std::int32_t>({0, 4})).to_vector<float>() ==
        std::vector<float>{std::numeric_limits<float>::infinity(), 0.25f});
  CHECK(forge::sign(ctx.from_vector<double>({kNaN, -0.0, -2})).to_vector<double>() == std::vector<double>{0, 0, -1});
}

TEST_CASE("unary: Tensor methods call the free functions", "[elementwise]") {
  TestContext ctx;
  const Tensor x = ctx.from_vector<float>({-1.5f, 0.25f, 2.0f});
  auto same = [](const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); };
  CHECK(same(x.neg(), forge::neg(x)));
  CHECK(same(x.abs(), forge::abs(x)));
  CHECK(same(x.sign(), forge::sign(x)));
  CHECK(same(x.exp(), forge::exp(x)));
  CHECK(same(x.abs().log(), forge::log(forge::abs(x))));
  CHECK(same(x.abs().sqrt(), forge::sqrt(forge::abs(x))));
  CHECK(same(x.abs().rsqrt(), forge::rsqrt(forge::abs(x))));
  CHECK(same(x.square(), forge::square(x)));
  CHECK(same(x.reciprocal(), forge::reciprocal(x)));
  CHECK(same(x.sin(), forge::sin(x)));
  CHECK(same(x.cos(), forge::cos(x)));
  CHECK(same(x.tanh(), forge::tanh(x)));
  CHECK(same(x.sigmoid(), forge::sigmoid(x)));
  CHECK(same(x.relu(), forge::relu(x)));
  CHECK(same(x.clamp(0, 1), forge::clamp(x, 0, 1)));
  CHECK(x.relu().to_vector<float>() == std::vector<float>{0, 0.25f, 2});
}

// ---- clamp ----

namespace {
DType ref_result_type(DType t, const Scalar& s) {
  if (s.is_floating() && !forge::is_floating(t)) return DType::f32;
  if (s.is_integral() && t == DType::boolean) return DType::i64;
  return t;
}
LD scalar_value(const Scalar& s) {
  return s.is_floating() ? static_cast<LD>(s.to_double()) : static_cast<LD>(s.to_int());
}
}  // namespace

TEST_CASE("clamp: bounds of any kind, result_type over x and the bounds, NaN propagates", "[elementwise]") {
  TestContext ctx;
  Gen gen;
  const std::optional<Scalar> bounds[][2] = {{Scalar(-2), Scalar(3)},      {Scalar(-1.5), std::nullopt},
                                             {std::nullopt, Scalar(2.25)}, {Scalar(0), Scalar(100)},
                                             {Scalar(4), Scalar(-4)},      {Scalar(-3), Scalar(2.5)}};
  for (DType t : kAllDTypes) {
    for (const auto& [lo, hi] : bounds) {
      DType c = t;
      if (lo) c = ref_result_type(c, *lo);
      if (hi) c = ref_result_type(c, *hi);
      INFO(forge::dtype_name(t) << " lo " << (lo ? lo->to_double() : kNaN) << " hi " << (hi ? hi->to_double() : kNaN));
      const Tensor x = make_input(ctx, gen, {6, 5}, t, Layout::transposed);
      if (c == DType::boolean) {
        FORGE_REQUIRE_ERROR(dtype, "clamp", (void)forge::clamp(x, lo, hi));
        continue;
      }
      if (c == DType::u8 && ((lo && scalar_value(*lo) < 0) || (hi && scalar_value(*hi) < 0))) {
        FORGE_REQUIRE_ERROR(out_of_range, "clamp", (void)forge::clamp(x, lo, hi));
        continue;
      }
      auto f = [&](LD v, DType dt) -> LD {
        if (lo) {
          const LD l = to_dtype(scalar_value(*lo), dt);
          v = (std::isnan(v) || std::isnan(l)) ? kNaN : std::max(v, l);
        }
        if (hi) {
          const LD h = to_dtype(scalar_value(*hi), dt);
          v = (std::isnan(v) || std::isnan(h)) ? kNaN : std::min(v, h);
        }
        return v;
      };
      const Tensor y = forge::clamp(x, lo, hi);
      CHECK(y.dtype() == c);
      check_unary("clamp", f, true, c, x, y);
      Tensor out = ctx.zeros({6, 5}, DType::f64);
      forge::clamp_into(out, x, lo, hi);
      check_unary("clamp_into", f, true, c, x, out);
    }
  }
  const Tensor n = ctx.from_vector<double>({kNaN, 5, -5});
  const std::vector<double> v = forge::clamp(n, -1, 1).to_vector<double>();
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 1);
  CHECK(v[2] == -1);
  CHECK(std::isnan(forge::clamp(n, kNaN, std::nullopt).to_vector<double>()[1]));
  // A bound is rounded to f16 for an f16 tensor: 0.1 becomes 0.0999755859375.
  CHECK(forge::clamp(ctx.full({1}, 1, DType::f16), std::nullopt, 0.1).to_vector<double>()[0] == 0.0999755859375);
  CHECK(forge::clamp(ctx.from_vector<std::int32_t>({1, 5}), 0, 3.5).to_vector<float>() == std::vector<float>{1, 3.5f});
}

// ---- bad input ----

TEST_CASE("unary: bad input is refused with the op's name and leaks nothing", "[elementwise]") {
  TestContext ctx;
  TestContext other;
  const Tensor x = ctx.zeros({2, 3});
  const Tensor ints = ctx.zeros({2, 3}, DType::i32);
  const Tensor foreign = other.zeros({2, 3});
  const Tensor undefined;
  Tensor out_shape = ctx.zeros({3, 2});
  Tensor out_int = ctx.zeros({2, 3}, DType::i32);
  Tensor out_bool = ctx.zeros({2, 3}, DType::boolean);
  Tensor out_foreign = other.zeros({2, 3});
  Tensor expanded = ctx.zeros({1, 3}).expand({2, 3});
  Tensor storage = ctx.zeros({7});
  const Tensor in = storage.narrow(0, 0, 6).view({2, 3});
  Tensor shifted = storage.narrow(0, 1, 6).view({2, 3});
  Tensor undefined_out;
  Tensor out_ok = ctx.zeros({2, 3});
  const auto before = ctx.stats().outstanding;
  for (const UnaryCase& uc : unary_cases()) {
    INFO(uc.name);
    const std::string name = op_name(uc.name);
    const std::string into = name + "_into";
    FORGE_REQUIRE_ERROR(invalid_argument, name, (void)uc.fn(undefined));
    FORGE_REQUIRE_ERROR(invalid_argument, into, uc.into(undefined_out, x));
    FORGE_REQUIRE_ERROR(invalid_argument, into, uc.into(out_ok, undefined));
    FORGE_REQUIRE_ERROR(shape, into, uc.into(out_shape, x));
    FORGE_REQUIRE_ERROR(device, into, uc.into(out_foreign, x));
    FORGE_REQUIRE_ERROR(device, into, uc.into(out_int, foreign.to(DType::i32)));
    FORGE_REQUIRE_ERROR(dtype, into, uc.into(out_bool, ints));  // no i32 or f32 result goes into bool
    if (uc.rule == Rule::floating) FORGE_REQUIRE_ERROR(dtype, into, uc.into(out_int, ints));
    FORGE_REQUIRE_ERROR(invalid_argument, into, uc.into(expanded, x));
    FORGE_REQUIRE_ERROR(invalid_argument, into, uc.into(shifted, in));
  }
  FORGE_REQUIRE_ERROR(invalid_argument, "clamp", (void)forge::clamp(x, std::nullopt, std::nullopt));
  FORGE_REQUIRE_ERROR(invalid_argument, "clamp", (void)forge::clamp(undefined, 0, 1));
  FORGE_REQUIRE_ERROR(out_of_range, "clamp", (void)forge::clamp(ctx.zeros({2}, DType::u8), 0, 300));
  FORGE_REQUIRE_ERROR(out_of_range, "clamp", (void)forge::clamp(ints, std::int64_t{1} << 40, std::nullopt));
  FORGE_REQUIRE_ERROR(dtype, "clamp", (void)forge::clamp(ctx.zeros({2}, DType::boolean), false, true));
  FORGE_REQUIRE_ERROR(dtype, "clamp_into", forge::clamp_into(out_int, x, 0, 1));
  FORGE_REQUIRE_ERROR(shape, "clamp_into", forge::clamp_into(out_shape, x, 0, 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "clamp_into", forge::clamp_into(out_shape, x, std::nullopt, std::nullopt));
  FORGE_REQUIRE_ERROR(dtype, "relu_into", forge::relu_into(out_bool, ctx.zeros({2, 3}, DType::boolean)));
  FORGE_REQUIRE_ERROR(dtype, "neg_into", forge::neg_into(out_bool, ctx.zeros({2, 3}, DType::boolean)));
  CHECK(ctx.stats().outstanding == before);
}

// ---- Note [Activation tails]: f32 and f64 activations and their gradients
// against long double over the whole range ----
namespace {

namespace autograd = forge::autograd;

// Every f32 exponent with a spread of mantissas, both signs, subnormals,
// +-inf and NaN, the tanh saturation region 6.5..10.5 densely (every 64th
// float: steps of 3e-5 to 6e-5), the gelu tails to -15 and the sigmoid and
// silu subnormal tails to -110: about 200,000 inputs.
std::vector<float> sweep_inputs() {
  std::vector<float> xs;
  const std::uint32_t mantissas[] = {0, 1, 0x123457, 0x2aaaaa, 0x400000, 0x555555, 0x6b3a11, 0x7fffff};
  for (std::uint32_t sign = 0; sign < 2; ++sign)
    for (std::uint32_t e = 0; e < 255; ++e)
      for (const std::uint32_t m : mantissas) {
        const std::uint32_t bits = (sign << 31) | (e << 23) | m;
        float f;
        std::memcpy(&f, &bits, sizeof f);
        xs.push_back(f);
      }
  xs.insert(xs.end(), {INFINITY, -INFINITY, NAN, -8.0f, -5.0f});
  for (float f = 6.5f; f < 10.5f; f = std::nextafter(f, 11.0f)) {
    for (int skip = 0; skip < 63; ++skip) f = std::nextafter(f, 11.0f);  // every 64th float
    xs.push_back(f);
    xs.push_back(-f);
  }
  for (float f = 0.5f; f < 15.0f; f *= 1.0005f) xs.insert(xs.end(), {f, -f});
  for (float f = 80.0f; f < 110.0f; f += 0.01f) xs.push_back(-f);
  return xs;
}

LD logistic(LD z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }
constexpr LD kBeta2 = 1.59576912160573071175978423973752747L;  // 2 sqrt(2 / pi)
LD gate_z(LD x) { return kBeta2 * (x + 0.044715L * x * x * x); }
LD normal_cdf(LD x) { return std::erfc(-x / std::sqrt(2.0L)) / 2; }
LD normal_pdf(LD x) { return std::exp(-x * x / 2) * 0.398942280401432677939946059934381868L; }

struct Activation {
  const char* name;
  Tensor (*op)(const Tensor&);
  LD (*f)(LD);         // the function
  LD (*df)(LD);        // its derivative
  LD (*df_terms)(LD);  // the magnitude of the terms the derivative adds
};

const Activation kActivations[] = {
    {"tanh", [](const Tensor& x) { return forge::tanh(x); }, [](LD x) { return std::tanh(x); },
     [](LD x) { return 1 - std::tanh(x) * std::tanh(x); }, [](LD) { return LD(0); }},
    {"sigmoid", [](const Tensor& x) { return forge::sigmoid(x); }, logistic,
     [](LD x) { return logistic(x) * logistic(-x); }, [](LD) { return LD(0); }},
    {"silu", [](const Tensor& x) { return forge::silu(x); }, [](LD x) { return x * logistic(x); },
     [](LD x) { return logistic(x) + x * logistic(x) * logistic(-x); },
     [](LD x) { return logistic(x) + std::fabs(x * logistic(x) * logistic(-x)); }},
    {"gelu", [](const Tensor& x) { return forge::gelu(x); }, [](LD x) { return x * normal_cdf(x); },
     [](LD x) { return normal_cdf(x) + x * normal_pdf(x); },
     [](LD x) { return normal_cdf(x) + std::fabs(x * normal_pdf(x)); }},
    {"gelu_tanh", [](const Tensor& x) { return forge::gelu(x, forge::GeluApproximation::tanh); },
     [](LD x) { return x * logistic(gate_z(x)); },
     [](LD x) {
       const LD z = gate_z(x);
       return logistic(z) + x * logistic(z) * logistic(-z) * kBeta2 * (1 + 3 * 0.044715L * x * x);
     },
     [](LD x) {
       const LD z = gate_z(x);
       return logistic(z) + std::fabs(x * logistic(z) * logistic(-z) * kBeta2 * (1 + 3 * 0.044715L * x * x));
     }},
};

template <typename T>
LD ulp_at(LD v) {
  const T a = static_cast<T>(std::fabs(v));
  if (a < std::numeric_limits<T>::min()) return std::numeric_limits<T>::denorm_min();
  int e;
  std::frexp(a, &e);
  return std::ldexp(LD(1), e - std::numeric_limits<T>::digits);
}

// |x f'(x)|: the error that rounding x (or an intermediate of its size) by
// one unit causes, relative to the unit.
LD condition(LD (*f)(LD), LD x) {
  if (!std::isfinite(x) || x == 0) return 0;
  const LD h = std::fabs(x) * 1e-7L;
  return std::fabs(x * (f(x + h) - f(x - h)) / (2 * h));
}

// The bound every activation meets: kUlps units of the result, plus kSteep
// units of x f'(x) (rounding where the function is steep), plus the terms a
// derivative adds (cancellation near its zero), plus |x|^3 times the
// dtype's smallest normal, below which results may flush to 0 or lose bits
// (vec::exp_decay flushes: subnormal lanes cost several times a normal
// one; the gradients carry up to x^2 more). tanh's rational form is within
// 5 ulp.
constexpr LD kUlps = 4, kTanhUlps = 5, kSteep = 2;

template <typename T>
struct Misses {
  std::int64_t count = 0;
  std::string first;
  void check(const char* what, LD x, T got, LD ref, LD scale, LD ulps) {
    const bool ref_nan = std::isnan(ref), got_nan = std::isnan(got);
    bool ok;
    if (ref_nan || got_nan) {
      ok = ref_nan == got_nan;
    } else if (std::isinf(ref) || std::isinf(got)) {
      ok = static_cast<T>(ref) == got;
    } else {
      const LD unit = ulp_at<T>(1) / 2;  // the rounding unit of T
      const LD big = std::max<LD>(1, std::fabs(x));
      const LD flush = big * big * big * std::numeric_limits<T>::min();
      const LD allow = ulps * ulp_at<T>(ref) + kSteep * unit * scale + flush;
      ok = std::fabs(static_cast<LD>(got) - ref) <= allow;
    }
    if (ok) return;
    if (count++ == 0)
      first = forge::detail::cat(std::setprecision(17), what, "(", static_cast<double>(x),
                                 ") = ", static_cast<double>(got), ", want ", static_cast<double>(ref));
  }
};

template <typename T>
void check_activation(TestContext& ctx, const Activation& a, const std::vector<T>& xs) {
  INFO(a.name << " in " << (sizeof(T) == 4 ? "f32" : "f64"));
  const Tensor x = ctx.from_vector<T>(xs).requires_grad_();
  const Tensor y = a.op(x);
  const Tensor dx = autograd::grad({y}, {x}, {.grad_outputs = {ctx.ones(y.shape(), y.dtype())}})[0];
  const std::vector<T> ys = y.to_vector<T>(), ds = dx.to_vector<T>();
  const bool from_output = std::string(a.name) == "tanh" || std::string(a.name) == "sigmoid";
  const LD ulps = std::string(a.name) == "tanh" ? kTanhUlps : kUlps;
  Misses<T> value, grad;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const LD xi = xs[i];
    value.check(a.name, xi, ys[i], a.f(xi), condition(a.f, xi), ulps);
    if (from_output) {  // tanh and sigmoid differentiate from their rounded output, as libtorch does
      const LD yi = ys[i];
      const bool tanh = std::string(a.name) == "tanh";  // 1 - y^2 rounds y^2 first
      grad.check("d", xi, ds[i], tanh ? 1 - yi * yi : yi * (1 - yi), tanh ? yi * yi : 0, kUlps);
    } else {
      grad.check("d", xi, ds[i], a.df(xi), condition(a.df, xi) + a.df_terms(xi), kUlps);
    }
  }
  INFO("first value miss: " << value.first);
  CHECK(value.count == 0);
  INFO("first gradient miss: " << grad.first);
  CHECK(grad.count == 0);
}

}  // namespace

TEST_CASE("unary: tanh, sigmoid, silu and both gelus and their gradients track long double over the f32 range",
          "[elementwise]") {
  TestContext ctx;
  const std::vector<float> xs = sweep_inputs();
  std::vector<double> xd(xs.begin(), xs.end());
  for (const Activation& a : kActivations) {
    check_activation<float>(ctx, a, xs);   // the 16-lane vector forms
    check_activation<double>(ctx, a, xd);  // the scalar forms
  }
  // The strided (scalar) f32 path agrees with the vector one bit for bit where both are exact
  // enough: spot-check the tails through a broadcast input.
  for (const float v : {-5.0f, -8.0f, -12.0f, -95.0f, 8.5f}) {
    for (const Activation& a : kActivations) {
      INFO(a.name << "(" << v << ") broadcast");
      const LD want = a.f(v);
      const float got = a.op(ctx.full({}, v).expand({3})).to_vector<float>()[1];
      CHECK(std::fabs(static_cast<LD>(got) - want) <= kTanhUlps * ulp_at<float>(want) +
                                                          kSteep * ulp_at<float>(1) * condition(a.f, v) +
                                                          std::fabs(v) * std::numeric_limits<float>::min());
    }
  }
}

TEST_CASE("unary: the activation tails the issue names are no longer rounded to 0", "[elementwise]") {
  TestContext ctx;
  // tanh(-8) is -0.999999762 in f32 (it was -1), and gelu_tanh's gradient at -5
  // is -1.546e-6 (long double; libtorch's f32 gives -2.0e-6 through 1 + tanh; it was 0).
  CHECK(forge::tanh(ctx.full({16}, -8.0)).to_vector<float>()[0] == -0.999999762f);
  Tensor x = ctx.full({16}, -5.0).requires_grad_();
  const Tensor y = forge::gelu(x, forge::GeluApproximation::tanh);
  const float d = autograd::grad({y}, {x}, {.grad_outputs = {ctx.ones(y.shape(), y.dtype())}})[0].to_vector<float>()[0];
  CHECK(std::fabs(d - -1.54636199e-06f) <= 4e-12f);
  CHECK(y.to_vector<float>()[0] < 0);                                  // -2.29e-7, not 0
  CHECK(forge::gelu(ctx.full({16}, -6.0)).to_vector<float>()[0] < 0);  // erf form: -5.9e-9
}
