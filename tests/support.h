#pragma once
// Test support: TestContext is an ExecContext whose runtime the leak listener
// (main.cpp) keeps watching, so that every test case must end with no
// outstanding pooled buffer; expect_error checks an Error's code and that its
// message starts with the operation.

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

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

inline constexpr forge::DType kAllDTypes[] = {forge::DType::f32,  forge::DType::f64,     forge::DType::f16,
                                              forge::DType::bf16, forge::DType::i32,     forge::DType::i64,
                                              forge::DType::u8,   forge::DType::boolean, forge::DType::i8};
inline constexpr forge::DType kFloatDTypes[] = {forge::DType::f32, forge::DType::f64, forge::DType::f16,
                                                forge::DType::bf16};

inline forge::ExecContextOptions context_options(int threads, std::optional<std::uint64_t> seed = {},
                                                 std::optional<std::size_t> max_cached_bytes = {},
                                                 forge::Device device = forge::Device::cpu()) {
  return {.device = device, .threads = threads, .seed = seed, .max_cached_bytes = max_cached_bytes};
}

// Sets an environment variable (nullptr: unsets it) for the lifetime of the
// guard and restores the previous value, or its absence, afterwards.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~EnvGuard() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A dataset whose row i (of `width` values) is filled with i and whose
// target i is i, so that a batch names the samples it holds.
struct NumberedDataset {
  forge::Tensor inputs, targets;
};
inline NumberedDataset numbered_dataset(forge::ExecContext& ctx, std::int64_t n, std::int64_t width) {
  std::vector<float> rows;
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < width; ++j) rows.push_back(static_cast<float>(i));
    ids.push_back(i);
  }
  return {ctx.from_vector(rows, {n, width}), ctx.from_vector(ids, {n})};
}

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

#define FORGE_REQUIRE_ERROR(code, op, ...) \
  ::forge_test::expect_error(::forge::ErrorCode::code, op, [&] { __VA_ARGS__; })
