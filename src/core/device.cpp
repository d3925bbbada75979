#include "forge/device.h"

#include "forge/error.h"

namespace forge {

std::string Device::str() const try { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
FORGE_CATCH_OOM("Device::str")

}  // namespace forge
