// dropout and scaled_dot_product_attention.
//
// dropout draws one 64-bit seed from the context's generator per call and
// decides element i (its logical, row-major position) by a counter-based hash
// of (seed, i): the mask does not depend on the thread count or the layout,
// and a manual_seed replays it. Dropped elements are written as 0.

#include <cmath>

#include "backend/cpu/convert.h"
#include "forge/ops.h"
#include "ops/nn_internal.h"

namespace forge {
namespace {

// splitmix64's finalizer: a bijection that mixes every input bit into every output bit.
inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void check_dropout(const char* op, const Tensor& x, double p) {
  detail::check_input(op, x, "x");
  detail::check_floating(op, x, "x");
  FORGE_CHECK(p >= 0.0 && p <= 1.0, invalid_argument, op, "p must be in [0, 1], got ", p);
}

void dropout_kernel(Tensor& out, const Tensor& x, double p) {
  Runtime& rt = out.runtime();
  if (p >= 1.0) {
    cpu::fill(rt, out.shape(), detail::operand(out), 0.0);
    return;
  }
  const std::uint64_t seed = rt.generator()();
  const std::int64_t n = x.numel();
  if (n == 0) return;
  // Keep element i when its 53-bit uniform draw u satisfies u >= p.
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(p, 53));
  const cpu::Operand oo = detail::operand(out), ox = detail::operand(x);
  const Strides* const strides[2] = {&oo.strides, &ox.strides};
  const cpu::StridedLoop<2> loop(x.shape(), strides);
  const std::int64_t so = loop.strides[0].back(), sx = loop.strides[1].back();
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || cpu::is_half_v<T>) {
      using C = cpu::compute_t<T>;
      const C scale = static_cast<C>(1.0 / (1.0 - p));
      const std::int64_t block = cpu::kGrainElements, blocks = (n + block - 1) / block;
      rt.parallel_for(blocks, 1, [&](std::int64_t begin, std::int64_t end) {
        detail::for_each_run_in(loop, begin * block, std::min(n, end * block),
                                [&](const std::int64_t (&off)[2], std::int64_t count, std::int64_t pos) {
                                  T* o = reinterpret_cast<T*>(oo.data) + off[0];
                                  const T* s = reinterpret_cast<const T*>(ox.data) + off[1];
                                  for (std::int64_t k = 0; k < count; ++k) {
                                    const std::uint64_t h =
                                        mix64(seed + static_cast<std::uint64_t>(pos + k) * 0x9e3779b97f4a7c15ull);
                                    const bool keep = (h >> 11) >= threshold;
                                    o[k * so] = keep ? cpu::convert<T>(cpu::widen(s[k * sx]) * scale) : T{};
                                  }
                                });
      });
    }
  });
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training) {
  const char* op = "dropout";
  check_dropout(op, x, p);
  if (!training || p == 0.0) return x;
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  dropout_kernel(out, x, p);
  detail::adopt_output(out);
  return out;
}

Tensor& dropout_into(Tensor& out, const Tensor& x, double p, bool training) {
  const char* op = "dropout_into";
  check_dropout(op, x, p);
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, x);
  detail::check_out_geometry(op, out, x.shape(), x.dtype());
  detail::check_no_partial_overlap(op, out, x, "x");  // elementwise: in place is fine
  if (!training || p == 0.0) {
    cpu::copy_cast(out.runtime(), x.shape(), detail::operand(out), detail::operand(x));
  } else {
    dropout_kernel(out, x, p);
  }
  out.buffer()->bump_version();
  return out;
}

}  // namespace forge
