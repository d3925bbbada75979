#include "forge/error.h"

// Note [Allocation failure at the API]
// A failed allocation reaches the caller as forge::Error with
// ErrorCode::out_of_memory and the name of the public call, whatever
// allocated: the pool and arenas report it themselves (they know the op),
// and every public call that can allocate on the heap (a tensor's
// bookkeeping, an autograd node, a container, a file's buffers) closes its
// body with FORGE_CATCH_OOM(op), a function-try-block handler that turns a
// std::bad_alloc into that error, or is one line returning a family's
// shared call that takes the op's name and closes with it (binary,
// unary_into, softmax_op, ...). The handler costs nothing until it runs.
// A public call made inside another one reports its own name (a backward
// that runs out of memory in a gradient's mul says [mul]).
// Inside forge, an allocation failure is an ordinary exception: every owner
// is RAII, so unwinding releases what the call took, and nothing that can
// allocate runs on a noexcept path (destructors, adopt_output, the exec-scope
// close). tests/fault_injection_test.cpp fails the heap allocations of the
// calling thread one at a time to keep it so.

namespace forge {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::out_of_range:
      return "out_of_range";
    case ErrorCode::shape:
      return "shape";
    case ErrorCode::dtype:
      return "dtype";
    case ErrorCode::device:
      return "device";
    case ErrorCode::out_of_memory:
      return "out_of_memory";
    case ErrorCode::contended:
      return "contended";
    case ErrorCode::stale_output:
      return "stale_output";
    case ErrorCode::backward:
      return "backward";
    case ErrorCode::io:
      return "io";
    case ErrorCode::not_implemented:
      return "not_implemented";
    case ErrorCode::distributed:
      return "distributed";
    case ErrorCode::internal:
      return "internal";
  }
  return "unknown";
}

namespace detail {

void assert_failed(const char* condition, const char* file, int line, const std::string& detail) {
  throw Error(ErrorCode::internal, cat("[internal] forge invariant broken: ", condition, " at ", file, ":", line,
                                       detail.empty() ? "" : ": ", detail));
}

void fail_out_of_memory(const char* op) {
  throw Error(ErrorCode::out_of_memory, cat("[", op, "] out of memory: the system refused an allocation"));
}

}  // namespace detail
}  // namespace forge
