// The cuda backend's mask compactions (compact_rows, nonzero, flag_rows).
// Each set flag's place in the output is its exclusive prefix count, found
// by a three-pass scan over ScanChunks (index_math.h): a block counts each
// chunk's set flags, one block scans the chunk counts (exclusive, the total
// last), and a block per chunk scans its threads' counts and writes pos[i]
// for every flag (pos[n] = the total). The moves then read pos: a set flag
// i goes to pos[i]. Flags, rows, offsets and columns are device memory; the
// scratch (chunk counts, pos) is pool memory released once queued.

#include "backend/cuda/common.cuh"
#include "backend/cuda/index_math.h"
#include "backend/cuda/indexing_kernels.h"
#include "forge/buffer_pool.h"

namespace forge::cuda {
namespace {

// The sum of v over the threads of the block before this one; *total: over
// all of them. blockDim.x a multiple of 32. Call from every thread.
__device__ long long block_exclusive_scan(long long v, long long* total) {
  __shared__ long long warp_sums[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  long long inclusive = v;
  for (int offset = 1; offset < 32; offset *= 2) {
    const long long up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= static_cast<unsigned>(offset)) inclusive += up;
  }
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  long long before = 0, all = 0;
  for (unsigned w = 0; w < warps; ++w) {
    if (w < warp) before += warp_sums[w];
    all += warp_sums[w];
  }
  *total = all;
  return before + inclusive - v;
}

__global__ void chunk_count_kernel(ScanChunks c, const std::uint8_t* flags, long long* counts) {
  for (std::int64_t b = blockIdx.x; b < c.count; b += gridDim.x) {
    std::int64_t first = 0, last = 0;
    c.thread_span(b, static_cast<int>(threadIdx.x), first, last);
    long long k = 0;
    for (std::int64_t i = first; i < last; ++i) k += flags[i] != 0;
    k = block_reduce(k, SumOp<long long>{});
    if (threadIdx.x == 0) counts[b] = k;
  }
}

// One block: counts[b] becomes the set flags of the chunks before b; pos[n]
// the total.
__global__ void scan_counts_kernel(std::int64_t chunks, long long* counts, std::int64_t n, std::int64_t* pos) {
  const std::int64_t per = (chunks + blockDim.x - 1) / blockDim.x;
  std::int64_t first = static_cast<std::int64_t>(threadIdx.x) * per;
  if (first > chunks) first = chunks;
  const std::int64_t last = first + per < chunks ? first + per : chunks;
  long long sum = 0;
  for (std::int64_t b = first; b < last; ++b) sum += counts[b];
  long long total = 0;
  long long before = block_exclusive_scan(sum, &total);
  for (std::int64_t b = first; b < last; ++b) {
    const long long k = counts[b];
    counts[b] = before;
    before += k;
  }
  if (threadIdx.x == 0) pos[n] = total;
}

__global__ void positions_kernel(ScanChunks c, const std::uint8_t* flags, const long long* counts, std::int64_t* pos) {
  for (std::int64_t b = blockIdx.x; b < c.count; b += gridDim.x) {
    std::int64_t first = 0, last = 0;
    c.thread_span(b, static_cast<int>(threadIdx.x), first, last);
    long long k = 0;
    for (std::int64_t i = first; i < last; ++i) k += flags[i] != 0;
    long long total = 0;
    long long at = counts[b] + block_exclusive_scan(k, &total);
    for (std::int64_t i = first; i < last; ++i) {
      pos[i] = at;
      at += flags[i] != 0;
    }
  }
}

// pos (n + 1 entries, device scratch): pos[i] = the set flags before i.
Ref<Buffer> positions(detail::DeviceRuntime& dev, std::int64_t n, const std::uint8_t* flags, const char* op) {
  cudaStream_t s = stream_of(dev);
  const ScanChunks c = scan_chunks(n);
  Ref<Buffer> pos = dev.pool().acquire(static_cast<std::size_t>(n + 1) * sizeof(std::int64_t), op);
  Ref<Buffer> counts = dev.pool().acquire(static_cast<std::size_t>(c.count + 1) * sizeof(long long), op);
  auto* p = reinterpret_cast<std::int64_t*>(pos->data());
  auto* k = reinterpret_cast<long long*>(counts->data());
  const auto blocks = static_cast<unsigned>(c.count < kMaxBlocks ? c.count : kMaxBlocks);
  if (c.count > 0) {
    chunk_count_kernel<<<blocks, ScanChunks::kThreadsPerChunk, 0, s>>>(c, flags, k);
    check_launch(op);
  }
  scan_counts_kernel<<<1, 1024, 0, s>>>(c.count, k, n, p);
  check_launch(op);
  if (c.count > 0) {
    positions_kernel<<<blocks, ScanChunks::kThreadsPerChunk, 0, s>>>(c, flags, k, p);
    check_launch(op);
  }
  return pos;
}

template <typename U>
__global__ void compact_rows_kernel(std::int64_t total, std::int64_t units, const std::uint8_t* flags,
                                    const std::int64_t* pos, const U* src, U* dst) {
  FORGE_GRID_LOOP(e, total) {
    const std::int64_t i = e / units;
    if (flags[i]) dst[pos[i] * units + e % units] = src[e];
  }
}

struct PlainShape {
  int rank = 0;
  std::int64_t size[kMaxRank] = {};
};

__global__ void nonzero_kernel(std::int64_t n, PlainShape shape, const std::uint8_t* flags, const std::int64_t* pos,
                               std::int64_t* out) {
  FORGE_GRID_LOOP(i, n) {
    if (!flags[i]) continue;
    std::int64_t* row = out + pos[i] * shape.rank;
    std::int64_t rest = i;
    for (int d = shape.rank - 1; d >= 0; --d) {
      row[d] = rest % shape.size[d];
      rest /= shape.size[d];
    }
  }
}

__global__ void row_offsets_kernel(std::int64_t items, std::int64_t width, const std::int64_t* pos,
                                   std::int64_t* offsets) {
  FORGE_GRID_LOOP(b, items + 1) { offsets[b] = pos[b * width]; }
}

__global__ void columns_kernel(std::int64_t n, std::int64_t width, const std::uint8_t* flags, const std::int64_t* pos,
                               std::int64_t* columns) {
  FORGE_GRID_LOOP(i, n) {
    if (flags[i]) columns[pos[i]] = i % width;
  }
}

}  // namespace

void compact_rows(detail::DeviceRuntime& dev, std::int64_t n, std::size_t row_bytes, const std::uint8_t* flags,
                  const std::byte* src, std::byte* dst) {
  const char* op = "compact_rows";
  if (n <= 0 || row_bytes == 0) return;
  Ref<Buffer> pos = positions(dev, n, flags, op);
  const std::size_t unit = move_unit(row_bytes, src, dst);
  const auto units = static_cast<std::int64_t>(row_bytes / unit);
  const std::int64_t total = n * units;
  const auto* p = reinterpret_cast<const std::int64_t*>(pos->data());
  dispatch_width(unit, [&](auto tag) {
    using U = decltype(tag);
    compact_rows_kernel<U><<<grid_for(total), kThreads, 0, stream_of(dev)>>>(
        total, units, flags, p, reinterpret_cast<const U*>(src), reinterpret_cast<U*>(dst));
  });
  check_launch(op);
}

void nonzero(detail::DeviceRuntime& dev, const Shape& shape, const std::uint8_t* flags, std::int64_t* out) {
  const char* op = "nonzero";
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  Ref<Buffer> pos = positions(dev, n, flags, op);
  PlainShape plain;
  plain.rank = shape.rank();
  for (int d = 0; d < plain.rank; ++d) plain.size[d] = shape[d];
  nonzero_kernel<<<grid_for(n), kThreads, 0, stream_of(dev)>>>(n, plain, flags,
                                                               reinterpret_cast<const std::int64_t*>(pos->data()), out);
  check_launch(op);
}

void flag_rows(detail::DeviceRuntime& dev, std::int64_t items, std::int64_t width, const std::uint8_t* flags,
               std::int64_t* offsets, std::int64_t* columns) {
  const char* op = "flag_rows";
  const std::int64_t n = items * width;
  cudaStream_t s = stream_of(dev);
  if (n <= 0) {  // every offset 0
    check(cudaMemsetAsync(offsets, 0, static_cast<std::size_t>(items + 1) * sizeof(std::int64_t), s), op, "memset");
    return;
  }
  Ref<Buffer> pos = positions(dev, n, flags, op);
  const auto* p = reinterpret_cast<const std::int64_t*>(pos->data());
  row_offsets_kernel<<<grid_for(items + 1), kThreads, 0, s>>>(items, width, p, offsets);
  check_launch(op);
  if (columns != nullptr) {
    columns_kernel<<<grid_for(n), kThreads, 0, s>>>(n, width, flags, p, columns);
    check_launch(op);
  }
}

}  // namespace forge::cuda
