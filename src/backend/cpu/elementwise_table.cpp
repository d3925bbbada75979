// The cpu backend's elementwise family (backend/kernels/elementwise.h).

#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_elementwise_table(backend::ElementwiseKernels&) {}

}  // namespace forge::cpu
