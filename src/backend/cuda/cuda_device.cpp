// Device discovery through the CUDA runtime. Kernels, the device pool and
// stream-ordered arenas come with the CUDA backend; until then a CUDA context
// is refused with ErrorCode::device, as in a build without CUDA.

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "forge/error.h"

namespace forge {

bool cuda_built() noexcept { return true; }

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

namespace detail {

void check_device_available(Device device) {
  if (device.is_cpu()) return;
  const int count = cuda_device_count();
  FORGE_CHECK(device.index >= 0 && device.index < count, device, "ExecContext", "device ", device.str(),
              " requested, but ", count, " CUDA device(s) are visible");
  FORGE_FAIL(device, "ExecContext", "device ", device.str(),
             " is visible, but this build's CUDA backend cannot execute tensors yet");
}

}  // namespace detail
}  // namespace forge
