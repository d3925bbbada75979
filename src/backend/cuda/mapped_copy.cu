// The cuda backend's mapped_copy (index_select, repeat, flip, pad): one
// thread per output element, its source found by MappedIndexer
// (index_math.h).
//
// Where the maps live: index_select passes its index, which is device
// memory; flip passes no maps; pad and repeat build theirs on the host (a
// std::vector the op frees after the call). The kernel asks the driver
// which each map is (cudaPointerGetAttributes) and uploads the host ones,
// packed, into pool scratch through the runtime's upload (Note [Staged
// uploads] in cuda_runtime.cpp: the bytes are copied to pinned staging
// before upload returns, so the op may free its table at once, and the
// copy is queued on the stream ahead of the kernel). The scratch block is
// released after the launch: the pool is stream-ordered. fill_value is a
// host pointer to one element, passed to the kernel by value.

#include <cstring>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/index_math.h"
#include "backend/cuda/indexing_kernels.h"
#include "forge/buffer_pool.h"

namespace forge::cuda {
namespace {

template <typename U>
__global__ void mapped_copy_kernel(std::int64_t n, MappedIndexer ix, U* out, const U* src, U fill) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t oo = 0, so = 0;
    const bool read = ix.offsets(i, oo, so);
    out[oo] = read ? src[so] : fill;
  }
}

// Whether p is memory the device reads directly (device or managed).
bool device_readable(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer is host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

}  // namespace

void mapped_copy(detail::DeviceRuntime& dev, const Shape& out_shape, const backend::Operand& out,
                 const backend::Operand& src, const std::int64_t* const* maps, std::int64_t inner_period,
                 const void* fill_value) {
  const char* op = "mapped_copy";
  const std::int64_t n = out_shape.numel();
  if (n <= 0) return;
  cudaStream_t s = stream_of(dev);
  const int r = out_shape.rank();
  // Host maps, packed, and where each starts in the packing.
  const std::int64_t* device_maps[kMaxRank] = {};
  std::vector<std::int64_t> packed;
  std::size_t start[kMaxRank] = {};
  bool host[kMaxRank] = {};
  for (int d = 0; d < r; ++d) {
    if (maps[d] == nullptr) continue;
    if (device_readable(maps[d])) {
      device_maps[d] = maps[d];
      continue;
    }
    host[d] = true;
    start[d] = packed.size();
    packed.insert(packed.end(), maps[d], maps[d] + out_shape[d]);
  }
  Ref<Buffer> table;
  if (!packed.empty()) {
    const std::size_t bytes = packed.size() * sizeof(std::int64_t);
    table = dev.pool().acquire(bytes, op);
    dev.upload(table->data(), reinterpret_cast<const std::byte*>(packed.data()), bytes);
    const auto* base = reinterpret_cast<const std::int64_t*>(table->data());
    for (int d = 0; d < r; ++d)
      if (host[d]) device_maps[d] = base + start[d];
  }
  const MappedIndexer ix = mapped_indexer(out_shape, out.strides, src.strides, device_maps, inner_period);
  dispatch_width(dtype_size(out.dtype), [&](auto tag) {
    using U = decltype(tag);
    U fill{};
    if (fill_value != nullptr) std::memcpy(&fill, fill_value, sizeof fill);
    mapped_copy_kernel<U><<<grid_for(n), kThreads, 0, s>>>(n, ix, reinterpret_cast<U*>(out.data),
                                                           reinterpret_cast<const U*>(src.data), fill);
  });
  check_launch(op);
}

}  // namespace forge::cuda
