// The test runner, with a listener that checks every test case ends with no
// outstanding pooled buffer in any TestContext it made (support.h).

#define CATCH_CONFIG_RUNNER
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

}  // namespace

void track(forge::Runtime& runtime) { tracked().push_back(forge::Ref<forge::Runtime>::share(&runtime)); }

struct LeakListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    for (const auto& runtime : tracked()) {
      const forge::PoolStats s = runtime->pool().stats();
      if (s.outstanding != 0) {
        ++g_leaking_cases;
        std::fprintf(stderr, "LEAK: test case \"%s\" ended with %lld outstanding buffer(s), %zu live bytes\n",
                     stats.testInfo.name.c_str(), static_cast<long long>(s.outstanding), s.live_bytes);
      }
    }
    tracked().clear();
  }
};

CATCH_REGISTER_LISTENER(LeakListener)

}  // namespace forge_test

int main(int argc, char* argv[]) {
  const int failed = Catch::Session().run(argc, argv);
  if (forge_test::g_leaking_cases > 0) {
    std::fprintf(stderr, "%d test case(s) leaked pooled buffers\n", forge_test::g_leaking_cases);
    return failed > 0 ? failed : 1;
  }
  return failed;
}
