// The cuda backend's indexing family: the index checks, row takes
// (embedding), gather, scatter_add, cat's slabs, triangles, one_hot and
// count_flags, every dtype the cpu backend lists for them.
//
// Index tensors (gather's and scatter_add's index, take_rows' rows,
// one_hot's classes) are device memory; find_bad_index's `allowed` and
// `value` and the counts returned are host values (the op reads them, so
// those kernels synchronize the stream). mapped_copy (host or device maps)
// is mapped_copy.cu; the stream compactions compact_rows, nonzero and
// flag_rows are compact_kernels.cu.
//
// scatter_add walks each line along `dim` in order in one thread, so sums
// are deterministic and no two threads write one element.

#include "backend/cuda/common.cuh"
#include "backend/cuda/indexing_kernels.h"
#include "backend/cuda/tables.h"
#include "forge/buffer_pool.h"

namespace forge::cuda {
namespace {

using backend::Operand;
using backend::RowTake;

// ---- index checks ----

__global__ void find_bad_kernel(std::int64_t n, StridedIndexer<1> ix, const std::byte* index, DType dtype,
                                std::int64_t bound, bool has_allowed, std::int64_t allowed, unsigned long long* first) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[1];
    ix.offsets(i, off);
    const std::int64_t v = load_as<std::int64_t>(index, dtype, off[0]);
    if (!((v >= 0 && v < bound) || (has_allowed && v == allowed))) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

std::int64_t find_bad_index(detail::DeviceRuntime& dev, const Shape& shape, const Operand& index, std::int64_t bound,
                            const std::int64_t* allowed, std::int64_t* value) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return -1;
  cudaStream_t s = stream_of(dev);
  const Strides* const strides[1] = {&index.strides};
  const StridedIndexer<1> ix(shape, strides);
  Ref<Buffer> scratch = dev.pool().acquire(sizeof(unsigned long long), "index check");
  auto* first = reinterpret_cast<unsigned long long*>(scratch->data());
  check(cudaMemsetAsync(first, 0xff, sizeof *first, s), "index check", "memset");
  find_bad_kernel<<<grid_for(n), kThreads, 0, s>>>(n, ix, index.data, index.dtype, bound, allowed != nullptr,
                                                   allowed ? *allowed : 0, first);
  check_launch("index check");
  unsigned long long host = 0;
  check(cudaMemcpyAsync(&host, first, sizeof host, cudaMemcpyDeviceToHost, s), "index check", "copy to host");
  check(cudaStreamSynchronize(s), "index check", "stream synchronize");
  if (host == ~0ull) return -1;
  const auto pos = static_cast<std::int64_t>(host);
  if (value != nullptr) {  // the index found there
    std::int64_t off[1];
    ix.offsets(pos, off);
    std::int64_t v = 0;
    if (index.dtype == DType::i32) {
      std::int32_t v32 = 0;
      check(cudaMemcpy(&v32, index.data + off[0] * 4, 4, cudaMemcpyDeviceToHost), "index check", "copy to host");
      v = v32;
    } else {
      check(cudaMemcpy(&v, index.data + off[0] * 8, 8, cudaMemcpyDeviceToHost), "index check", "copy to host");
    }
    *value = v;
  }
  return pos;
}

__global__ void max_index_kernel(std::int64_t n, StridedIndexer<1> ix, const std::byte* index, DType dtype,
                                 long long* result) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[1];
    ix.offsets(i, off);
    const long long v = load_as<std::int64_t>(index, dtype, off[0]);
    atomicMax(&result[0], v);
    if (v < 0) atomicMin(&result[1], v);
  }
}

std::int64_t max_index(detail::DeviceRuntime& dev, const Shape& shape, const Operand& index, bool* any_negative) {
  const std::int64_t n = shape.numel();
  cudaStream_t s = stream_of(dev);
  const Strides* const strides[1] = {&index.strides};
  const StridedIndexer<1> ix(shape, strides);
  long long host[2] = {std::numeric_limits<long long>::min(), 0};  // max, min below 0 (0: none)
  Ref<Buffer> scratch = dev.pool().acquire(sizeof host, "max_index");
  auto* result = reinterpret_cast<long long*>(scratch->data());
  check(cudaMemcpyAsync(result, host, sizeof host, cudaMemcpyHostToDevice, s), "max_index", "copy to device");
  if (n > 0) {
    max_index_kernel<<<grid_for(n), kThreads, 0, s>>>(n, ix, index.data, index.dtype, result);
    check_launch("max_index");
  }
  check(cudaMemcpyAsync(host, result, sizeof host, cudaMemcpyDeviceToHost, s), "max_index", "copy to host");
  check(cudaStreamSynchronize(s), "max_index", "stream synchronize");
  if (any_negative != nullptr) *any_negative = host[1] < 0;
  return host[0];
}

// ---- element moves ----

template <typename U>
__global__ void take_rows_kernel(std::int64_t total, std::int64_t len, StridedIndexer<1> lead, std::int64_t out_cs,
                                 std::int64_t src_rs, std::int64_t src_cs, const std::int64_t* rows, U* out,
                                 const U* src) {
  FORGE_GRID_LOOP(e, total) {
    const std::int64_t p = e / len, j = e % len;
    std::int64_t off[1];
    lead.offsets(p, off);
    out[off[0] + j * out_cs] = src[rows[p] * src_rs + j * src_cs];
  }
}

void take_rows(detail::DeviceRuntime& dev, const RowTake& g, DType dtype, const std::int64_t* rows, std::byte* out,
               const std::byte* src) {
  const std::int64_t total = g.lead_shape.numel() * g.row_len;
  if (total <= 0) return;
  const Strides* const strides[1] = {&g.lead_strides};
  const StridedIndexer<1> lead(g.lead_shape, strides);
  cudaStream_t s = stream_of(dev);
  dispatch_width(dtype_size(dtype), [&](auto tag) {
    using U = decltype(tag);
    take_rows_kernel<U><<<grid_for(total), kThreads, 0, s>>>(total, g.row_len, lead, g.out_col_stride, g.src_row_stride,
                                                             g.src_col_stride, rows, reinterpret_cast<U*>(out),
                                                             reinterpret_cast<const U*>(src));
  });
  check_launch("embedding");
}

template <typename U>
__global__ void gather_kernel(std::int64_t n, StridedIndexer<3> ix, U* out, const std::byte* index, DType idx_dtype,
                              const U* src, std::int64_t src_dim_stride) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = src[off[2] + load_as<std::int64_t>(index, idx_dtype, off[1]) * src_dim_stride];
  }
}

void gather(detail::DeviceRuntime& dev, const Shape& shape, const Operand& out, const Operand& index,
            const Operand& src, std::int64_t src_dim_stride) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  const Strides* const strides[3] = {&out.strides, &index.strides, &src.strides};
  const StridedIndexer<3> ix(shape, strides);
  cudaStream_t s = stream_of(dev);
  dispatch_width(dtype_size(out.dtype), [&](auto tag) {
    using U = decltype(tag);
    gather_kernel<U><<<grid_for(n), kThreads, 0, s>>>(n, ix, reinterpret_cast<U*>(out.data), index.data, index.dtype,
                                                      reinterpret_cast<const U*>(src.data), src_dim_stride);
  });
  check_launch("gather");
}

// One thread per line along dim: out[.., index, ..] += src[.., i, ..] for i in order.
template <typename C>
__global__ void scatter_add_kernel(std::int64_t lines, std::int64_t n, StridedIndexer<3> start, std::int64_t index_step,
                                   std::int64_t src_step, Operand out, Operand index, Operand src,
                                   std::int64_t out_dim_stride) {
  FORGE_GRID_LOOP(line, lines) {
    std::int64_t off[3];
    start.offsets(line, off);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t k = load_as<std::int64_t>(index.data, index.dtype, off[1] + i * index_step);
      const std::int64_t at = off[0] + k * out_dim_stride;
      const C sum = binary_arith<C>(Binary::add, load_as<C>(out.data, out.dtype, at),
                                    load_as<C>(src.data, src.dtype, off[2] + i * src_step));
      store_as<C>(out.data, out.dtype, at, sum);
    }
  }
}

void scatter_add(detail::DeviceRuntime& dev, const Shape& shape, int dim, const Operand& out, const Operand& index,
                 const Operand& src, std::int64_t out_dim_stride) {
  if (shape.numel() <= 0) return;
  Shape outer = shape;
  outer[dim] = 1;
  const Strides* const strides[3] = {&out.strides, &index.strides, &src.strides};
  const StridedIndexer<3> start(outer, strides);
  const std::int64_t lines = outer.numel(), n = shape[dim];
  cudaStream_t s = stream_of(dev);
  dispatch_compute(out.dtype, [&](auto tag) {
    using C = decltype(tag);
    scatter_add_kernel<C><<<grid_for(lines), kThreads, 0, s>>>(lines, n, start, index.strides[dim], src.strides[dim],
                                                               out, index, src, out_dim_stride);
  });
  check_launch("scatter_add");
}

void copy_slabs(detail::DeviceRuntime& dev, std::int64_t outer, std::size_t chunk_bytes, std::size_t dst_row_bytes,
                std::byte* dst, const std::byte* src) {
  if (outer <= 0 || chunk_bytes == 0) return;
  check(cudaMemcpy2DAsync(dst, dst_row_bytes, src, chunk_bytes, chunk_bytes, static_cast<std::size_t>(outer),
                          cudaMemcpyDeviceToDevice, stream_of(dev)),
        "cat", "copy");
}

template <typename U>
__global__ void triangle_kernel(std::int64_t n, StridedIndexer<2> ix, std::int64_t rows, std::int64_t cols, U* out,
                                const U* x, std::int64_t diagonal, bool upper) {
  FORGE_GRID_LOOP(e, n) {
    std::int64_t off[2];
    ix.offsets(e, off);
    const std::int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    out[off[0]] = keep ? x[off[1]] : U{0};
  }
}

void triangle(detail::DeviceRuntime& dev, const Shape& shape, const Operand& out, const Operand& x,
              std::int64_t diagonal, bool upper) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  const int r = shape.rank();
  const Strides* const strides[2] = {&out.strides, &x.strides};
  const StridedIndexer<2> ix(shape, strides);
  cudaStream_t s = stream_of(dev);
  dispatch_width(dtype_size(out.dtype), [&](auto tag) {
    using U = decltype(tag);
    triangle_kernel<U><<<grid_for(n), kThreads, 0, s>>>(n, ix, shape[r - 2], shape[r - 1],
                                                        reinterpret_cast<U*>(out.data),
                                                        reinterpret_cast<const U*>(x.data), diagonal, upper);
  });
  check_launch(upper ? "triu" : "tril");
}

__global__ void one_hot_kernel(std::int64_t n, std::int64_t classes, StridedIndexer<1> ix, std::int64_t* out,
                               const std::int64_t* cls) {
  FORGE_GRID_LOOP(p, n) {
    std::int64_t off[1];
    ix.offsets(p * classes + cls[p], off);
    out[off[0]] = 1;
  }
}

void one_hot(detail::DeviceRuntime& dev, const Shape& out_shape, const Operand& out, const std::int64_t* classes) {
  const std::int64_t total = out_shape.numel();
  const std::int64_t c = out_shape.rank() > 0 ? out_shape[out_shape.rank() - 1] : 1;
  if (total <= 0 || c <= 0) return;
  const std::int64_t n = total / c;
  const Strides* const strides[1] = {&out.strides};
  const StridedIndexer<1> ix(out_shape, strides);
  one_hot_kernel<<<grid_for(n), kThreads, 0, stream_of(dev)>>>(n, c, ix, reinterpret_cast<std::int64_t*>(out.data),
                                                               classes);
  check_launch("one_hot");
}

// ---- masks ----

__global__ void count_flags_kernel(std::int64_t n, const std::uint8_t* flags, unsigned long long* count) {
  unsigned long long c = 0;
  FORGE_GRID_LOOP(i, n) { c += flags[i] != 0; }
  c = block_reduce(c, SumOp<unsigned long long>{});
  if (threadIdx.x == 0 && c != 0) atomicAdd(count, c);
}

std::int64_t count_flags(detail::DeviceRuntime& dev, std::int64_t n, const std::uint8_t* flags) {
  if (n <= 0) return 0;
  cudaStream_t s = stream_of(dev);
  Ref<Buffer> scratch = dev.pool().acquire(sizeof(unsigned long long), "count_flags");
  auto* count = reinterpret_cast<unsigned long long*>(scratch->data());
  check(cudaMemsetAsync(count, 0, sizeof *count, s), "count_flags", "memset");
  count_flags_kernel<<<grid_for(n), kThreads, 0, s>>>(n, flags, count);
  check_launch("count_flags");
  unsigned long long host = 0;
  check(cudaMemcpyAsync(&host, count, sizeof host, cudaMemcpyDeviceToHost, s), "count_flags", "copy to host");
  check(cudaStreamSynchronize(s), "count_flags", "stream synchronize");
  return static_cast<std::int64_t>(host);
}

constexpr backend::DTypeMask kIndexDTypes = backend::mask_of(DType::i64, DType::i32);

}  // namespace

void fill_indexing_table(backend::IndexingKernels& k) {
  k.find_bad_index = {find_bad_index, kIndexDTypes};
  k.max_index = {max_index, kIndexDTypes};
  k.take_rows = {take_rows, backend::kAllDTypes};
  k.gather = {gather, backend::kAllDTypes};
  k.scatter_add = {scatter_add, backend::kAllDTypes};
  k.copy_slabs = {copy_slabs, backend::kNumericDTypes};
  k.triangle = {triangle, backend::kAllDTypes};
  k.one_hot = {one_hot, backend::mask_of(DType::i64)};
  k.count_flags = {count_flags, backend::mask_of(DType::boolean)};
  k.mapped_copy = {mapped_copy, backend::kAllDTypes};
  k.compact_rows = {compact_rows, backend::kAllDTypes};
  k.nonzero = {nonzero, backend::mask_of(DType::boolean)};
  k.flag_rows = {flag_rows, backend::mask_of(DType::boolean)};
}

}  // namespace forge::cuda
