// Binary elementwise kernels and where. One loop body per (op, compute type);
// 16-bit floats compute through f32 blocks (Note [Compute dtype] in
// elementwise_kernels.h), so no op body is instantiated for Half or BFloat16.

#include "backend/cpu/elementwise_kernels.h"

#include <array>
#include <cmath>
#include <type_traits>
#include <utility>

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

namespace forge::cpu {
namespace {

using ew::BlockInput;
using ew::direct_input;
using ew::wrap_add;
using ew::wrap_mul;
using ew::wrap_sub;

// libtorch's integer pow: repeated squaring (wrapping); a negative exponent
// gives 0 except for the bases 1 and -1.
template <typename T>
inline T int_pow(T base, T exponent) noexcept {
  if constexpr (std::is_signed_v<T>) {
    if (exponent < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exponent % 2) ? T(-1) : T(1);
      return 0;
    }
  }
  T result = 1;
  while (exponent) {
    if (exponent & 1) result = wrap_mul(result, base);
    exponent = static_cast<T>(exponent / 2);
    base = wrap_mul(base, base);
  }
  return result;
}

template <Binary Op, typename C>
inline constexpr bool kSupported = !(std::is_same_v<C, bool> && (Op == Binary::sub || Op == Binary::pow)) &&
                                   !(Op == Binary::div && !std::is_floating_point_v<C>);

template <Binary Op, typename C>
using result_t = std::conditional_t<gives_bool(Op), bool, C>;

template <Binary Op, typename C>
inline result_t<Op, C> apply(C a, C b) noexcept {
  constexpr bool kFloat = std::is_floating_point_v<C>;
  constexpr bool kBool = std::is_same_v<C, bool>;
  if constexpr (Op == Binary::add) {
    if constexpr (kBool)
      return a || b;
    else if constexpr (kFloat)
      return a + b;
    else
      return wrap_add(a, b);
  } else if constexpr (Op == Binary::sub) {
    if constexpr (kFloat)
      return a - b;
    else
      return wrap_sub(a, b);
  } else if constexpr (Op == Binary::mul) {
    if constexpr (kBool)
      return a && b;
    else if constexpr (kFloat)
      return a * b;
    else
      return wrap_mul(a, b);
  } else if constexpr (Op == Binary::div) {
    return a / b;
  } else if constexpr (Op == Binary::pow) {
    if constexpr (kFloat)
      return std::pow(a, b);
    else
      return int_pow(a, b);
  } else if constexpr (Op == Binary::maximum) {
    // std::max with NaN from either side, as libtorch.
    if constexpr (kFloat)
      return (a < b || b != b) ? b : a;
    else
      return a < b ? b : a;
  } else if constexpr (Op == Binary::minimum) {
    if constexpr (kFloat)
      return (b < a || b != b) ? b : a;
    else
      return b < a ? b : a;
  } else if constexpr (Op == Binary::eq) {
    return a == b;
  } else if constexpr (Op == Binary::ne) {
    return a != b;
  } else if constexpr (Op == Binary::lt) {
    return a < b;
  } else if constexpr (Op == Binary::le) {
    return a <= b;
  } else if constexpr (Op == Binary::gt) {
    return a > b;
  } else if constexpr (Op == Binary::ge) {
    return a >= b;
  } else if constexpr (Op == Binary::logical_and) {
    return a != C(0) && b != C(0);
  } else {
    return a != C(0) || b != C(0);
  }
}

// o[i] = a[i * sa] (op) b[i * sb] with sa, sb in {0, 1}: the loops the
// compiler vectorizes.
template <Binary Op, typename C, typename R = result_t<Op, C>>
[[gnu::always_inline]] inline void block(R* o, const C* a, std::int64_t sa, const C* b, std::int64_t sb,
                                         std::int64_t n) noexcept {
  if (sa == 1 && sb == 1) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = apply<Op>(a[i], b[i]);
  } else if (sa == 1) {
    const C y = *b;
    for (std::int64_t i = 0; i < n; ++i) o[i] = apply<Op>(a[i], y);
  } else if (sb == 1) {
    const C x = *a;
    for (std::int64_t i = 0; i < n; ++i) o[i] = apply<Op>(x, b[i]);
  } else {
    const R v = apply<Op>(*a, *b);
    for (std::int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

template <Binary Op, typename C>
void binary_run(const FlatArg& o, const FlatArg& a, const FlatArg& b, std::int64_t n, DType compute,
                bool stream) noexcept {
  using R = result_t<Op, C>;
  const bool direct_out = o.dtype == dtype_v<R> && o.stride == 1 && (gives_bool(Op) || compute == dtype_v<C>);
  if (direct_out && !stream && direct_input<C>(a) && direct_input<C>(b)) {
    block<Op, C>(reinterpret_cast<R*>(o.data), reinterpret_cast<const C*>(a.data), a.stride,
                 reinterpret_cast<const C*>(b.data), b.stride, n);
    return;
  }
  C buf_a[ew::kBlock], buf_b[ew::kBlock];
  R buf_o[ew::kBlock];
  BlockInput<C> in_a(a, buf_a), in_b(b, buf_b);
  for (std::int64_t i = 0; i < n; i += ew::kBlock) {
    const std::int64_t k = std::min(ew::kBlock, n - i);
    const C* pa = in_a.at(i, k);
    const C* pb = in_b.at(i, k);
    R* out = direct_out && !stream ? reinterpret_cast<R*>(o.data) + i : buf_o;
    block<Op, C>(out, pa, in_a.step(), pb, in_b.step(), k);
    if (!direct_out) {
      ew::scatter(ew::advance(o.data, o.dtype, i * o.stride), o.dtype, o.stride, buf_o, k, compute);
    } else if (stream) {
      ew::stream_copy(reinterpret_cast<R*>(o.data) + i, buf_o, static_cast<std::size_t>(k) * sizeof(R));
    }
  }
  if (stream) ew::stream_fence();
}

using BinaryRunFn = void (*)(const FlatArg&, const FlatArg&, const FlatArg&, std::int64_t, DType, bool);

template <Binary Op>
constexpr std::array<BinaryRunFn, ew::kNumCompute> row_for() {
  std::array<BinaryRunFn, ew::kNumCompute> row{};
  ew::for_each_compute([&](auto tag, int index) {
    using C = decltype(tag);
    if constexpr (kSupported<Op, C>) row[static_cast<std::size_t>(index)] = &binary_run<Op, C>;
  });
  return row;
}

template <std::size_t... I>
constexpr std::array<std::array<BinaryRunFn, ew::kNumCompute>, kNumBinary> binary_table(std::index_sequence<I...>) {
  return {row_for<static_cast<Binary>(I)>()...};
}

// [op][compute type]: one load per call, no dispatch.
constexpr auto kBinaryTable = binary_table(std::make_index_sequence<kNumBinary>{});

BinaryRunFn binary_fn(Binary op, DType compute) noexcept {
  return kBinaryTable[static_cast<std::size_t>(op)][static_cast<std::size_t>(ew::compute_index(compute))];
}

// Streaming stores pay off for ops bound by memory; pow is bound by its
// arithmetic, and streaming would stall it (Note [Streaming stores]).
bool should_stream(Binary op, std::int64_t n, DType out) noexcept {
  return op != Binary::pow && n * static_cast<std::int64_t>(dtype_size(out)) >= kStreamBytes;
}
// ---- where ----

template <typename C>
void where_run(const FlatArg& o, const FlatArg& cond, const FlatArg& a, const FlatArg& b, std::int64_t n,
               DType compute) noexcept {
  bool buf_c[ew::kBlock];
  C buf_a[ew::kBlock], buf_b[ew::kBlock], buf_o[ew::kBlock];
  const bool direct_out = o.dtype == dtype_v<C> && o.stride == 1 && compute == dtype_v<C>;
  BlockInput<C> in_a(a, buf_a), in_b(b, buf_b);
  for (std::int64_t i = 0; i < n; i += ew::kBlock) {
    const std::int64_t k = std::min(ew::kBlock, n - i);
    ew::gather(buf_c, ew::advance(cond.data, cond.dtype, i * cond.stride), cond.dtype, cond.stride, k);
    const C* pa = in_a.at(i, k);
    const C* pb = in_b.at(i, k);
    const std::int64_t sa = in_a.step(), sb = in_b.step();
    C* out = direct_out ? reinterpret_cast<C*>(o.data) + i : buf_o;
    for (std::int64_t j = 0; j < k; ++j) out[j] = buf_c[j] ? pa[j * sa] : pb[j * sb];
    if (!direct_out) ew::scatter(ew::advance(o.data, o.dtype, i * o.stride), o.dtype, o.stride, buf_o, k, compute);
  }
}

}  // namespace

void binary_op(detail::DeviceRuntime& rt, Binary op, DType compute, const Shape& shape, const Operand& out,
               const Operand& a, const Operand& b) {
  const BinaryRunFn fn = binary_fn(op, compute);
  const Strides* const strides[3] = {&out.strides, &a.strides, &b.strides};
  const StridedLoop<3> loop(shape, strides);
  const std::int64_t so = loop.strides[0].back(), sa = loop.strides[1].back(), sb = loop.strides[2].back();
  const bool stream = so == 1 && should_stream(op, shape.numel(), out.dtype);
  for_each_run(rt, loop, [&](const std::int64_t(&off)[3], std::int64_t n) {
    fn({ew::advance(out.data, out.dtype, off[0]), out.dtype, so}, {ew::advance(a.data, a.dtype, off[1]), a.dtype, sa},
       {ew::advance(b.data, b.dtype, off[2]), b.dtype, sb}, n, compute, stream);
  });
}

void binary_flat(detail::DeviceRuntime& rt, Binary op, DType compute, std::int64_t n, const FlatArg& out,
                 const FlatArg& a, const FlatArg& b) {
  const BinaryRunFn fn = binary_fn(op, compute);
  if (n <= kGrainElements) {  // small ops: no stream, no task
    fn(out, a, b, n, compute, false);
    return;
  }
  const bool stream = out.stride == 1 && should_stream(op, n, out.dtype);
  rt.parallel_for(n, kGrainElements, [&](std::int64_t begin, std::int64_t end) {
    fn(ew::advance(out, begin), ew::advance(a, begin), ew::advance(b, begin), end - begin, compute, stream);
  });
}

void binary_rows(detail::DeviceRuntime& rt, Binary op, DType compute, std::int64_t rows, std::int64_t cols,
                 const FlatArg& out, const FlatArg& full, const FlatArg& row, bool row_first) {
  const BinaryRunFn fn = binary_fn(op, compute);
  const bool stream = should_stream(op, rows * cols, out.dtype);
  rt.parallel_for(rows, std::max<std::int64_t>(1, kGrainElements / cols), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const FlatArg o = ew::advance(out, r * cols), f = ew::advance(full, r * cols);
      if (row_first)
        fn(o, row, f, cols, compute, stream);
      else
        fn(o, f, row, cols, compute, stream);
    }
  });
}

void where_op(detail::DeviceRuntime& rt, DType compute, const Shape& shape, const Operand& out, const Operand& cond,
              const Operand& a, const Operand& b) {
  const Strides* const strides[4] = {&out.strides, &cond.strides, &a.strides, &b.strides};
  const StridedLoop<4> loop(shape, strides);
  const std::int64_t so = loop.strides[0].back(), sc = loop.strides[1].back(), sa = loop.strides[2].back(),
                     sb = loop.strides[3].back();
  ew::dispatch_compute(compute, [&](auto tag) {
    using C = decltype(tag);
    for_each_run(rt, loop, [&](const std::int64_t(&off)[4], std::int64_t n) {
      where_run<C>({ew::advance(out.data, out.dtype, off[0]), out.dtype, so},
                   {ew::advance(cond.data, cond.dtype, off[1]), cond.dtype, sc},
                   {ew::advance(a.data, a.dtype, off[2]), a.dtype, sa},
                   {ew::advance(b.data, b.dtype, off[3]), b.dtype, sb}, n, compute);
    });
  });
}

namespace ew {

// memcpy with non-temporal stores for the 64-byte-aligned middle: the data
// goes to memory without first being read into the cache.
void stream_copy(void* dst, const void* src, std::size_t bytes) noexcept {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#if defined(__AVX512F__) || defined(__AVX__)
  const std::size_t head = std::min(bytes, (64 - reinterpret_cast<std::uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; d += 64, s += 64, bytes -= 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_loadu_si512(s));
#else
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)));
#endif
  }
#endif
  std::memcpy(d, s, bytes);
}

// Orders streamed stores before whatever the thread does next (the end of a task).
void stream_fence() noexcept {
#if defined(__AVX512F__) || defined(__AVX__)
  _mm_sfence();
#endif
}

}  // namespace ew
}  // namespace forge::cpu
