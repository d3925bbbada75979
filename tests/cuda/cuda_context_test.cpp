// CUDA contexts: what a context on cuda:0 makes and where it counts it, the
// device and host pools it serves, and the errors for a device that is not
// there or memory the device does not have.

#include <catch2/catch.hpp>
#include <string>

#include "forge/forge.h"
#include "support.h"

namespace {

using forge::Device;
using forge_test::TestContext;

}  // namespace

TEST_CASE("cuda: a context for an ordinal past cuda_device_count() is a device error naming it", "[cuda]") {
  const int count = forge::cuda_device_count();
  const std::string message =
      FORGE_REQUIRE_ERROR(device, "ExecContext", forge::ExecContext ctx({.device = Device::cuda(count)}));
  CHECK(message.find(Device::cuda(count).str()) != std::string::npos);
}
