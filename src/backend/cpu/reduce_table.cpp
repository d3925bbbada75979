// The cpu backend's reduce family (backend/kernels/reduce.h): the reductions
// of reduce_kernels.cpp and the scans of scan_kernels.cpp, for every dtype
// (the ops refuse the integer and bool inputs of the floating-only
// reductions before they get here).

#include "backend/cpu/reduce_kernels.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_reduce_table(backend::ReduceKernels& k) {
  k.reduce = {reduce, backend::kAllDTypes};
  k.arg_reduce = {arg_reduce, backend::kAllDTypes};
  k.cumsum = {cumsum, backend::kAllDTypes};
}

}  // namespace forge::cpu
