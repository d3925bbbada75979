#pragma once
// The nn family of the kernel table (backend/kernels.h): its entries
// and the device-neutral arguments they take.

#include "backend/backend.h"
#include "backend/kernels/copy.h"

namespace forge::backend {

struct NnKernels {};

}  // namespace forge::backend
