#pragma once
// Test support: TestContext is an ExecContext whose runtime the leak listener
// (main.cpp) keeps watching, so that every test case must end with no
// outstanding pooled buffer; expect_error checks an Error's code and that its
// message starts with the operation.

#include <catch2/catch.hpp>

#include <string>

#include "forge/forge.h"

namespace forge_test {

// Registers a runtime; after the current test case the listener requires its
// pool to have no outstanding buffer.
void track(forge::Runtime& runtime);

class TestContext : public forge::ExecContext {
 public:
  TestContext() : TestContext(forge::ExecContextOptions{.threads = 2}) {}
  explicit TestContext(const forge::ExecContextOptions& options) : forge::ExecContext(options) { track(runtime()); }
};

// Runs fn, requires it to throw forge::Error with `code` and a message that
// starts with "[op]"; returns the message.
template <typename Fn>
std::string expect_error(forge::ErrorCode code, const std::string& op, Fn&& fn) {
  try {
    fn();
  } catch (const forge::Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == code);
    CHECK(std::string(e.what()).rfind("[" + op + "]", 0) == 0);
    return e.what();
  }
  FAIL("expected forge::Error(" << forge::to_string(code) << ") from [" << op << "]");
  return {};
}

}  // namespace forge_test

#define FORGE_REQUIRE_ERROR(code, op, ...) ::forge_test::expect_error(::forge::ErrorCode::code, op, [&] { __VA_ARGS__; })
