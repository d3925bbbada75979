// The test runner, with the leak listener (leak_listener.h) checking that
// every test case ends with no outstanding pooled buffer.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "leak_listener.h"

int main(int argc, char* argv[]) { return forge_test::exit_status_with_leaks(Catch::Session().run(argc, argv)); }
