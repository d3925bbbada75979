#pragma once
// The sort family of the kernel table (backend/kernels.h): sorting and
// selection along one dim, binary search into sorted rows, and sampling
// from categorical rows, with the device-neutral arguments they take.
// Callers have validated dims, k, shapes, dtypes and aliasing; sort, topk
// and searchsorted are fetched with the input's dtype, multinomial with the
// probabilities'.
//
// Order (Note [Sort order]): values compare as numbers (-0 equals 0), NaN
// after every number (NaNs equal to each other), and equal values keep their
// input order, in both directions. This one total order makes every sort
// stable and every result (topk's choice among ties too) deterministic.

#include <cstddef>
#include <cstdint>
#include <random>

#include "backend/backend.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::backend {

// Sorts or selects along `dim` of x (`shape`, rank >= 1, shape[dim] > 0):
// for each line, the first k elements in order (ascending, or descending
// when `descending`), written to `values` (x's dtype; null: indices only)
// and their positions along dim to `indices` (i64). Both outputs have x's
// shape but k along dim; their strides are over x's rank.
struct SortArgs {
  Shape shape;
  int dim = 0;
  const std::byte* in = nullptr;
  DType dtype = DType::f32;
  Strides in_strides;
  std::byte* values = nullptr;
  Strides values_strides;
  std::byte* indices = nullptr;
  Strides indices_strides;
  std::int64_t k = 0;       // sort: shape[dim]
  bool descending = false;  // topk: largest
  bool sorted = true;       // topk: false writes the k chosen in index order
};

// For each element v of `values` (`shape`, strides over it), the number of
// elements of its row of the sorted sequence that are < v (or <= v when
// `right`): libtorch's lower and upper bound, NaN compared as libtorch does
// (a NaN value goes after everything). The row of position p starts at
// sequence + sum of p's index times sequence_strides (stride 0 on the last
// dim, and on every dim for a 1-D sequence) and holds sequence_len elements
// sequence_step apart. out is i64 or i32 (its dtype), strides over `shape`.
struct SearchArgs {
  Shape shape;
  const std::byte* values = nullptr;
  Strides values_strides;
  DType dtype = DType::f32;
  const std::byte* sequence = nullptr;
  Strides sequence_strides;
  std::int64_t sequence_len = 0;
  std::int64_t sequence_step = 1;
  std::byte* out = nullptr;
  Strides out_strides;
  DType out_dtype = DType::i64;
  bool right = false;
};

// `samples` draws from each of `rows` categorical distributions given by
// non-negative weights (a row of `categories`, any positive sum), with or
// without replacement, into out (i64). Draws come from `generator` in row
// order, so a seed gives the same samples on every backend and thread count.
struct MultinomialArgs {
  std::int64_t rows = 1;
  std::int64_t categories = 0;
  const std::byte* probs = nullptr;
  DType dtype = DType::f32;
  std::int64_t row_stride = 0, col_stride = 1;
  std::byte* out = nullptr;
  std::int64_t out_row_stride = 0, out_col_stride = 1;
  std::int64_t samples = 1;
  bool replacement = true;
};

// What makes a row of weights unusable (the kernel checks every row before
// it draws anything, so a refused call leaves the generator as it was).
enum class BadWeights : std::uint8_t { none, negative, non_finite, zero_sum, too_few_nonzero };
struct MultinomialCheck {
  BadWeights problem = BadWeights::none;
  std::int64_t row = -1;
  std::int64_t column = -1;  // negative, non_finite: the offending weight
  double value = 0;          // that weight, or the row's sum (zero_sum)
  std::int64_t nonzero = 0;  // too_few_nonzero: the row's count of positive weights
};

using SortFn = void(detail::DeviceRuntime& dev, const SortArgs& args);
using SearchFn = void(detail::DeviceRuntime& dev, const SearchArgs& args);
using MultinomialFn = MultinomialCheck(detail::DeviceRuntime& dev, const MultinomialArgs& args,
                                       std::mt19937_64* generator);

struct SortKernels {
  Entry<SortFn> sort;  // sort, argsort (k = shape[dim])
  Entry<SortFn> topk;
  Entry<SearchFn> searchsorted;
  Entry<MultinomialFn> multinomial;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("sort", k.sort);
    f("topk", k.topk);
    f("searchsorted", k.searchsorted);
    f("multinomial", k.multinomial);
  }
};

}  // namespace forge::backend
