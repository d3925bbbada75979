#pragma once
// A naive model of the two 16-bit float formats, for checking forge's
// conversions and the f16/bf16 results of ops against the definition.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace forge_test {

// ---- a naive model of a 16-bit float format ----
// Every non-negative finite value of the format, indexed by its bit pattern,
// followed by the value the next pattern (+inf) would have if the exponent
// range went on: rounding to nearest even between the largest finite value and
// that virtual one decides overflow to infinity.
struct Format16 {
  int mantissa_bits;           // 10 for f16, 7 for bf16
  int exponent_bias;           // 15, 127
  std::uint16_t inf_bits;      // 0x7c00, 0x7f80
  std::vector<double> values;  // values[k] for k in [0, inf_bits]

  Format16(int mbits, int bias, std::uint16_t inf) : mantissa_bits(mbits), exponent_bias(bias), inf_bits(inf) {
    for (std::uint32_t k = 0; k <= inf; ++k) values.push_back(decode_magnitude(static_cast<std::uint16_t>(k)));
  }
  // The magnitude of a pattern by the textbook formula (no NaN/inf handling:
  // the inf pattern decodes to the virtual next power of two).
  double decode_magnitude(std::uint16_t bits) const {
    const std::uint32_t m = bits & ((1u << mantissa_bits) - 1u);
    const int e = static_cast<int>((bits & 0x7fffu) >> mantissa_bits);
    if (e == 0) return std::ldexp(static_cast<double>(m), 1 - exponent_bias - mantissa_bits);
    return std::ldexp(static_cast<double>(m + (1u << mantissa_bits)), e - exponent_bias - mantissa_bits);
  }
  // The pattern nearest to x, ties to the even pattern; NaN gives a NaN pattern.
  std::uint16_t round(double x) const {
    if (std::isnan(x)) return static_cast<std::uint16_t>(inf_bits | 1u);
    const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    const double a = std::fabs(x);
    if (a >= values.back()) return static_cast<std::uint16_t>(inf_bits | sign);
    const auto it = std::upper_bound(values.begin(), values.end(), a);  // values[k] <= a < values[k+1]
    const auto k = static_cast<std::uint32_t>((it - values.begin()) - 1);
    const double below = a - values[k], above = values[k + 1] - a;
    std::uint32_t pick = below < above ? k : below > above ? k + 1 : ((k & 1u) == 0 ? k : k + 1);
    return static_cast<std::uint16_t>(pick | sign);  // pick == inf_bits is +-inf
  }
  // The value of a pattern (inf and NaN included).
  double value(std::uint16_t bits) const {
    const std::uint16_t mag = bits & 0x7fffu;
    double v;
    if (mag > inf_bits)
      v = std::numeric_limits<double>::quiet_NaN();
    else if (mag == inf_bits)
      v = std::numeric_limits<double>::infinity();
    else
      v = values[mag];
    return (bits & 0x8000u) ? -v : v;
  }
  bool is_nan(std::uint16_t bits) const { return (bits & 0x7fffu) > inf_bits; }
};

inline const Format16& f16_format() {
  static const Format16 f(10, 15, 0x7c00u);
  return f;
}
inline const Format16& bf16_format() {
  static const Format16 f(7, 127, 0x7f80u);
  return f;
}

}  // namespace forge_test
