// The cpu backend's copy family (backend/kernels/copy.h).

#include "backend/cpu/kernels.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_copy_table(backend::CopyKernels& k) {
  k.copy_cast = {copy_cast, backend::kAllDTypes};
  k.fill = {fill, backend::kAllDTypes};
  k.generate = {generate, backend::kAllDTypes};
}

}  // namespace forge::cpu
