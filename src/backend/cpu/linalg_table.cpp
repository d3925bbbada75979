// The cpu backend's linalg family (backend/kernels/linalg.h): the batched
// GEMM driver of gemm.cpp and the attention and dropout kernels of
// attention_kernels.cpp, for every floating dtype (16-bit ones accumulate
// in f32); matmul also for int8 products keyed by a's dtype, u8 or i8.

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {

void fill_linalg_table(backend::LinalgKernels& k) {
  k.matmul = {matmul, static_cast<backend::DTypeMask>(backend::kFloatDTypes | backend::mask_of(DType::u8, DType::i8))};
  k.attention = {attention, backend::kFloatDTypes};
  k.dropout = {dropout, backend::kFloatDTypes};
}

}  // namespace forge::cpu
