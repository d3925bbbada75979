#include "forge/device.h"

namespace forge {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace forge
