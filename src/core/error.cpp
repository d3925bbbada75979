#include "forge/error.h"

namespace forge {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::out_of_range: return "out_of_range";
    case ErrorCode::shape: return "shape";
    case ErrorCode::dtype: return "dtype";
    case ErrorCode::device: return "device";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::contended: return "contended";
    case ErrorCode::stale_output: return "stale_output";
    case ErrorCode::backward: return "backward";
    case ErrorCode::io: return "io";
    case ErrorCode::not_implemented: return "not_implemented";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

namespace detail {

void assert_failed(const char* condition, const char* file, int line, const std::string& detail) {
  throw Error(ErrorCode::internal, cat("[internal] forge invariant broken: ", condition, " at ", file,
                                      ":", line, detail.empty() ? "" : ": ", detail));
}

}  // namespace detail
}  // namespace forge
