// The cuda backend's elementwise family: binary ops and comparisons, unary
// ops, where and the fused activation VJPs, every dtype the cpu backend
// lists (unary_backward_flat: f32 and f64, as there).
//
// One kernel per compute type C (f16 and bf16 compute as float): operands are
// read in any dtype and converted to C, the op is a switch on a value every
// thread shares (no divergence), and results are stored in out's dtype after
// rounding to a 16-bit compute dtype (Note [Compute dtype]). The per-element
// math is device_math.h, tested on the host against the cpu kernels. Packed
// f32/f16/bf16 operands that already hold the compute dtype take 16-byte
// vector loads and stores (launch.h's VectorSplit).

#include "backend/cuda/common.cuh"
#include "backend/cuda/tables.h"

namespace forge::cuda {
namespace {

using backend::FlatArg;
using backend::Operand;

// ---- binary ----

template <typename C>
__global__ void binary_flat_kernel(Binary op, DType compute, std::int64_t n, FlatArg out, FlatArg a, FlatArg b) {
  FORGE_GRID_LOOP(i, n) {
    const C x = load_as<C>(a.data, a.dtype, i * a.stride);
    const C y = load_as<C>(b.data, b.dtype, i * b.stride);
    binary_element<C>(op, compute, out.data, out.dtype, i * out.stride, x, y);
  }
}

template <typename C>
__global__ void binary_strided_kernel(Binary op, DType compute, std::int64_t n, StridedIndexer<3> ix, Operand out,
                                      Operand a, Operand b) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[3];
    ix.offsets(i, off);
    binary_element<C>(op, compute, out.data, out.dtype, off[0], load_as<C>(a.data, a.dtype, off[1]),
                      load_as<C>(b.data, b.dtype, off[2]));
  }
}

template <typename C>
__global__ void binary_rows_kernel(Binary op, DType compute, std::int64_t rows, std::int64_t cols, FlatArg out,
                                   FlatArg full, FlatArg row, bool row_first) {
  FORGE_GRID_LOOP(i, rows * cols) {
    const std::int64_t c = i % cols;
    const C f = load_as<C>(full.data, full.dtype, i * full.stride);
    const C r = load_as<C>(row.data, row.dtype, c * row.stride);
    binary_element<C>(op, compute, out.data, out.dtype, i * out.stride, row_first ? r : f, row_first ? f : r);
  }
}

// Packed operands of storage type T (the compute dtype): 16-byte vectors,
// then the tail element by element.
template <typename T>
struct alignas(16) Vec16 {
  T v[kVectorBytes / sizeof(T)];
};

template <typename T>
__global__ void binary_vector_kernel(Binary op, DType compute, std::int64_t n, VectorSplit split, T* out, const T* a,
                                     const T* b) {
  using C = compute_t<T>;
  using V = Vec16<T>;
  constexpr int kLanes = static_cast<int>(kVectorBytes / sizeof(T));
  const DType dt = compute;
  FORGE_GRID_LOOP(i, split.vectors) {
    const V va = reinterpret_cast<const V*>(a)[i], vb = reinterpret_cast<const V*>(b)[i];
    V vo;
#pragma unroll
    for (int k = 0; k < kLanes; ++k)
      store_result<C>(vo.v, dt, k, binary_arith<C>(op, widen(va.v[k]), widen(vb.v[k])), compute);
    reinterpret_cast<V*>(out)[i] = vo;
  }
  FORGE_GRID_LOOP(j, n - split.tail) {
    const std::int64_t i = split.tail + j;
    store_result<C>(out, dt, i, binary_arith<C>(op, widen(a[i]), widen(b[i])), compute);
  }
}

bool vector_dtype(DType t) noexcept { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

template <typename Fn>
void dispatch_vector(DType t, Fn&& fn) {
  if (t == DType::f32)
    fn(float{});
  else if (t == DType::f16)
    fn(f16_t{});
  else
    fn(bf16_t{});
}

void binary_flat(detail::DeviceRuntime& dev, Binary op, DType compute, std::int64_t n, const FlatArg& out,
                 const FlatArg& a, const FlatArg& b) {
  if (n <= 0) return;
  cudaStream_t s = stream_of(dev);
  const auto packed = [&](const FlatArg& x) { return x.dtype == compute && x.stride == 1; };
  if (!backend::gives_bool(op) && vector_dtype(compute) && packed(out) && packed(a) && packed(b)) {
    const std::size_t size = dtype_size(compute);
    const VectorSplit split = vector_split(n, size, aligned16(out.data) && aligned16(a.data) && aligned16(b.data));
    dispatch_vector(compute, [&](auto tag) {
      using T = decltype(tag);
      binary_vector_kernel<T><<<grid_for(n, kThreads, static_cast<int>(split.lanes)), kThreads, 0, s>>>(
          op, compute, n, split, reinterpret_cast<T*>(out.data), reinterpret_cast<const T*>(a.data),
          reinterpret_cast<const T*>(b.data));
    });
  } else {
    dispatch_compute(compute, [&](auto tag) {
      binary_flat_kernel<decltype(tag)><<<grid_for(n), kThreads, 0, s>>>(op, compute, n, out, a, b);
    });
  }
  check_launch("binary");
}

void binary_op(detail::DeviceRuntime& dev, Binary op, DType compute, const Shape& shape, const Operand& out,
               const Operand& a, const Operand& b) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  const Strides* const strides[3] = {&out.strides, &a.strides, &b.strides};
  const StridedIndexer<3> ix(shape, strides);
  cudaStream_t s = stream_of(dev);
  dispatch_compute(compute, [&](auto tag) {
    binary_strided_kernel<decltype(tag)><<<grid_for(n), kThreads, 0, s>>>(op, compute, n, ix, out, a, b);
  });
  check_launch("binary");
}

void binary_rows(detail::DeviceRuntime& dev, Binary op, DType compute, std::int64_t rows, std::int64_t cols,
                 const FlatArg& out, const FlatArg& full, const FlatArg& row, bool row_first) {
  if (rows <= 0 || cols <= 0) return;
  cudaStream_t s = stream_of(dev);
  dispatch_compute(compute, [&](auto tag) {
    binary_rows_kernel<decltype(tag)>
        <<<grid_for(rows * cols), kThreads, 0, s>>>(op, compute, rows, cols, out, full, row, row_first);
  });
  check_launch("binary");
}

// ---- unary ----

template <typename C>
__global__ void unary_flat_kernel(Unary op, DType compute, UnaryConsts<C> p, std::int64_t n, FlatArg out, FlatArg in) {
  FORGE_GRID_LOOP(i, n) {
    const C x = load_as<C>(in.data, in.dtype, i * in.stride);
    store_result<C>(out.data, out.dtype, i * out.stride, unary_value<C>(op, x, p), compute);
  }
}

template <typename C>
__global__ void unary_strided_kernel(Unary op, DType compute, UnaryConsts<C> p, std::int64_t n, StridedIndexer<2> ix,
                                     Operand out, Operand in) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[2];
    ix.offsets(i, off);
    const C x = load_as<C>(in.data, in.dtype, off[1]);
    store_result<C>(out.data, out.dtype, off[0], unary_value<C>(op, x, p), compute);
  }
}

template <typename T>
__global__ void unary_vector_kernel(Unary op, DType compute, UnaryConsts<compute_t<T>> p, std::int64_t n,
                                    VectorSplit split, T* out, const T* in) {
  using C = compute_t<T>;
  using V = Vec16<T>;
  constexpr int kLanes = static_cast<int>(kVectorBytes / sizeof(T));
  FORGE_GRID_LOOP(i, split.vectors) {
    const V vi = reinterpret_cast<const V*>(in)[i];
    V vo;
#pragma unroll
    for (int k = 0; k < kLanes; ++k) store_result<C>(vo.v, compute, k, unary_value<C>(op, widen(vi.v[k]), p), compute);
    reinterpret_cast<V*>(out)[i] = vo;
  }
  FORGE_GRID_LOOP(j, n - split.tail) {
    const std::int64_t i = split.tail + j;
    store_result<C>(out, compute, i, unary_value<C>(op, widen(in[i]), p), compute);
  }
}

void unary_flat(detail::DeviceRuntime& dev, Unary op, DType compute, const UnaryParams& params, std::int64_t n,
                const FlatArg& out, const FlatArg& in) {
  if (n <= 0) return;
  cudaStream_t s = stream_of(dev);
  const auto packed = [&](const FlatArg& x) { return x.dtype == compute && x.stride == 1; };
  if (vector_dtype(compute) && packed(out) && packed(in)) {
    const VectorSplit split = vector_split(n, dtype_size(compute), aligned16(out.data) && aligned16(in.data));
    dispatch_vector(compute, [&](auto tag) {
      using T = decltype(tag);
      unary_vector_kernel<T><<<grid_for(n, kThreads, static_cast<int>(split.lanes)), kThreads, 0, s>>>(
          op, compute, unary_consts<compute_t<T>>(params), n, split, reinterpret_cast<T*>(out.data),
          reinterpret_cast<const T*>(in.data));
    });
  } else {
    dispatch_compute(compute, [&](auto tag) {
      using C = decltype(tag);
      unary_flat_kernel<C><<<grid_for(n), kThreads, 0, s>>>(op, compute, unary_consts<C>(params), n, out, in);
    });
  }
  check_launch("unary");
}

void unary_op(detail::DeviceRuntime& dev, Unary op, DType compute, const UnaryParams& params, const Shape& shape,
              const Operand& out, const Operand& in) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  const Strides* const strides[2] = {&out.strides, &in.strides};
  const StridedIndexer<2> ix(shape, strides);
  cudaStream_t s = stream_of(dev);
  dispatch_compute(compute, [&](auto tag) {
    using C = decltype(tag);
    unary_strided_kernel<C><<<grid_for(n), kThreads, 0, s>>>(op, compute, unary_consts<C>(params), n, ix, out, in);
  });
  check_launch("unary");
}

// ---- where ----

template <typename C>
__global__ void where_kernel(DType compute, std::int64_t n, StridedIndexer<4> ix, Operand out, Operand cond, Operand a,
                             Operand b) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[4];
    ix.offsets(i, off);
    const bool c = load_as<bool>(cond.data, cond.dtype, off[1]);
    const C v = c ? load_as<C>(a.data, a.dtype, off[2]) : load_as<C>(b.data, b.dtype, off[3]);
    store_result<C>(out.data, out.dtype, off[0], v, compute);
  }
}

void where_op(detail::DeviceRuntime& dev, DType compute, const Shape& shape, const Operand& out, const Operand& cond,
              const Operand& a, const Operand& b) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  const Strides* const strides[4] = {&out.strides, &cond.strides, &a.strides, &b.strides};
  const StridedIndexer<4> ix(shape, strides);
  cudaStream_t s = stream_of(dev);
  dispatch_compute(compute, [&](auto tag) {
    where_kernel<decltype(tag)><<<grid_for(n), kThreads, 0, s>>>(compute, n, ix, out, cond, a, b);
  });
  check_launch("where");
}

// ---- fused activation VJPs ----

template <typename C>
__global__ void unary_backward_kernel(UnaryBackward op, std::int64_t n, C* out, const C* g, const C* saved) {
  FORGE_GRID_LOOP(i, n) { out[i] = unary_backward_value<C>(op, g[i], saved[i]); }
}

void unary_backward_flat(detail::DeviceRuntime& dev, UnaryBackward op, DType dtype, std::int64_t n, std::byte* out,
                         const std::byte* g, const std::byte* saved) {
  if (n <= 0) return;
  cudaStream_t s = stream_of(dev);
  dispatch_float(dtype, [&](auto tag) {
    using C = decltype(tag);
    unary_backward_kernel<C><<<grid_for(n), kThreads, 0, s>>>(
        op, n, reinterpret_cast<C*>(out), reinterpret_cast<const C*>(g), reinterpret_cast<const C*>(saved));
  });
  check_launch("unary_backward");
}

}  // namespace

void fill_elementwise_table(backend::ElementwiseKernels& k) {
  k.binary_op = {binary_op, backend::kAllDTypes};
  k.binary_flat = {binary_flat, backend::kAllDTypes};
  k.binary_rows = {binary_rows, backend::kAllDTypes};
  k.unary_op = {unary_op, backend::kAllDTypes};
  k.unary_flat = {unary_flat, backend::kAllDTypes};
  k.where_op = {where_op, backend::kAllDTypes};
  k.unary_backward_flat = {unary_backward_flat, backend::mask_of(DType::f32, DType::f64)};
}

}  // namespace forge::cuda
