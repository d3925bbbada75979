// The cpu backend's nn family (backend/kernels/nn.h).

#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_nn_table(backend::NnKernels&) {}

}  // namespace forge::cpu
