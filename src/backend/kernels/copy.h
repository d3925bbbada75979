#pragma once
// The copy family of the kernel table (backend/kernels.h), and the operand
// every strided kernel takes.

#include <cstddef>
#include <cstdint>
#include <random>

#include "backend/backend.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::backend {

// One operand of a strided loop: its first element and its strides (in
// elements) over the loop's shape; a broadcast dimension has stride 0.
struct Operand {
  std::byte* data;
  DType dtype;
  Strides strides;
};

// What generate() writes into a packed tensor of n elements, element i:
enum class Sequence : std::uint8_t {
  arange,    // start + i * step
  linspace,  // start + i * step for i < half, else end - (n - 1 - i) * step (the last value is `end` exactly)
  eye,       // 1 where i / columns == i % columns, else 0
  uniform,   // [0, 1) with `bits` random bits (the dtype's precision), from the context's generator
  normal,    // standard normal (Box-Muller, two per pair of uniforms), from the context's generator
  randint,   // low + an integer uniform in [0, span) (unbiased: rejection), from the context's generator
  randperm,  // 0, ..., n - 1 shuffled (Fisher-Yates from the last element down), from the context's generator
};
struct SequenceSpec {
  Sequence kind = Sequence::arange;
  double start = 0, step = 0, end = 0;
  std::int64_t half = 0;     // linspace
  std::int64_t columns = 1;  // eye
  int bits = 53;             // uniform
  std::int64_t low = 0;      // randint
  std::uint64_t span = 1;    // randint: high - low, > 0
};

using CopyCastFn = void(detail::DeviceRuntime& dev, const Shape& shape, const Operand& dst, const Operand& src);
using FillFn = void(detail::DeviceRuntime& dev, const Shape& shape, const Operand& dst, const std::byte* element);
// Draws run in element order, so a seed gives the same values on every
// backend; `generator` is the context's (leased by the op), null for the
// sequences that draw nothing.
using GenerateFn = void(detail::DeviceRuntime& dev, DType dtype, std::int64_t n, std::byte* dst,
                        const SequenceSpec& spec, std::mt19937_64* generator);

struct CopyKernels {
  // dst[i] = convert(src[i]) over `shape`, any dtypes, any strides; get()
  // with dst's dtype (a backend that lists a dtype converts from every one).
  Entry<CopyCastFn> copy_cast;
  // dst[i] = one element of dst's dtype (its bytes).
  Entry<FillFn> fill;
  // A packed tensor's elements from a sequence or the context's generator.
  Entry<GenerateFn> generate;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("copy_cast", k.copy_cast);
    f("fill", k.fill);
    f("generate", k.generate);
  }
};

}  // namespace forge::backend
