#include "backend/backend.h"

#include "backend/device_runtime.h"
#include "forge/error.h"

namespace forge::backend {

void unsupported(const char* op, DType dtype, const detail::DeviceRuntime& dev, bool for_no_dtype) {
  if (for_no_dtype)
    FORGE_FAIL(device, op, "not supported on ", dev.device().str(), ": the ", dev.backend().name,
               " backend has no kernel for this op in any dtype (asked for ", dtype_name(dtype),
               "); move the tensors to the cpu first");
  FORGE_FAIL(device, op, "the ", dev.backend().name, " backend has no kernel for ", dtype_name(dtype), " on ",
             dev.device().str());
}

}  // namespace forge::backend
