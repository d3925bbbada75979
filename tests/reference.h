#pragma once
// Naive access for reference tests: read any element of any tensor straight
// from its buffer, walk every index of a shape, and build inputs in the
// layouts ops must handle (packed, transposed, stepped, offset) from values
// the test chooses.

#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "support.h"

namespace forge_test::reference {

// Element idx of t as a double, read through t's strides.
inline double at(const forge::Tensor& t, const forge::Dims& idx) {
  std::int64_t off = t.offset();
  for (int d = 0; d < t.dim(); ++d) off += idx[d] * t.strides()[d];
  const std::byte* p = t.buffer()->data() + off * static_cast<std::int64_t>(t.element_size());
  return forge::dispatch_dtype(t.dtype(), [&](auto tag) -> double {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, p, sizeof(T));
    if constexpr (std::is_same_v<T, forge::Half> || std::is_same_v<T, forge::BFloat16>)
      return static_cast<float>(v);
    else
      return static_cast<double>(v);
  });
}

// Calls fn(idx) for every index of shape in row-major order.
template <typename Fn>
void each_index(const forge::Shape& shape, Fn&& fn) {
  if (shape.numel() == 0) return;
  forge::Dims idx = forge::Dims::filled(shape.rank(), 0);
  for (std::int64_t n = 0; n < shape.numel(); ++n) {
    fn(idx);
    for (int d = shape.rank() - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Values exact in every dtype: small integers (quarters for the floats).
inline double random_value(std::mt19937_64& rng, forge::DType t) {
  if (t == forge::DType::boolean) return static_cast<double>(rng() & 1u);
  if (t == forge::DType::u8) return static_cast<double>(rng() % 100);
  const double k = static_cast<double>(static_cast<std::int64_t>(rng() % 81) - 40);
  return forge::is_floating(t) ? k / 4 : k;
}

enum Layout { packed, transposed, stepped, offset, kLayouts };

// A tensor of `shape` and dtype t in the given layout, its values from gen().
template <typename Gen>
forge::Tensor make_with(TestContext& ctx, const forge::Shape& shape, forge::DType t, int layout, Gen&& gen) {
  const int r = shape.rank();
  forge::Shape base = shape;
  if (layout == transposed && r >= 2) std::swap(base[r - 1], base[r - 2]);
  if (layout == stepped && r >= 1) base[r - 1] = 2 * shape[r - 1] + 1;
  if (layout == offset && r >= 1) base[0] = shape[0] + 3;
  std::vector<double> values(static_cast<std::size_t>(base.numel()));
  for (double& v : values) v = gen();
  forge::Tensor x = ctx.from_vector(values, base).to(t);
  if (layout == transposed && r >= 2) return x.transpose(-1, -2);
  if (layout == stepped && r >= 1) return x.slice(-1, 1, base[r - 1], 2);
  if (layout == offset && r >= 1) return x.narrow(0, 2, shape[0]);
  return x;
}

// make_with over random_value: values exact in t.
inline forge::Tensor make_exact(TestContext& ctx, std::mt19937_64& rng, const forge::Shape& shape, forge::DType t,
                                int layout) {
  return make_with(ctx, shape, t, layout, [&] { return random_value(rng, t); });
}

// Rank `rank`, each extent 0 (1 in 10), 1 (2 in 10) or 2 to 5.
inline forge::Shape random_shape(std::mt19937_64& rng, int rank) {
  forge::Shape s;
  for (int d = 0; d < rank; ++d) {
    const auto u = rng() % 10;
    s.push_back(u == 0 ? 0 : u < 3 ? 1 : static_cast<std::int64_t>(2 + rng() % 4));
  }
  return s;
}

// Uniform in [lo, hi].
inline std::int64_t pick(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

// The views the elementwise tests feed ops. transposed falls back to stepped
// below rank 2; expanded broadcasts a size-1 first dim (when there is a
// larger one to broadcast to).
enum class View { packed, transposed, stepped, expanded, offset };

// A tensor of logical `shape` seen as `view` over a base that fill(base_shape) makes.
template <typename Fill>
forge::Tensor view_of(const forge::Shape& shape, View view, Fill&& fill) {
  const int r = shape.rank();
  forge::Shape base = shape;
  if (view == View::transposed && r >= 2) {
    std::swap(base[r - 1], base[r - 2]);
    return fill(base).transpose(-1, -2);
  }
  if ((view == View::stepped || view == View::transposed) && r >= 1) {
    base[r - 1] = 2 * shape[r - 1] + 1;
    return fill(base).slice(-1, 1, base[r - 1], 2);
  }
  if (view == View::offset && r >= 1) {  // packed, but not at the start of its buffer
    base[0] = shape[0] + 3;
    return fill(base).narrow(0, 2, shape[0]);
  }
  if (view == View::expanded && r >= 1 && shape[0] > 1) {
    base[0] = 1;
    return fill(base).expand(shape);
  }
  return fill(shape);
}

}  // namespace forge_test::reference
