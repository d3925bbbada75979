#pragma once
// Unchecked CPU kernels of the sort family (backend/kernels/sort.h): sort and
// topk along a dim, searchsorted, multinomial. Callers have validated dims,
// k, shapes, dtypes, weights' shape and aliasing.

#include <random>

#include "backend/device_runtime.h"
#include "backend/kernels/sort.h"

namespace forge::cpu {

void sort(detail::DeviceRuntime& rt, const backend::SortArgs& args);
void topk(detail::DeviceRuntime& rt, const backend::SortArgs& args);
void searchsorted(detail::DeviceRuntime& rt, const backend::SearchArgs& args);
backend::MultinomialCheck multinomial(detail::DeviceRuntime& rt, const backend::MultinomialArgs& args,
                                      std::mt19937_64* generator);

}  // namespace forge::cpu
