#pragma once
// The median the benchmarks report: the upper middle of the samples.

#include <algorithm>
#include <cstddef>
#include <vector>

inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
