// The CUDA backend of a build made without it (FORGE_CUDA=OFF, or no CUDA
// Toolkit found): the same API, and a clear error for a CUDA device.

#include "backend/cuda/cuda_backend.h"
#include "backend/device_runtime.h"
#include "forge/error.h"

namespace forge {

bool cuda_built() noexcept { return false; }
int cuda_device_count() noexcept { return 0; }

namespace detail {

void check_device_available(Device device) {
  FORGE_CHECK(device.is_cpu(), device, "ExecContext", "device ", device.str(),
              " requested, but this build of forge has no CUDA backend (configure with FORGE_CUDA=ON)");
}

std::unique_ptr<DeviceRuntime> make_cuda_runtime(Device device, std::size_t) {
  check_device_available(device);
  FORGE_FAIL(device, "ExecContext", "no CUDA backend in this build");
}

}  // namespace detail
}  // namespace forge
