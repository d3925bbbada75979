// The cpu backend's sort family (backend/kernels/sort.h): sort, topk and
// searchsorted for every dtype, multinomial for the floating ones (the op
// refuses other weights before it gets here).

#include "backend/cpu/sort_kernels.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_sort_table(backend::SortKernels& k) {
  k.sort = {sort, backend::kAllDTypes};
  k.topk = {topk, backend::kAllDTypes};
  k.searchsorted = {searchsorted, backend::kAllDTypes};
  k.multinomial = {multinomial, backend::kFloatDTypes};
}

}  // namespace forge::cpu
