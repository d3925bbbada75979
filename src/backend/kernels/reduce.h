#pragma once
// The reduce family of the kernel table (backend/kernels.h): its entries
// and the device-neutral arguments they take.

#include "backend/backend.h"
#include "backend/kernels/copy.h"

namespace forge::backend {

struct ReduceKernels {};

}  // namespace forge::backend
