// The cuda backend's indexing family: what it runs and in which dtypes. An
// entry left empty is "not supported" (ErrorCode::device naming the op).

#include "backend/cuda/tables.h"

namespace forge::cuda {

void fill_indexing_table(backend::IndexingKernels& k) { (void)k; }

}  // namespace forge::cuda
