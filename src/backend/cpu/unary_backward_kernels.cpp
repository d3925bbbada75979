// Fused activation VJPs. f32 gelu, gelu_tanh and silu run on 16-lane vectors
// (vec_math.h); relu, sigmoid, tanh and every f64 form are plain loops the
// compiler vectorizes. The formulas are libtorch's (relu's threshold_backward
// lets a NaN output pass the gradient, as there), rearranged for the gelus
// and silu so that their tails do not cancel to 0 (Note [Activation tails]
// in vec_math.h).

#include "backend/cpu/unary_backward_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vec_math.h"

namespace forge::cpu {
namespace {

constexpr double kSqrt1_2 = 0.707106781186547524400844362104849039;
constexpr double kInvSqrt2Pi = 0.398942280401432677939946059934381868;  // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.797884560802865355879892119868763737;
constexpr double kGeluKappa = 0.044715;

// sigmoid(z) and sigmoid(z) sigmoid(-z) from e = e^-|z|, neither cancelling
// (Note [Activation tails] in vec_math.h).
template <typename C>
struct Logistic {
  C sig, sig_both;
  explicit Logistic(C z) noexcept {
    const C e = std::exp(-std::abs(z)), r = C(1) / (C(1) + e);
    sig = z < C(0) ? e * r : r;
    sig_both = e * r * r;
  }
};

template <UnaryBackward Op, typename C>
inline C derivative_times(C g, C s) noexcept {
  if constexpr (Op == UnaryBackward::relu) {
    return s <= C(0) ? C(0) : g;
  } else if constexpr (Op == UnaryBackward::sigmoid) {
    return g * s * (C(1) - s);
  } else if constexpr (Op == UnaryBackward::tanh) {
    return g * (C(1) - s * s);
  } else if constexpr (Op == UnaryBackward::gelu) {
    const C cdf = C(0.5) * std::erfc(-s * C(kSqrt1_2));
    const C pdf = std::exp(C(-0.5) * s * s) * C(kInvSqrt2Pi);
    return g * (cdf + s * pdf);
  } else if constexpr (Op == UnaryBackward::gelu_tanh) {
    const C s2 = s * s;
    const Logistic<C> l(C(2 * kSqrt2OverPi) * (s + C(kGeluKappa) * s2 * s));
    const C s2c = std::min(s2, C(1e36));  // keeps z' finite where sig_both is 0
    return g * (l.sig + s * l.sig_both * C(2 * kSqrt2OverPi) * (C(1) + C(3 * kGeluKappa) * s2c));
  } else {
    const Logistic<C> l(s);
    return g * (l.sig + s * l.sig_both);
  }
}

template <UnaryBackward Op>
inline constexpr bool kVectorF32 =
    Op == UnaryBackward::gelu || Op == UnaryBackward::gelu_tanh || Op == UnaryBackward::silu;

template <UnaryBackward Op>
inline vec::vf derivative_times_vec(vec::vf g, vec::vf s) noexcept {
  if constexpr (Op == UnaryBackward::gelu)
    return g * vec::gelu_erf_grad(s);
  else if constexpr (Op == UnaryBackward::gelu_tanh)
    return g * vec::gelu_tanh_grad(s);
  else
    return g * vec::silu_grad(s);
}

template <UnaryBackward Op, typename C>
void run(C* o, const C* g, const C* s, std::int64_t n) noexcept {
  if constexpr (std::is_same_v<C, float> && kVectorF32<Op>) {
    std::int64_t i = 0;
    for (; i + vec::kLanes <= n; i += vec::kLanes)
      vec::storeu(o + i, derivative_times_vec<Op>(vec::loadu(g + i), vec::loadu(s + i)));
    if (i < n) {  // the tail through one padded vector
      float bg[vec::kLanes] = {}, bs[vec::kLanes] = {};
      const auto rest = static_cast<std::size_t>(n - i);
      std::memcpy(bg, g + i, rest * sizeof(float));
      std::memcpy(bs, s + i, rest * sizeof(float));
      vec::storeu(bg, derivative_times_vec<Op>(vec::loadu(bg), vec::loadu(bs)));
      std::memcpy(o + i, bg, rest * sizeof(float));
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) o[i] = derivative_times<Op, C>(g[i], s[i]);
  }
}

using RunFn = void (*)(std::byte*, const std::byte*, const std::byte*, std::int64_t);

template <UnaryBackward Op, typename C>
void run_bytes(std::byte* o, const std::byte* g, const std::byte* s, std::int64_t n) noexcept {
  run<Op, C>(reinterpret_cast<C*>(o), reinterpret_cast<const C*>(g), reinterpret_cast<const C*>(s), n);
}

template <typename C>
RunFn pick(UnaryBackward op) noexcept {
  switch (op) {
    case UnaryBackward::relu:
      return &run_bytes<UnaryBackward::relu, C>;
    case UnaryBackward::sigmoid:
      return &run_bytes<UnaryBackward::sigmoid, C>;
    case UnaryBackward::tanh:
      return &run_bytes<UnaryBackward::tanh, C>;
    case UnaryBackward::gelu:
      return &run_bytes<UnaryBackward::gelu, C>;
    case UnaryBackward::gelu_tanh:
      return &run_bytes<UnaryBackward::gelu_tanh, C>;
    case UnaryBackward::silu:
      return &run_bytes<UnaryBackward::silu, C>;
  }
  return nullptr;
}

}  // namespace

void unary_backward_flat(detail::DeviceRuntime& rt, UnaryBackward op, DType dtype, std::int64_t n, std::byte* out,
                         const std::byte* g, const std::byte* saved) {
  const RunFn fn = dtype == DType::f32 ? pick<float>(op) : pick<double>(op);
  const std::size_t size = dtype_size(dtype);
  if (n <= kGrainElements) {  // small tensors: no task
    fn(out, g, saved, n);
    return;
  }
  rt.parallel_for(n, kGrainElements, [&](std::int64_t begin, std::int64_t end) {
    const auto at = static_cast<std::size_t>(begin) * size;
    fn(out + at, g + at, saved + at, end - begin);
  });
}

}  // namespace forge::cpu
