#pragma once
// Helpers of the distributed tests: the group every case uses, and the
// expected values each rank computes for itself.

#include <forge/forge.h>

#include <cstdlib>
#include <string>

namespace dist_test {

// mpirun's world size for this process (1 when started without mpirun).
inline int launched_size() {
  const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
  return s ? std::atoi(s) : 1;
}

// mpirun's rank for this process (0 without mpirun).
inline int launched_rank() {
  const char* s = std::getenv("OMPI_COMM_WORLD_RANK");
  return s ? std::atoi(s) : 0;
}

// A module's tensor by its state_dict name (parameters, then buffers).
inline forge::Tensor named(const forge::nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  for (const auto& [n, t] : m.named_buffers())
    if (n == name) return t;
  throw forge::Error(forge::ErrorCode::invalid_argument, "no tensor named " + name);
}

// Every case's options: a short timeout, so that a case that loses its peer
// fails in seconds rather than hanging.
inline forge::dist::ProcessGroupOptions options(bool debug = false) {
  return {.timeout = std::chrono::seconds(60), .debug = debug};
}

}  // namespace dist_test
