// The leak listener (leak_listener.h). A context on a device serves the host
// too, so both of its pools are checked.

#include "leak_listener.h"

// The reporter interfaces, which Catch otherwise declares only where its
// implementation is compiled (the runners' main.cpp).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <cstdio>
#include <vector>

#include "support.h"

namespace forge_test {
namespace {

std::vector<forge::Ref<forge::Runtime>>& tracked() {
  static std::vector<forge::Ref<forge::Runtime>> runtimes;
  return runtimes;
}
int g_leaking_cases = 0;

// Counts the case as leaking when `pool` has buffers outstanding.
bool report_outstanding(const Catch::TestCaseStats& stats, const forge::PoolStats& s, forge::Device device) {
  if (s.outstanding == 0) return false;
  std::fprintf(stderr, "LEAK: test case \"%s\" ended with %lld outstanding buffer(s), %zu live bytes on %s\n",
               stats.testInfo.name.c_str(), static_cast<long long>(s.outstanding), s.live_bytes, device.str().c_str());
  return true;
}

}  // namespace

void track(forge::Runtime& runtime) { tracked().push_back(forge::Ref<forge::Runtime>::share(&runtime)); }

struct LeakListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    for (const auto& runtime : tracked()) {
      bool leaked = report_outstanding(stats, runtime->pool().stats(), forge::Device::cpu());
      const forge::Device device = runtime->device();
      if (!device.is_cpu()) leaked = report_outstanding(stats, runtime->pool(device).stats(), device) || leaked;
      if (leaked) ++g_leaking_cases;
    }
    tracked().clear();
  }
};

CATCH_REGISTER_LISTENER(LeakListener)

int exit_status_with_leaks(int failed) {
  if (g_leaking_cases == 0) return failed;
  std::fprintf(stderr, "%d test case(s) leaked pooled buffers\n", g_leaking_cases);
  return failed > 0 ? failed : 1;
}

}  // namespace forge_test
