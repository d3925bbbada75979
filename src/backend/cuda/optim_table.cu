// The cuda backend's optim family: what it runs and in which dtypes. An
// entry left empty is "not supported" (ErrorCode::device naming the op).

#include "backend/cuda/tables.h"

namespace forge::cuda {

void fill_optim_table(backend::OptimKernels& k) { (void)k; }

}  // namespace forge::cuda
