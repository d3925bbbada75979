#pragma once
// forge::Error and the two checking macros.
//
// FORGE_CHECK(cond, code, op, args...) reports a caller mistake: always on,
// throws forge::Error whose message is "[op] " followed by args streamed
// together. FORGE_ASSERT(cond, args...) marks one of forge's own invariants;
// it also throws (ErrorCode::internal) rather than aborting the host process.
// FORGE_CATCH_OOM(op) closes the function-try-block of a public call, so that
// an allocation failure anywhere inside it reaches the caller as
// ErrorCode::out_of_memory naming the call (Note [Allocation failure at the
// API] in src/core/error.cpp).

#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace forge {

enum class ErrorCode {
  invalid_argument,  // a value the call cannot accept (bad size, null arena, ...)
  out_of_range,      // an index, dim or bound outside what exists
  shape,             // shapes that do not match or broadcast
  dtype,             // a dtype the call does not take
  device,            // wrong device, or tensors/arenas of two contexts
  out_of_memory,     // the system (or a device) refused an allocation
  contended,         // an arena already serving another call
  stale_output,      // a tensor viewing an arena region a later call rewound
  backward,          // autograd misuse (freed graph, modified saved tensor)
  io,                // a file that cannot be read, written or trusted
  not_implemented,   // a valid request forge does not support yet
  distributed,       // a collective that failed, timed out or disagreed across ranks
  internal,          // a broken invariant inside forge
};

std::string_view to_string(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, std::string_view op, const Args&... args) {
  throw Error(code, cat("[", op, "] ", args...));
}

[[noreturn]] void assert_failed(const char* condition, const char* file, int line, const std::string& detail);

// Throws ErrorCode::out_of_memory: "[op] out of memory ...".
[[noreturn]] void fail_out_of_memory(const char* op);

}  // namespace detail
}  // namespace forge

#define FORGE_CHECK(cond, code, op, ...)                                \
  do {                                                                  \
    if (!(cond)) [[unlikely]]                                           \
      ::forge::detail::fail(::forge::ErrorCode::code, op, __VA_ARGS__); \
  } while (0)

#define FORGE_FAIL(code, op, ...) ::forge::detail::fail(::forge::ErrorCode::code, op, __VA_ARGS__)

//   Tensor matmul(const Tensor& a, const Tensor& b) try { ... } FORGE_CATCH_OOM("matmul")
#define FORGE_CATCH_OOM(op)                  \
  catch (const std::bad_alloc&) {            \
    ::forge::detail::fail_out_of_memory(op); \
  }

#define FORGE_ASSERT(cond, ...)                                                                                       \
  do {                                                                                                                \
    if (!(cond)) [[unlikely]]                                                                                         \
      ::forge::detail::assert_failed(#cond, __FILE__, __LINE__, ::forge::detail::cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
