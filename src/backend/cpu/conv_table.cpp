// The cpu backend's conv family (backend/kernels/conv.h).

#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_conv_table(backend::ConvKernels&) {}

}  // namespace forge::cpu
