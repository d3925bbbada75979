// The cuda backend's conv family (backend/kernels/conv.h). Entries are
// filled as their kernels land; an empty entry is "not supported".

#include "backend/cuda/tables.h"

namespace forge::cuda {

void fill_conv_table(backend::ConvKernels& k) { (void)k; }

}  // namespace forge::cuda
