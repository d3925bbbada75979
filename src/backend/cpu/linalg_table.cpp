// The cpu backend's linalg family (backend/kernels/linalg.h): the batched
// GEMM driver of gemm.cpp, for every floating dtype (16-bit ones accumulate
// in f32).

#include "backend/cpu/gemm.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_linalg_table(backend::LinalgKernels& k) { k.matmul = {matmul, backend::kFloatDTypes}; }

}  // namespace forge::cpu
