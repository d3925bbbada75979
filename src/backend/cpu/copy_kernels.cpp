#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backend/cpu/kernels.h"
#include "core/convert.h"

namespace forge::cpu {

void copy_cast(DeviceRuntime& rt, const Shape& shape, const Operand& dst, const Operand& src) {
  const Strides* const strides[2] = {&dst.strides, &src.strides};
  const StridedLoop<2> loop(shape, strides);
  const std::int64_t sd = loop.strides[0].back(), ss = loop.strides[1].back();
  dispatch_dtype(dst.dtype, [&](auto to_tag) {
    dispatch_dtype(src.dtype, [&](auto from_tag) {
      using To = decltype(to_tag);
      using From = decltype(from_tag);
      for_each_run(rt, loop, [&](const std::int64_t(&off)[2], std::int64_t n) {
        To* d = reinterpret_cast<To*>(dst.data) + off[0];
        const From* s = reinterpret_cast<const From*>(src.data) + off[1];
        if (sd == 1 && ss == 1) {
          if constexpr (std::is_same_v<To, From> && !std::is_same_v<To, bool>) {
            std::memcpy(d, s, static_cast<std::size_t>(n) * sizeof(To));
          } else {
            for (std::int64_t i = 0; i < n; ++i) d[i] = convert<To>(load(s + i));
          }
        } else {
          for (std::int64_t i = 0; i < n; ++i) d[i * sd] = convert<To>(load(s + i * ss));
        }
      });
    });
  });
}

void fill(DeviceRuntime& rt, const Shape& shape, const Operand& dst, const std::byte* element) {
  const Strides* const strides[1] = {&dst.strides};
  const StridedLoop<1> loop(shape, strides);
  const std::int64_t sd = loop.strides[0].back();
  dispatch_dtype(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, element, sizeof v);
    for_each_run(rt, loop, [&](const std::int64_t(&off)[1], std::int64_t n) {
      T* d = reinterpret_cast<T*>(dst.data) + off[0];
      for (std::int64_t i = 0; i < n; ++i) d[i * sd] = v;
    });
  });
}

namespace {

// Writes gen(i) -> double, converted, to each of n elements, in order.
template <typename Gen>
void write_each(DType dtype, std::int64_t n, std::byte* dst, Gen&& gen) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(dst);
    for (std::int64_t i = 0; i < n; ++i) p[i] = from_double<T>(gen(i));
  });
}

// Writes gen(i) -> int64 (exact in dtype: the op checked the range) to each of n elements, in order.
template <typename Gen>
void write_each_integer(DType dtype, std::int64_t n, std::byte* dst, Gen&& gen) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(dst);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t v = gen(i);
      if constexpr (std::is_integral_v<T>)
        p[i] = static_cast<T>(v);
      else
        p[i] = from_double<T>(static_cast<double>(v));
    }
  });
}

// An integer uniform in [0, span): draws below 2^64 mod span are rejected,
// so every value is equally likely.
std::uint64_t uniform_below(std::mt19937_64& g, std::uint64_t span) {
  const std::uint64_t reject_below = (0 - span) % span;
  for (;;) {
    const std::uint64_t r = g();
    if (r >= reject_below) return r % span;
  }
}

// 0, ..., n - 1 in T, then a Fisher-Yates shuffle.
template <typename T>
void shuffled_range(std::int64_t n, T* p, std::mt19937_64& g) {
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<T>)
      p[i] = static_cast<T>(i);
    else
      p[i] = from_double<T>(static_cast<double>(i));
  }
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(p[i], p[static_cast<std::int64_t>(uniform_below(g, static_cast<std::uint64_t>(i) + 1))]);
}

}  // namespace

void generate(DeviceRuntime&, DType dtype, std::int64_t n, std::byte* dst, const backend::SequenceSpec& s,
              std::mt19937_64* generator) {
  using backend::Sequence;
  switch (s.kind) {
    case Sequence::arange:
      write_each(dtype, n, dst, [&](std::int64_t i) { return s.start + static_cast<double>(i) * s.step; });
      return;
    case Sequence::linspace:
      write_each(dtype, n, dst, [&](std::int64_t i) {
        return i < s.half ? s.start + s.step * static_cast<double>(i) : s.end - s.step * static_cast<double>(n - 1 - i);
      });
      return;
    case Sequence::eye: {
      const std::int64_t m = s.columns == 0 ? 1 : s.columns;
      write_each(dtype, n, dst, [&](std::int64_t i) { return i / m == i % m ? 1.0 : 0.0; });
      return;
    }
    case Sequence::uniform: {
      const double unit = std::ldexp(1.0, -s.bits);
      write_each(dtype, n, dst,
                 [&](std::int64_t) { return static_cast<double>((*generator)() >> (64 - s.bits)) * unit; });
      return;
    }
    case Sequence::normal: {
      double spare = 0;
      bool has_spare = false;
      write_each(dtype, n, dst, [&](std::int64_t) {  // Box-Muller, two normals per pair of uniforms
        if (has_spare) {
          has_spare = false;
          return spare;
        }
        const double u1 = (static_cast<double>((*generator)() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
        const double u2 = static_cast<double>((*generator)() >> 11) * 0x1.0p-53;
        const double r = std::sqrt(-2.0 * std::log(u1));
        spare = r * std::sin(2.0 * M_PI * u2);
        has_spare = true;
        return r * std::cos(2.0 * M_PI * u2);
      });
      return;
    }
    case Sequence::randint:
      write_each_integer(dtype, n, dst, [&](std::int64_t) {
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(s.low) + uniform_below(*generator, s.span));
      });
      return;
    case Sequence::randperm:
      dispatch_dtype(dtype, [&](auto tag) { shuffled_range(n, reinterpret_cast<decltype(tag)*>(dst), *generator); });
      return;
  }
}

}  // namespace forge::cpu
