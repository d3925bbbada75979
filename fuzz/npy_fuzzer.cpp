// libFuzzer entry for fuzz_npy (fuzz/npy_target.cpp).

#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return forge_fuzz::fuzz_npy(data, size);
}
