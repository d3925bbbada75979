// Device discovery through the CUDA runtime, and the CUDA backend's table
// and per-context runtime.

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/gemm_options.h"
#include "backend/cuda/tables.h"
#include "backend/kernels.h"
#include "forge/cuda.h"
#include "forge/error.h"

namespace forge {

bool cuda_built() noexcept { return true; }
void set_cuda_allow_tf32(bool allow) noexcept { cuda::set_allow_tf32(allow); }
bool cuda_allow_tf32() noexcept { return cuda::allow_tf32(); }

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

namespace {

backend::Kernels make_table() {
  backend::Kernels k;
  cuda::fill_copy_table(k.copy);
  cuda::fill_elementwise_table(k.elementwise);
  cuda::fill_reduce_table(k.reduce);
  cuda::fill_nn_table(k.nn);
  cuda::fill_conv_table(k.conv);
  cuda::fill_linalg_table(k.linalg);
  cuda::fill_indexing_table(k.indexing);
  cuda::fill_optim_table(k.optim);
  // k.sort stays empty: sort, topk, searchsorted and multinomial say "not
  // supported on cuda:N" (ErrorCode::device); docs/OPS.md, "On the GPU".
  return k;
}

}  // namespace

const backend::Backend& backend::cuda_backend() noexcept {
  static const Kernels table = make_table();
  static const Backend cuda{"cuda", DeviceType::cuda, &table};
  return cuda;
}

namespace detail {

void check_device_available(Device device) {
  if (device.is_cpu()) return;
  const int count = cuda_device_count();
  FORGE_CHECK(device.index >= 0 && device.index < count, device, "ExecContext", "device ", device.str(),
              " requested, but ", count, " CUDA device(s) are visible");
}

std::unique_ptr<DeviceRuntime> make_cuda_runtime(Device device, std::size_t max_cached_bytes) {
  check_device_available(device);
  return std::make_unique<cuda::CudaRuntime>(device.index, max_cached_bytes);
}

}  // namespace detail
}  // namespace forge
