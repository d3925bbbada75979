// The cpu backend's indexing family (backend/kernels/indexing.h): the kernels
// of indexing_kernels.cpp and mask_kernels.cpp. Element moves take every
// dtype (they work on element widths), copy_slabs every one but bool (which
// cat copies with the copy family); the index checks take the index dtypes,
// one_hot its i64 output, the mask kernels their bool flags.

#include "backend/cpu/indexing_kernels.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {
namespace {

constexpr backend::DTypeMask kIndexDTypes = backend::mask_of(DType::i64, DType::i32);
constexpr backend::DTypeMask kBool = backend::mask_of(DType::boolean);

}  // namespace

void fill_indexing_table(backend::IndexingKernels& k) {
  k.find_bad_index = {find_bad_index, kIndexDTypes};
  k.max_index = {max_index, kIndexDTypes};
  k.mapped_copy = {mapped_copy, backend::kAllDTypes};
  k.take_rows = {take_rows, backend::kAllDTypes};
  k.gather = {gather, backend::kAllDTypes};
  k.scatter_add = {scatter_add, backend::kAllDTypes};
  k.copy_slabs = {copy_slabs, backend::kNumericDTypes};
  k.triangle = {triangle, backend::kAllDTypes};
  k.one_hot = {one_hot, backend::mask_of(DType::i64)};
  k.count_flags = {count_flags, kBool};
  k.compact_rows = {compact_rows, backend::kAllDTypes};
  k.nonzero = {nonzero, kBool};
  k.flag_rows = {flag_rows, kBool};
}

}  // namespace forge::cpu
