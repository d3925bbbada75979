// The cpu backend's linalg family (backend/kernels/linalg.h): the batched
// GEMM driver of gemm.cpp and the attention and dropout kernels of
// attention_kernels.cpp, for every floating dtype (16-bit ones accumulate
// in f32).

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_linalg_table(backend::LinalgKernels& k) {
  k.matmul = {matmul, backend::kFloatDTypes};
  k.attention = {attention, backend::kFloatDTypes};
  k.dropout = {dropout, backend::kFloatDTypes};
}

}  // namespace forge::cpu
