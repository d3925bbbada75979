#pragma once
// What the core asks of the CUDA backend. A build without CUDA compiles
// no_cuda.cpp instead of the backend folder, with the same entry points.

#include "forge/device.h"

namespace forge::detail {

// Throws ErrorCode::device unless `device` can run an ExecContext in this build.
void check_device_available(Device device);

}  // namespace forge::detail
