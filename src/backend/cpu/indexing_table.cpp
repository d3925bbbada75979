// The cpu backend's indexing family (backend/kernels/indexing.h).

#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_indexing_table(backend::IndexingKernels&) {}

}  // namespace forge::cpu
