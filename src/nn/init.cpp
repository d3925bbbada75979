#include "forge/nn/init.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/runtime.h"
#include "runtime/runtime_internal.h"

namespace forge::nn::init {
namespace {

// Writes values (row-major) into t in place, without recording, as one write.
void write(const Tensor& t, const std::vector<double>& values, const char* op) {
  autograd::NoGradGuard no_grad;
  if (!t.device().is_cpu()) {  // written on the host, then moved
    Tensor host = forge::detail::allocate_in(t.runtime(), t.runtime().pool(), t.shape(), t.dtype(), op);
    write(host, values, op);
    Tensor dst = t;
    dst.copy_(host);
    return;
  }
  if (!t.is_contiguous()) {
    Tensor packed = t.contiguous();  // a pooled temporary, released on return
    write(packed, values, op);
    Tensor dst = t;
    dst.copy_(packed);
    return;
  }
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      std::copy(values.begin(), values.end(), static_cast<double*>(t.raw_data(op)));
    } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      T* p = static_cast<T*>(t.raw_data(op));
      for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(static_cast<float>(values[i]));
    }
  });
  t.buffer()->bump_version();
}

// Draws gen() for every element in row-major order (so a view and a packed
// tensor get the same values) and writes them into t.
// Every initializer's allocations happen here (the caller took the RNG lease).
template <typename Gen>
Tensor fill(const Tensor& t, const char* op, Gen&& gen) try {
  FORGE_CHECK(t.defined(), invalid_argument, op, "undefined tensor");
  FORGE_CHECK(is_floating(t.dtype()), dtype, op, "needs a floating tensor, got ", dtype_name(t.dtype()));
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  for (double& v : values) v = gen();
  write(t, values, op);
  return t;
}
FORGE_CATCH_OOM(op)

double uniform01(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1.0p-53; }

// Box-Muller, two normals per pair of uniforms.
struct Normal {
  std::mt19937_64& gen;
  double spare = 0;
  bool has_spare = false;
  double operator()() {
    if (has_spare) {
      has_spare = false;
      return spare;
    }
    const double u1 = (static_cast<double>(gen() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = uniform01(gen);
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare = r * std::sin(2.0 * M_PI * u2);
    has_spare = true;
    return r * std::cos(2.0 * M_PI * u2);
  }
};

Tensor uniform_named(const Tensor& t, double a, double b, const char* op) {
  FORGE_CHECK(std::isfinite(a) && std::isfinite(b) && a <= b, invalid_argument, op, "bounds [", a, ", ", b,
              "] must be finite and ordered");
  FORGE_CHECK(t.defined(), invalid_argument, op, "undefined tensor");
  const detail::Generator::Lease lease = t.runtime().generator().lease(op);
  return fill(t, op, [&] { return a + (b - a) * uniform01(*lease); });
}

Tensor normal_named(const Tensor& t, double mean, double std, const char* op) {
  FORGE_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, invalid_argument, op, "mean ", mean, " and std ",
              std, " must be finite, std non-negative");
  FORGE_CHECK(t.defined(), invalid_argument, op, "undefined tensor");
  const detail::Generator::Lease lease = t.runtime().generator().lease(op);
  Normal normal{*lease};
  return fill(t, op, [&] { return mean + std * normal(); });
}

std::int64_t fan(const Tensor& t, FanMode mode, const char* op) {
  FORGE_CHECK(t.defined(), invalid_argument, op, "undefined tensor");
  FORGE_CHECK(t.dim() >= 2, invalid_argument, op, "fan in and fan out need a tensor of rank >= 2, got shape ",
              t.shape());
  const auto [in, out] = calculate_fan_in_and_fan_out(t);
  const std::int64_t f = mode == FanMode::fan_in ? in : out;
  FORGE_CHECK(f > 0, invalid_argument, op, "a tensor of shape ", t.shape(), " has fan 0");
  return f;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu:
      return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::selu:
      return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<std::int64_t, std::int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  FORGE_CHECK(t.defined() && t.dim() >= 2, invalid_argument, "nn.init", "fan in and fan out need a tensor of rank >= 2",
              t.defined() ? ", got shape " : "", t.defined() ? t.shape().str() : std::string());
  std::int64_t receptive = 1;
  for (int d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(const Tensor& t, double a, double b) { return uniform_named(t, a, b, "nn.init.uniform_"); }
Tensor normal_(const Tensor& t, double mean, double std) { return normal_named(t, mean, std, "nn.init.normal_"); }
Tensor constant_(const Tensor& t, double value) {
  return fill(t, "nn.init.constant_", [&] { return value; });
}
Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  const char* op = "nn.init.kaiming_uniform_";
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode, op)));
  const double bound = std::sqrt(3.0) * std;
  return uniform_named(t, -bound, bound, op);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  const char* op = "nn.init.kaiming_normal_";
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode, op)));
  return normal_named(t, 0.0, std, op);
}

Tensor xavier_uniform_(const Tensor& t, double gain) {
  const char* op = "nn.init.xavier_uniform_";
  const double fans = static_cast<double>(fan(t, FanMode::fan_in, op) + fan(t, FanMode::fan_out, op));
  const double bound = gain * std::sqrt(6.0 / fans);
  return uniform_named(t, -bound, bound, op);
}

Tensor xavier_normal_(const Tensor& t, double gain) {
  const char* op = "nn.init.xavier_normal_";
  const double fans = static_cast<double>(fan(t, FanMode::fan_in, op) + fan(t, FanMode::fan_out, op));
  return normal_named(t, 0.0, gain * std::sqrt(2.0 / fans), op);
}

}  // namespace forge::nn::init
