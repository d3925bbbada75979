// Unary elementwise kernels. f32 exp, tanh, erf, sigmoid, silu and both gelus
// run on 16-lane vectors (vec_math.h); the rest are scalar loops the compiler
// vectorizes where it can. 16-bit floats compute through f32 blocks (Note
// [Compute dtype] in backend/kernels/elementwise.h).

#include <array>
#include <cmath>
#include <type_traits>
#include <utility>

#include "backend/cpu/elementwise_kernels.h"
#include "backend/cpu/vec_math.h"

namespace forge::cpu {
namespace {

using ew::BlockInput;
using ew::direct_input;

constexpr bool float_only(Unary op) noexcept { return op >= Unary::exp; }

template <Unary Op, typename C>
inline constexpr bool kSupported = float_only(Op) ? std::is_floating_point_v<C>
                                                  : !(std::is_same_v<C, bool> && Op != Unary::abs && Op != Unary::sign);

// The parameters in the compute type, converted once per run.
template <typename C>
struct Prepared {
  C p0, p1, lo, hi;
  bool has_lo, has_hi;
  explicit Prepared(const UnaryParams& p) noexcept
      : p0(static_cast<C>(p.p0)),
        p1(static_cast<C>(p.p1)),
        lo(std::is_floating_point_v<C> ? static_cast<C>(p.lo) : static_cast<C>(p.lo_int)),
        hi(std::is_floating_point_v<C> ? static_cast<C>(p.hi) : static_cast<C>(p.hi_int)),
        has_lo(p.has_lo),
        has_hi(p.has_hi) {}
};

template <Unary Op, typename C>
inline C apply(C x, const Prepared<C>& p) noexcept {
  constexpr bool kFloat = std::is_floating_point_v<C>;
  if constexpr (Op == Unary::neg) {
    if constexpr (kFloat)
      return -x;
    else
      return ew::wrap_sub(C(0), x);
  } else if constexpr (Op == Unary::abs) {
    if constexpr (kFloat)
      return std::abs(x);
    else if constexpr (std::is_signed_v<C>)
      return x < 0 ? ew::wrap_sub(C(0), x) : x;
    else
      return x;
  } else if constexpr (Op == Unary::sign) {
    if constexpr (std::is_same_v<C, bool>)
      return x;
    else
      return static_cast<C>((C(0) < x) - (x < C(0)));  // NaN gives 0, as libtorch
  } else if constexpr (Op == Unary::square) {
    if constexpr (kFloat)
      return x * x;
    else
      return ew::wrap_mul(x, x);
  } else if constexpr (Op == Unary::relu) {
    return !(x <= C(0)) ? x : C(0);  // keeps NaN
  } else if constexpr (Op == Unary::clamp) {
    // NaN in x or in a bound propagates, as libtorch's min(max(x, lo), hi).
    if (p.has_lo) x = (x < p.lo || p.lo != p.lo) ? p.lo : x;
    if (p.has_hi) x = (p.hi < x || p.hi != p.hi) ? p.hi : x;
    return x;
  } else if constexpr (Op == Unary::exp) {
    return std::exp(x);
  } else if constexpr (Op == Unary::expm1) {
    return std::expm1(x);
  } else if constexpr (Op == Unary::log) {
    return std::log(x);
  } else if constexpr (Op == Unary::log1p) {
    return std::log1p(x);
  } else if constexpr (Op == Unary::sqrt) {
    return std::sqrt(x);
  } else if constexpr (Op == Unary::rsqrt) {
    return C(1) / std::sqrt(x);
  } else if constexpr (Op == Unary::reciprocal) {
    return C(1) / x;
  } else if constexpr (Op == Unary::sin) {
    return std::sin(x);
  } else if constexpr (Op == Unary::cos) {
    return std::cos(x);
  } else if constexpr (Op == Unary::tanh) {
    return std::tanh(x);
  } else if constexpr (Op == Unary::sigmoid) {
    // From e^-|x|, as vec::sigmoid (Note [Activation tails] in vec_math.h).
    const C e = std::exp(-std::abs(x)), r = C(1) / (C(1) + e);
    return x < C(0) ? e * r : r;
  } else if constexpr (Op == Unary::leaky_relu) {
    return x > C(0) ? x : x * p.p0;
  } else if constexpr (Op == Unary::gelu) {
    return C(0.5) * x * std::erfc(-x * C(0.707106781186547524400844362104849039));  // x Phi(x)
  } else if constexpr (Op == Unary::gelu_tanh) {
    // 0.5 x (1 + tanh u) = x sigmoid(2u)
    const C z = C(1.59576912160573071175978423973752747) * (x + C(0.044715) * x * x * x);
    const C e = std::exp(-std::abs(z)), r = C(1) / (C(1) + e);
    return x * (z < C(0) ? e * r : r);
  } else if constexpr (Op == Unary::silu) {
    const C e = std::exp(-std::abs(x));
    return (x < C(0) ? x * e : x) / (C(1) + e);
  } else if constexpr (Op == Unary::softplus) {
    const C bx = x * p.p0;
    return bx > p.p1 ? x : std::log1p(std::exp(bx)) / p.p0;
  } else if constexpr (Op == Unary::elu) {
    return x <= C(0) ? std::expm1(x) * p.p0 : x;
  } else {
    return std::erf(x);
  }
}

// The f32 ops with a vector form.
template <Unary Op>
inline constexpr bool kVectorF32 = Op == Unary::exp || Op == Unary::tanh || Op == Unary::sigmoid || Op == Unary::gelu ||
                                   Op == Unary::gelu_tanh || Op == Unary::silu || Op == Unary::erf;

template <Unary Op>
inline vec::vf apply_vec(vec::vf x) noexcept {
  if constexpr (Op == Unary::exp)
    return vec::exp(x);
  else if constexpr (Op == Unary::tanh)
    return vec::tanh(x);
  else if constexpr (Op == Unary::sigmoid)
    return vec::sigmoid(x);
  else if constexpr (Op == Unary::gelu)
    return vec::gelu_erf(x);
  else if constexpr (Op == Unary::gelu_tanh)
    return vec::gelu_tanh(x);
  else if constexpr (Op == Unary::silu)
    return vec::silu(x);
  else
    return vec::erf(x);
}

// o[i] = op(x[i * sx]) with sx in {0, 1}.
template <Unary Op, typename C>
void block(C* o, const C* x, std::int64_t sx, std::int64_t n, const Prepared<C>& p) noexcept {
  if constexpr (std::is_same_v<C, float> && kVectorF32<Op>) {
    if (sx == 1) {
      vec::map(o, x, n, [](vec::vf v) { return apply_vec<Op>(v); });
      return;
    }
  }
  if (sx == 1) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = apply<Op>(x[i], p);
  } else {
    const C v = apply<Op>(*x, p);
    for (std::int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

template <Unary Op, typename C>
void unary_run(const FlatArg& o, const FlatArg& x, std::int64_t n, DType compute, const UnaryParams& params,
               bool stream) noexcept {
  const Prepared<C> p(params);
  const bool direct_out = !std::is_same_v<C, bool> && o.dtype == dtype_v<C> && o.stride == 1 && compute == dtype_v<C>;
  if (direct_out && !stream && direct_input<C>(x)) {
    block<Op, C>(reinterpret_cast<C*>(o.data), reinterpret_cast<const C*>(x.data), x.stride, n, p);
    return;
  }
  C buf_x[ew::kBlock], buf_o[ew::kBlock];
  BlockInput<C> in(x, buf_x);
  for (std::int64_t i = 0; i < n; i += ew::kBlock) {
    const std::int64_t k = std::min(ew::kBlock, n - i);
    const C* px = in.at(i, k);
    C* out = direct_out && !stream ? reinterpret_cast<C*>(o.data) + i : buf_o;
    block<Op, C>(out, px, in.step(), k, p);
    if (!direct_out) {
      ew::scatter(ew::advance(o.data, o.dtype, i * o.stride), o.dtype, o.stride, buf_o, k, compute);
    } else if (stream) {
      ew::stream_copy(reinterpret_cast<C*>(o.data) + i, buf_o, static_cast<std::size_t>(k) * sizeof(C));
    }
  }
  if (stream) ew::stream_fence();
}

using UnaryRunFn = void (*)(const FlatArg&, const FlatArg&, std::int64_t, DType, const UnaryParams&, bool);

template <Unary Op>
constexpr std::array<UnaryRunFn, ew::kNumCompute> row_for() {
  std::array<UnaryRunFn, ew::kNumCompute> row{};
  ew::for_each_compute([&](auto tag, int index) {
    using C = decltype(tag);
    if constexpr (kSupported<Op, C>) row[static_cast<std::size_t>(index)] = &unary_run<Op, C>;
  });
  return row;
}

template <std::size_t... I>
constexpr std::array<std::array<UnaryRunFn, ew::kNumCompute>, kNumUnary> unary_table(std::index_sequence<I...>) {
  return {row_for<static_cast<Unary>(I)>()...};
}

// [op][compute type]: one load per call, no dispatch.
constexpr auto kUnaryTable = unary_table(std::make_index_sequence<kNumUnary>{});

UnaryRunFn unary_fn(Unary op, DType compute) noexcept {
  return kUnaryTable[static_cast<std::size_t>(op)][static_cast<std::size_t>(ew::compute_index(compute))];
}

// Only the cheap ops stream their stores (Note [Streaming stores]): the
// transcendental ones are bound by their arithmetic, which streaming stalls.
bool should_stream(Unary op, std::int64_t n, DType out) noexcept {
  const bool cheap = op <= Unary::clamp || op == Unary::sqrt || op == Unary::rsqrt || op == Unary::reciprocal ||
                     op == Unary::leaky_relu;
  return cheap && n * static_cast<std::int64_t>(dtype_size(out)) >= kStreamBytes;
}
}  // namespace

void unary_op(detail::DeviceRuntime& rt, Unary op, DType compute, const UnaryParams& params, const Shape& shape,
              const Operand& out, const Operand& in) {
  const UnaryRunFn fn = unary_fn(op, compute);
  const Strides* const strides[2] = {&out.strides, &in.strides};
  const StridedLoop<2> loop(shape, strides);
  const std::int64_t so = loop.strides[0].back(), si = loop.strides[1].back();
  const bool stream = so == 1 && should_stream(op, shape.numel(), out.dtype);
  for_each_run(rt, loop, [&](const std::int64_t(&off)[2], std::int64_t n) {
    fn({ew::advance(out.data, out.dtype, off[0]), out.dtype, so},
       {ew::advance(in.data, in.dtype, off[1]), in.dtype, si}, n, compute, params, stream);
  });
}

void unary_flat(detail::DeviceRuntime& rt, Unary op, DType compute, const UnaryParams& params, std::int64_t n,
                const FlatArg& out, const FlatArg& in) {
  const UnaryRunFn fn = unary_fn(op, compute);
  if (n <= kGrainElements) {  // small ops: no stream, no task
    fn(out, in, n, compute, params, false);
    return;
  }
  const bool stream = out.stride == 1 && should_stream(op, n, out.dtype);
  rt.parallel_for(n, kGrainElements, [&](std::int64_t begin, std::int64_t end) {
    fn(ew::advance(out, begin), ew::advance(in, begin), end - begin, compute, params, stream);
  });
}

}  // namespace forge::cpu
