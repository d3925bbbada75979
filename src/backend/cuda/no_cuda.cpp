// The CUDA backend of a build made without it (FORGE_CUDA=OFF, or no CUDA
// Toolkit found): the same API, and a clear error for a CUDA device.

#include <atomic>

#include "backend/cuda/cuda_backend.h"
#include "backend/device_runtime.h"
#include "forge/cuda.h"
#include "forge/error.h"

namespace forge {

bool cuda_built() noexcept { return false; }

namespace {
std::atomic<bool> g_allow_tf32{false};  // kept for cuda_allow_tf32(); no GEMM reads it
}
void set_cuda_allow_tf32(bool allow) noexcept { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool cuda_allow_tf32() noexcept { return g_allow_tf32.load(std::memory_order_relaxed); }
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
