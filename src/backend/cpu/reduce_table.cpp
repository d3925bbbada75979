// The cpu backend's reduce family (backend/kernels/reduce.h).

#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_reduce_table(backend::ReduceKernels&) {}

}  // namespace forge::cpu
