// The cuda backend's linalg family (backend/kernels/linalg.h). Entries are
// filled as their kernels land; an empty entry is "not supported".

#include "backend/cuda/tables.h"

namespace forge::cuda {

void fill_linalg_table(backend::LinalgKernels& k) { (void)k; }

}  // namespace forge::cuda
