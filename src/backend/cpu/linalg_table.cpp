// The cpu backend's linalg family (backend/kernels/linalg.h).

#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_linalg_table(backend::LinalgKernels&) {}

}  // namespace forge::cpu
