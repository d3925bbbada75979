// The cuda backend's per-element math and launch geometry, checked on the
// host (src/backend/cuda/device_math.h and launch.h are plain C++ that g++
// compiles too): conversions over every 16-bit pattern against core/dtype,
// every binary, unary and activation-gradient op against the cpu kernels
// over edge and random values in each compute dtype, the optimizer updates
// and row formulas against the cpu kernels, and the geometry helpers against
// naive computations. The GPU kernels apply exactly these functions, so a
// machine without a GPU still tests what they compute.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/device_math.h"
#include "backend/cuda/launch.h"
#include "backend/device_runtime.h"
#include "backend/kernels.h"
#include "core/convert.h"
#include "support.h"

namespace {

namespace cu = forge::cuda;
namespace be = forge::backend;
using forge::DType;
using forge_test::kAllDTypes;

const be::Kernels& cpu_table() { return *be::cpu_backend().kernels; }

forge::detail::DeviceRuntime& host_runtime(forge::ExecContext& ctx) {
  return ctx.runtime().device_runtime(forge::Device::cpu());
}

// A packed buffer of n elements of one dtype, written and read through
// core/convert.h (independent of the code under test).
struct Buf {
  DType dtype;
  std::vector<std::byte> bytes;
  Buf(DType t, std::size_t n) : dtype(t), bytes(n * forge::dtype_size(t) + 16) {}
  std::byte* data() { return bytes.data(); }
  void set(std::size_t i, double v) {
    std::byte* p = bytes.data() + i * forge::dtype_size(dtype);
    switch (dtype) {
      case DType::f32:
        put(p, forge::from_double<float>(v));
        break;
      case DType::f64:
        put(p, v);
        break;
      case DType::f16:
        put(p, forge::from_double<forge::Half>(v));
        break;
      case DType::bf16:
        put(p, forge::from_double<forge::BFloat16>(v));
        break;
      case DType::i32:
        put(p, forge::from_double<std::int32_t>(v));
        break;
      case DType::i64:
        put(p, forge::from_double<std::int64_t>(v));
        break;
      case DType::u8:
        put(p, forge::from_double<std::uint8_t>(v));
        break;
      case DType::i8:
        put(p, forge::from_double<std::int8_t>(v));
        break;
      case DType::boolean:
        put(p, forge::from_double<bool>(v));
        break;
    }
  }
  void set_i64(std::size_t i, std::int64_t v) {  // integers beyond 2^53 exactly
    std::byte* p = bytes.data() + i * forge::dtype_size(dtype);
    if (dtype == DType::i64)
      put(p, v);
    else if (dtype == DType::i32)
      put(p, static_cast<std::int32_t>(v));
    else
      set(i, static_cast<double>(v));
  }
  double get(std::size_t i) const {
    const std::byte* p = bytes.data() + i * forge::dtype_size(dtype);
    switch (dtype) {
      case DType::f32:
        return take<float>(p);
      case DType::f64:
        return take<double>(p);
      case DType::f16:
        return static_cast<float>(take<forge::Half>(p));
      case DType::bf16:
        return static_cast<float>(take<forge::BFloat16>(p));
      case DType::i32:
        return take<std::int32_t>(p);
      case DType::i64:
        return static_cast<double>(take<std::int64_t>(p));
      case DType::u8:
        return take<std::uint8_t>(p);
      case DType::i8:
        return take<std::int8_t>(p);
      case DType::boolean:
        return static_cast<double>(take<std::uint8_t>(p));
    }
    return 0;
  }
  template <typename T>
  static void put(std::byte* p, T v) {
    std::memcpy(p, &v, sizeof v);
  }
  template <typename T>
  static T take(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
};

bool same_bytes(const Buf& a, const Buf& b, std::size_t n) {
  return std::memcmp(a.bytes.data(), b.bytes.data(), n * forge::dtype_size(a.dtype)) == 0;
}

// Edge values of a dtype, then `randoms` random ones of its range.
std::vector<double> values_for(DType t, int randoms, std::uint64_t seed) {
  std::vector<double> v;
  if (forge::is_floating(t)) {
    const double denormal = t == DType::f64 ? 4.9e-320 : t == DType::f32 ? 1e-40 : t == DType::f16 ? 3e-7 : 1e-39;
    const double big = t == DType::f64 ? 1.7e308 : t == DType::f16 ? 65504 : 3.3e38;
    v = {0.0,
         -0.0,
         1.0,
         -1.0,
         0.5,
         -2.5,
         3.0,
         1e-3,
         20.0,
         -20.0,
         88.5,
         -88.5,
         1e10,
         -1e10,
         100.0,
         7.0,
         denormal,
         -denormal,
         big,
         -big,
         2.0,
         -3.0,
         -0.5,
         1.5,
         -1e-3,
         std::numeric_limits<double>::infinity(),
         -std::numeric_limits<double>::infinity(),
         std::numeric_limits<double>::quiet_NaN()};
  } else if (t == DType::boolean) {
    v = {0, 1};
  } else if (t == DType::u8) {
    v = {0, 1, 2, 3, 7, 127, 128, 200, 255};
  } else if (t == DType::i8) {
    v = {0, 1, -1, 2, -2, 3, -3, 7, -7, 31, 100, -100, 127, -128};
  } else {
    v = {0, 1, -1, 2, -2, 3, -3, 7, -7, 31, 100, -100, 65535, -65536};
  }
  std::mt19937_64 gen(seed);
  for (int i = 0; i < randoms; ++i) {
    if (forge::is_floating(t)) {
      v.push_back(std::uniform_real_distribution<double>(-8, 8)(gen));
    } else if (t == DType::boolean) {
      v.push_back(static_cast<double>(gen() & 1));
    } else if (t == DType::u8) {
      v.push_back(static_cast<double>(gen() % 256));
    } else if (t == DType::i8) {
      v.push_back(static_cast<double>(static_cast<int>(gen() % 256) - 128));
    } else {
      v.push_back(static_cast<double>(static_cast<std::int64_t>(gen() % 2001) - 1000));
    }
  }
  return v;
}

// Extreme integers set directly (they are not doubles).
void add_int_extremes(Buf& buf, std::size_t& n, DType t) {
  if (t == DType::i32) {
    buf.set_i64(n++, std::numeric_limits<std::int32_t>::min());
    buf.set_i64(n++, std::numeric_limits<std::int32_t>::max());
  } else if (t == DType::i64) {
    buf.set_i64(n++, std::numeric_limits<std::int64_t>::min());
    buf.set_i64(n++, std::numeric_limits<std::int64_t>::max());
  } else if (t == DType::i8) {
    buf.set_i64(n++, std::numeric_limits<std::int8_t>::min());
    buf.set_i64(n++, std::numeric_limits<std::int8_t>::max());
  }
}

// The type the device code computes a dtype in.
template <typename Fn>
void with_compute(DType t, Fn&& fn) {
  switch (t) {
    case DType::f64:
      return fn(double{});
    case DType::i32:
    case DType::i8:
      return fn(std::int32_t{});
    case DType::i64:
      return fn(std::int64_t{});
    case DType::u8:
      return fn(std::uint8_t{});
    case DType::boolean:
      return fn(bool{});
    default:
      return fn(float{});
  }
}

// f32 or f64 (the dtypes of the gradient and optimizer kernels).
template <typename Fn>
void with_float(DType t, Fn&& fn) {
  if (t == DType::f64)
    fn(double{});
  else
    fn(float{});
}

// Results agree: equal (NaN with NaN), or within rel * |want| + abs.
bool close(double got, double want, double rel, double abs) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (got == want) return true;
  if (std::isinf(got) || std::isinf(want)) return false;
  return std::abs(got - want) <= rel * std::abs(want) + abs;
}

// The tolerance of f32-computed math the cpu takes from its vector forms
// (vec_math.h): a few ulp, widened by the 16-bit rounding that can follow.
double vector_rel(DType compute) { return compute == DType::f16 ? 2e-3 : compute == DType::bf16 ? 1.6e-2 : 1e-4; }
double tiny(DType compute) { return compute == DType::f64 ? 1e-300 : 1e-30; }
// The tolerance of the formulas both sides compute alike: the compiler may
// fuse a multiply-add on one side and not the other (a few ulp), which a
// 16-bit rounding can turn into one 16-bit ulp. Integers and bool: exact.
double exact_rel(DType compute) {
  switch (compute) {
    case DType::f32:
      return 1e-6;
    case DType::f64:
      return 1e-14;
    case DType::f16:
      return 1e-3;
    case DType::bf16:
      return 8e-3;
    default:
      return 0;
  }
}

void check_all(const Buf& got, const Buf& want, std::size_t n, double rel, double abs, const std::string& what,
               const std::vector<double>& a, const std::vector<double>* b = nullptr) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!close(got.get(i), want.get(i), rel, abs)) {
      INFO(what << " at " << i << ": a = " << a[i] << (b ? ", b = " + std::to_string((*b)[i]) : std::string())
                << ": device math " << got.get(i) << ", cpu " << want.get(i));
      CHECK(false);
      return;
    }
  }
}

const char* name_of(DType t) { return forge::dtype_name(t).data(); }

}  // namespace

// ---- conversions ----

TEST_CASE("cuda math: 16-bit to f32 matches core/dtype for all 65536 patterns", "[cuda-math]") {
  int bad_f16 = 0, bad_bf16 = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    if (cu::f32_bits(cu::f16_to_float(bits)) != cu::f32_bits(forge::Half::to_float(bits))) ++bad_f16;
    if (cu::f32_bits(cu::bf16_to_float(bits)) != cu::f32_bits(forge::BFloat16::to_float(bits))) ++bad_bf16;
  }
  CHECK(bad_f16 == 0);
  CHECK(bad_bf16 == 0);
}

TEST_CASE("cuda math: f32 to 16-bit rounds as core/dtype (ties, subnormals, overflow, NaN)", "[cuda-math]") {
  // Every 16-bit value, its neighbours in f32 and the midpoints between
  // consecutive 16-bit values (the ties), then random f32 patterns.
  std::vector<float> xs;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    for (const float f : {forge::Half::to_float(static_cast<std::uint16_t>(h)),
                          forge::BFloat16::to_float(static_cast<std::uint16_t>(h))}) {
      xs.push_back(f);
      xs.push_back(std::nextafter(f, 1e30f));
      xs.push_back(std::nextafter(f, -1e30f));
    }
    const float a = forge::Half::to_float(static_cast<std::uint16_t>(h));
    const float b = forge::Half::to_float(static_cast<std::uint16_t>(h + 1));
    if (std::isfinite(a) && std::isfinite(b)) xs.push_back(static_cast<float>((double(a) + double(b)) / 2));
  }
  std::mt19937 gen(7);
  for (int i = 0; i < 1 << 20; ++i) xs.push_back(cu::f32_from_bits(gen()));
  xs.push_back(65520.0f);  // rounds to inf in f16
  xs.push_back(65519.99f);
  int bad_f16 = 0, bad_bf16 = 0;
  for (const float f : xs) {
    if (cu::f16_from_float(f) != forge::Half::from_float(f)) ++bad_f16;
    if (cu::bf16_from_float(f) != forge::BFloat16::from_float(f)) ++bad_bf16;
  }
  CHECK(bad_f16 == 0);
  CHECK(bad_bf16 == 0);
  CHECK(cu::f16_from_float(65520.0f) == 0x7c00u);
}

TEST_CASE("cuda math: load_as/store_as convert every dtype pair as the cpu copy_cast", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  for (const DType from : kAllDTypes) {
    for (const DType to : kAllDTypes) {
      // Values of every range: floats beyond the integers' limits, NaN, ...
      std::vector<double> vals = values_for(DType::f64, 40, 11);
      for (const double v : {3e9, -3e9, 1e19, -1e19, 255.5, 256.0, -0.7, 2147483647.0, -2147483649.0})
        vals.push_back(v);
      const std::size_t n = vals.size() + 2;
      Buf src(from, n), want(to, n), got(to, n);
      for (std::size_t i = 0; i < vals.size(); ++i) src.set(i, vals[i]);
      std::size_t m = vals.size();
      add_int_extremes(src, m, from);
      const forge::Shape shape{static_cast<std::int64_t>(m)};
      cpu_table().copy.copy_cast.fn(dev, shape, {want.data(), to, {1}}, {src.data(), from, {1}});
      for (std::size_t i = 0; i < m; ++i) {
        cu::dispatch_storage(to, [&](auto tag) {
          using To = decltype(tag);
          cu::store_as<To>(got.data(), to, static_cast<std::int64_t>(i),
                           cu::load_as<To>(src.data(), from, static_cast<std::int64_t>(i)));
        });
      }
      INFO(name_of(from) << " -> " << name_of(to));
      CHECK(same_bytes(got, want, m));
    }
  }
}

// ---- binary ----

TEST_CASE("cuda math: every binary op matches the cpu kernel in every compute dtype", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  for (const DType compute : kAllDTypes) {
    const std::vector<double> base = values_for(compute, 12, 3);
    std::vector<double> va, vb;
    for (const double x : base)
      for (const double y : base) va.push_back(x), vb.push_back(y);
    // Operands may be in other dtypes: an f64 operand of an f16 op is read in
    // f32 and the result rounded once (Note [Compute dtype]).
    const DType in_dtype = compute == DType::f16 || compute == DType::bf16 ? DType::f32 : compute;
    const std::size_t n = va.size() + 4;
    Buf a(in_dtype, n), b(in_dtype, n);
    for (std::size_t i = 0; i < va.size(); ++i) a.set(i, va[i]), b.set(i, vb[i]);
    std::size_t m = va.size(), m2 = va.size();
    add_int_extremes(a, m, in_dtype);
    add_int_extremes(a, m, in_dtype);
    for (int k = 0; k < 2; ++k) b.set_i64(m2++, k == 0 ? -1 : 2), b.set_i64(m2++, k == 0 ? 3 : -1);
    while (va.size() < m) va.push_back(a.get(va.size())), vb.push_back(b.get(vb.size()));
    for (int o = 0; o < be::kNumBinary; ++o) {
      const auto op = static_cast<be::Binary>(o);
      bool supported = false;
      with_compute(compute, [&](auto tag) { supported = cu::binary_supported<decltype(tag)>(op); });
      if (!supported) continue;
      for (const DType out_dtype : {be::gives_bool(op) ? DType::boolean : compute, DType::f64}) {
        Buf want(out_dtype, n), got(out_dtype, n);
        const auto count = static_cast<std::int64_t>(m);
        cpu_table().elementwise.binary_flat.fn(dev, op, compute, count, {want.data(), out_dtype, 1},
                                               {a.data(), in_dtype, 1}, {b.data(), in_dtype, 1});
        with_compute(compute, [&](auto tag) {
          using C = decltype(tag);
          for (std::int64_t i = 0; i < count; ++i)
            cu::binary_element<C>(op, compute, got.data(), out_dtype, i, cu::load_as<C>(a.data(), in_dtype, i),
                                  cu::load_as<C>(b.data(), in_dtype, i));
        });
        check_all(
            got, want, m, exact_rel(compute), forge::is_floating(compute) ? tiny(compute) : 0,
            std::string("binary op ") + std::to_string(o) + " in " + name_of(compute) + " to " + name_of(out_dtype), va,
            &vb);
      }
    }
  }
}

// ---- unary ----

namespace {

bool vector_unary(be::Unary op) {
  using U = be::Unary;
  return op == U::exp || op == U::tanh || op == U::sigmoid || op == U::gelu || op == U::gelu_tanh || op == U::silu ||
         op == U::erf;
}

be::UnaryParams params_for(be::Unary op, DType compute, int variant) {
  be::UnaryParams p;
  const auto round = [&](double v) {
    return forge::is_floating(compute) ? double(cu::round_to(compute, float(v))) : v;
  };
  if (op == be::Unary::leaky_relu) p.p0 = round(variant ? 0.2 : 0.01);
  if (op == be::Unary::softplus) p.p0 = round(variant ? 2.0 : 1.0), p.p1 = round(variant ? 3.0 : 20.0);
  if (op == be::Unary::elu) p.p0 = round(variant ? 0.5 : 1.0);
  if (op == be::Unary::clamp) {
    p.has_lo = variant != 2;
    p.has_hi = variant != 1;
    p.lo = round(-2.5), p.hi = round(variant == 3 ? std::nan("") : 7.0);
    p.lo_int = -2, p.hi_int = 7;
  }
  return p;
}

}  // namespace

TEST_CASE("cuda math: every unary op matches the cpu kernel in every compute dtype", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  for (const DType compute : kAllDTypes) {
    std::vector<double> vals = values_for(compute, 200, 5);
    const std::size_t n = vals.size() + 2;
    Buf in(compute, n);
    for (std::size_t i = 0; i < vals.size(); ++i) in.set(i, vals[i]);
    std::size_t m = vals.size();
    add_int_extremes(in, m, compute);
    while (vals.size() < m) vals.push_back(in.get(vals.size()));
    for (int o = 0; o < be::kNumUnary; ++o) {
      const auto op = static_cast<be::Unary>(o);
      bool supported = false;
      with_compute(compute, [&](auto tag) { supported = cu::unary_supported<decltype(tag)>(op); });
      if (!supported) continue;
      for (int variant = 0; variant < 4; ++variant) {
        const be::UnaryParams p = params_for(op, compute, variant);
        Buf want(compute, n), got(compute, n);
        const auto count = static_cast<std::int64_t>(m);
        cpu_table().elementwise.unary_flat.fn(dev, op, compute, p, count, {want.data(), compute, 1},
                                              {in.data(), compute, 1});
        with_compute(compute, [&](auto tag) {
          using C = decltype(tag);
          const cu::UnaryConsts<C> c = cu::unary_consts<C>(p);
          for (std::int64_t i = 0; i < count; ++i)
            cu::store_result<C>(got.data(), compute, i,
                                cu::unary_value<C>(op, cu::load_as<C>(in.data(), compute, i), c), compute);
        });
        const bool approx = vector_unary(op) && compute != DType::f64;
        check_all(got, want, m, approx ? vector_rel(compute) : exact_rel(compute),
                  forge::is_floating(compute) ? tiny(compute) : 0,
                  std::string("unary op ") + std::to_string(o) + " variant " + std::to_string(variant) + " in " +
                      name_of(compute),
                  vals);
      }
    }
  }
}

TEST_CASE("cuda math: activation gradients match the cpu unary_backward_flat", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  for (const DType dtype : {DType::f32, DType::f64}) {
    const std::vector<double> s = values_for(dtype, 300, 9);
    std::vector<double> g = values_for(DType::f64, static_cast<int>(s.size()), 10);
    g.resize(s.size());
    for (std::size_t i = 0; i < g.size(); ++i)
      if (!std::isfinite(g[i])) g[i] = 1.5;  // finite upstream gradients; s brings the edges
    const std::size_t n = s.size();
    Buf bs(dtype, n), bg(dtype, n);
    for (std::size_t i = 0; i < n; ++i) bs.set(i, s[i]), bg.set(i, g[i]);
    for (int o = 0; o <= static_cast<int>(be::UnaryBackward::silu); ++o) {
      const auto op = static_cast<be::UnaryBackward>(o);
      Buf want(dtype, n), got(dtype, n);
      cpu_table().elementwise.unary_backward_flat.fn(dev, op, dtype, static_cast<std::int64_t>(n), want.data(),
                                                     bg.data(), bs.data());
      with_float(dtype, [&](auto tag) {
        using C = decltype(tag);
        for (std::size_t i = 0; i < n; ++i) {
          const auto k = static_cast<std::int64_t>(i);
          cu::store_as<C>(got.data(), dtype, k,
                          cu::unary_backward_value<C>(op, cu::load_as<C>(bg.data(), dtype, k),
                                                      cu::load_as<C>(bs.data(), dtype, k)));
        }
      });
      const bool approx = dtype == DType::f32 && o >= static_cast<int>(be::UnaryBackward::gelu);
      check_all(got, want, n, approx ? 1e-4 : exact_rel(dtype), tiny(dtype),
                std::string("unary backward ") + std::to_string(o) + " in " + name_of(dtype), s);
    }
  }
}

// ---- optimizers ----

TEST_CASE("cuda math: Adam, AdamW and SGD updates match the cpu optimizer kernels", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  constexpr std::size_t n = 257;
  std::mt19937_64 gen(21);
  std::normal_distribution<double> normal;
  for (const DType dtype : {DType::f32, DType::f64}) {
    with_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      std::vector<T> p(n), g(n), m1(n), m2(n);
      for (std::size_t i = 0; i < n; ++i)
        p[i] = T(normal(gen)), g[i] = T(normal(gen)), m1[i] = T(normal(gen)), m2[i] = T(std::abs(normal(gen)));
      for (const bool decoupled : {false, true}) {
        const be::AdamStep s{1e-2, 0.9, 0.999, 1e-8, 0.05, 1 - 0.9 * 0.9 * 0.9, 1 - 0.999 * 0.999 * 0.999, decoupled};
        std::vector<T> cp = p, cm1 = m1, cm2 = m2, dp = p, dm1 = m1, dm2 = m2;
        cpu_table().optim.adam_step.fn(dev, s, dtype, n, cp.data(), g.data(), cm1.data(), cm2.data());
        const cu::AdamConsts<T> c = cu::adam_consts<T>(s);
        for (std::size_t i = 0; i < n; ++i) cu::adam_update<T>(c, dp[i], g[i], dm1[i], dm2[i]);
        for (std::size_t i = 0; i < n; ++i) {
          INFO(name_of(dtype) << (decoupled ? " AdamW " : " Adam ") << i);
          const double rel = exact_rel(dtype);
          REQUIRE(close(dp[i], cp[i], rel, 0));
          REQUIRE(close(dm1[i], cm1[i], rel, 0));
          REQUIRE(close(dm2[i], cm2[i], rel, 0));
        }
      }
      for (const bool nesterov : {false, true}) {
        for (const bool first : {false, true}) {
          for (const double momentum : {0.0, 0.9}) {
            const be::SgdStep s{0.1, momentum, 0.1, 1e-3, nesterov && momentum > 0, first};
            std::vector<T> cp = p, cb = m1, dp = p, db = m1;
            T* cbuf = momentum > 0 ? cb.data() : nullptr;
            cpu_table().optim.sgd_step.fn(dev, s, dtype, n, cp.data(), g.data(), cbuf);
            const cu::SgdConsts<T> c = cu::sgd_consts<T>(s);
            for (std::size_t i = 0; i < n; ++i) cu::sgd_update<T>(c, dp[i], g[i], momentum > 0 ? &db[i] : nullptr);
            INFO(name_of(dtype) << " SGD momentum " << momentum << " nesterov " << nesterov << " first " << first);
            for (std::size_t i = 0; i < n; ++i) {
              REQUIRE(close(dp[i], cp[i], exact_rel(dtype), 0));
              REQUIRE(close(db[i], cb[i], exact_rel(dtype), 0));
            }
          }
        }
      }
      for (const double pw : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
        const double want = cpu_table().optim.norm_power_sum.fn(dev, dtype, n, p.data(), pw);
        double got = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const double t = cu::norm_term(static_cast<double>(p[i]), pw, std::isinf(pw));
          got = std::isinf(pw) ? cu::nan_max(got, t) : got + t;
        }
        INFO("norm power " << pw);
        CHECK(close(got, want, 1e-12, 0));
      }
    });
  }
}

// ---- row formulas of the nn family ----

TEST_CASE("cuda math: softmax, log_softmax, layer_norm and rms_norm rows match the cpu kernels", "[cuda-math]") {
  forge_test::TestContext ctx;
  auto& dev = host_runtime(ctx);
  std::mt19937_64 gen(5);
  std::normal_distribution<double> normal(0, 3);
  for (const std::int64_t n : {1, 7, 64, 1000}) {
    const std::int64_t rows = 3;
    std::vector<double> x(static_cast<std::size_t>(rows * n)), w(static_cast<std::size_t>(n)),
        b(static_cast<std::size_t>(n));
    for (double& v : x) v = normal(gen);
    for (double& v : w) v = normal(gen);
    for (double& v : b) v = normal(gen);
    x[1] = 40;  // a dominant logit
    for (const bool log : {false, true}) {
      std::vector<double> want(x.size());
      cpu_table().nn.softmax.fn(dev, DType::f64, rows, n, 1, reinterpret_cast<const std::byte*>(x.data()),
                                reinterpret_cast<std::byte*>(want.data()), log);
      for (std::int64_t r = 0; r < rows; ++r) {
        const double* xr = x.data() + r * n;
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (std::int64_t j = 0; j < n; ++j) mx = xr[j] > mx ? xr[j] : mx;
        for (std::int64_t j = 0; j < n; ++j) sum += std::exp(xr[j] - mx);
        for (std::int64_t j = 0; j < n; ++j) {
          INFO("softmax n " << n << " log " << log << " row " << r << " col " << j);
          // log_softmax subtracts max + log(sum) from x: the sum's rounding
          // (the cpu adds in vector lanes) shows at the scale of max.
          CHECK(close(cu::softmax_value(xr[j], mx, sum, log), want[static_cast<std::size_t>(r * n + j)], 1e-13,
                      log ? 1e-14 * (1 + std::abs(mx)) : 1e-300));
        }
      }
    }
    for (const bool rms : {false, true}) {
      for (const bool affine : {false, true}) {
        std::vector<double> want(x.size());
        const auto* xb = reinterpret_cast<const std::byte*>(x.data());
        const auto* wb = affine ? reinterpret_cast<const std::byte*>(w.data()) : nullptr;
        const auto* bb = affine ? reinterpret_cast<const std::byte*>(b.data()) : nullptr;
        auto* yb = reinterpret_cast<std::byte*>(want.data());
        if (rms)
          cpu_table().nn.rms_norm.fn(dev, DType::f64, rows, n, xb, wb, 1e-5, yb);
        else
          cpu_table().nn.layer_norm.fn(dev, DType::f64, rows, n, xb, wb, bb, 1e-5, yb);
        for (std::int64_t r = 0; r < rows; ++r) {
          const double* xr = x.data() + r * n;
          double mean = 0, var = 0;
          if (!rms) {
            for (std::int64_t j = 0; j < n; ++j) mean += xr[j];
            mean /= static_cast<double>(n);
          }
          for (std::int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
          var /= static_cast<double>(n);
          const double rstd = cu::norm_rstd(var, 1e-5);
          for (std::int64_t j = 0; j < n; ++j) {
            const double got = cu::norm_value<double>(xr[j], mean, rstd, affine ? w.data() : nullptr,
                                                      affine && !rms ? b.data() : nullptr, j);
            INFO((rms ? "rms_norm" : "layer_norm") << " n " << n << " affine " << affine << " col " << j);
            CHECK(close(got, want[static_cast<std::size_t>(r * n + j)], 1e-12, 1e-12));
          }
        }
      }
    }
  }
}

// ---- geometry ----

TEST_CASE("cuda launch: grid sizes cover n and are capped", "[cuda-math]") {
  CHECK(cu::grid_for(0) == 0);
  CHECK(cu::grid_for(1) == 1);
  CHECK(cu::grid_for(cu::kThreads) == 1);
  CHECK(cu::grid_for(cu::kThreads + 1) == 2);
  CHECK(cu::grid_for(4 * cu::kThreads, cu::kThreads, 4) == 1);
  CHECK(cu::grid_for(std::int64_t{1} << 40) == cu::kMaxBlocks);
  for (std::int64_t n = 1; n < 5000; n += 37) {
    const std::int64_t blocks = cu::grid_for(n);
    CHECK(blocks * cu::kThreads >= n);
    CHECK((blocks - 1) * cu::kThreads < n);
  }
}

TEST_CASE("cuda launch: vector splits cover every element once, with a scalar tail", "[cuda-math]") {
  for (const std::size_t size : {1u, 2u, 4u, 8u}) {
    for (std::int64_t n = 0; n <= 40; ++n) {
      for (const bool aligned : {true, false}) {
        const cu::VectorSplit v = cu::vector_split(n, size, aligned);
        std::vector<int> seen(static_cast<std::size_t>(n), 0);
        for (std::int64_t i = 0; i < v.vectors; ++i)
          for (std::int64_t k = 0; k < v.lanes; ++k) ++seen.at(static_cast<std::size_t>(i * v.lanes + k));
        for (std::int64_t i = v.tail; i < n; ++i) ++seen.at(static_cast<std::size_t>(i));
        INFO("size " << size << " n " << n << " aligned " << aligned);
        CHECK(std::count(seen.begin(), seen.end(), 1) == n);
        CHECK(v.lanes * static_cast<std::int64_t>(size) == (aligned ? 16 : static_cast<std::int64_t>(size)));
        CHECK(n - v.tail < v.lanes + (aligned ? 0 : n + 1));
      }
    }
  }
  alignas(16) std::byte block[64];
  CHECK(cu::aligned16(block));
  CHECK_FALSE(cu::aligned16(block + 4));
  CHECK_FALSE(cu::aligned16(block + 8));
  CHECK(cu::aligned16(block + 32));
}

TEST_CASE("cuda launch: strided offsets match a naive walk, broadcast included", "[cuda-math]") {
  const forge::Shape shape{3, 1, 4, 5};
  const forge::Strides packed = forge::contiguous_strides(shape);
  const forge::Strides transposed{1, 60, 3, 12};  // a permuted layout
  const forge::Strides broadcast{0, 0, 5, 1};     // dim 0 broadcast
  const forge::Strides* const strides[3] = {&packed, &transposed, &broadcast};
  const cu::StridedIndexer<3> ix(shape, strides);
  CHECK(ix.rank == 3);  // the extent-1 dim is dropped
  std::int64_t linear = 0;
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 4; ++j)
      for (std::int64_t k = 0; k < 5; ++k, ++linear) {
        std::int64_t off[3];
        ix.offsets(linear, off);
        INFO("index " << i << ", " << j << ", " << k);
        CHECK(off[0] == linear);
        CHECK(off[1] == i * 1 + j * 3 + k * 12);
        CHECK(off[2] == j * 5 + k);
      }
  const forge::Shape scalar{};
  const forge::Strides none{};
  const forge::Strides* const one[1] = {&none};
  const cu::StridedIndexer<1> ix0(scalar, one);
  std::int64_t off0[1];
  ix0.offsets(0, off0);
  CHECK(off0[0] == 0);
}

TEST_CASE("cuda launch: row splits and chunks cover every element exactly once", "[cuda-math]") {
  for (const std::int64_t rows : {0, 1, 3, 100000}) {
    for (const std::int64_t cols : {1, 31, 32, 33, 1000, 5000}) {
      const cu::RowSplit s = cu::row_split(rows, cols);
      INFO("rows " << rows << " cols " << cols);
      if (rows == 0) {
        CHECK(s.blocks == 0);
        continue;
      }
      CHECK(s.blocks == std::min<std::int64_t>(rows, cu::kMaxBlocks));
      CHECK(s.threads >= 32);
      CHECK(s.threads <= 1024);
      CHECK((s.threads & (s.threads - 1)) == 0);
      CHECK((s.threads >= cols || s.threads == 1024));
      // Rows r = block, block + blocks, ...; columns c = t, t + threads, ...
      std::vector<int> row_seen(static_cast<std::size_t>(rows), 0), col_seen(static_cast<std::size_t>(cols), 0);
      for (std::int64_t b = 0; b < s.blocks; ++b)
        for (std::int64_t r = b; r < rows; r += s.blocks) ++row_seen[static_cast<std::size_t>(r)];
      for (int t = 0; t < s.threads; ++t)
        for (std::int64_t c = t; c < cols; c += s.threads) ++col_seen[static_cast<std::size_t>(c)];
      CHECK(std::count(row_seen.begin(), row_seen.end(), 1) == rows);
      CHECK(std::count(col_seen.begin(), col_seen.end(), 1) == cols);
    }
  }
  for (const std::int64_t n : {0, 1, 32767, 32768, 32769, 100000}) {
    const cu::BlockChunks c = cu::block_chunks(n, 32768);
    std::int64_t covered = 0;
    for (std::int64_t b = 0; b < c.count; ++b) covered += std::min(n, (b + 1) * c.chunk) - b * c.chunk;
    INFO("n " << n);
    CHECK(covered == n);
    CHECK((c.count == 0 || (c.count - 1) * c.chunk < n));
  }
}
