#pragma once
// What the cuda tests share: the context they run on.

#include "forge/forge.h"

namespace forge_test {

// A context on cuda:0, with 2 threads for its host-side work.
inline forge::ExecContextOptions cuda_options() { return {.device = forge::Device::cuda(0), .threads = 2}; }

}  // namespace forge_test
