#include "backend/backend.h"

#include "backend/device_runtime.h"
#include "forge/error.h"

namespace forge::backend {

void unsupported(const char* op, DType dtype, const detail::DeviceRuntime& dev) {
  FORGE_FAIL(device, op, "the ", dev.backend().name, " backend has no kernel for ", dtype_name(dtype), " on ",
             dev.device().str());
}

}  // namespace forge::backend
