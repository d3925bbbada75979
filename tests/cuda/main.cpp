// The runner of the CUDA tests. Listing (--list-test-names-only, which ctest's
// discovery runs at build time, and the other list and help options) needs no
// GPU; running needs one: with no device visible it says so and exits with 77,
// which ctest counts as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt).
// With a device, the leak listener checks the host and the device pool of
// every TestContext after each case, as in forge_tests.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "forge/device.h"
#include "leak_listener.h"

namespace {

constexpr int kSkipped = 77;

bool only_lists(const Catch::ConfigData& config) {
  return config.listTests || config.listTags || config.listReporters || config.listTestNamesOnly || config.showHelp ||
         config.libIdentify;
}

}  // namespace

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int status = session.applyCommandLine(argc, argv); status != 0) return status;
  if (!only_lists(session.configData()) && forge::cuda_device_count() == 0) {
    std::printf("SKIP: no CUDA device visible (cuda_device_count() == 0); the cuda tests need a GPU\n");
    return kSkipped;
  }
  return forge_test::exit_status_with_leaks(session.run());
}
