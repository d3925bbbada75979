#pragma once
// The pieces of the training examples' progress line: a bar and a clock.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

namespace progress {

// "m:ss", rounded to the second.
inline std::string clock_time(double seconds) {
  const auto s = static_cast<long>(std::max(0.0, seconds) + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  return text;
}

// "=====>     ": `width` characters, filled in proportion to step / steps.
inline std::string bar(std::int64_t step, std::int64_t steps, int width = 30) {
  const int filled = static_cast<int>(width * step / std::max<std::int64_t>(steps, 1));
  std::string text(static_cast<std::size_t>(filled), '=');
  if (filled < width) text += '>' + std::string(static_cast<std::size_t>(width - filled - 1), ' ');
  return text;
}

}  // namespace progress
