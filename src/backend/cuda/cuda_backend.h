#pragma once
// What the core asks of the CUDA backend. A build without CUDA compiles
// no_cuda.cpp instead of the backend folder, with the same entry points.

#include <cstddef>
#include <memory>

#include "forge/device.h"

namespace forge::backend {
struct Backend;
// The CUDA backend's kernel table (cuda_backend.cpp; CUDA builds only).
const Backend& cuda_backend() noexcept;
}  // namespace forge::backend

namespace forge::detail {

class DeviceRuntime;

// Throws ErrorCode::device unless `device` can run an ExecContext in this build.
void check_device_available(Device device);
// The runtime of CUDA device `device` for one context (its stream, handles
// and device pool); ErrorCode::device in a build without CUDA.
std::unique_ptr<DeviceRuntime> make_cuda_runtime(Device device, std::size_t max_cached_bytes);

}  // namespace forge::detail
