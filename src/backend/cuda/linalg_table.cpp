// The cuda backend's linalg family (backend/kernels/linalg.h): matmul
// through cuBLASLt/cuBLAS (gemm_cublas.cpp) for every floating dtype, 16-bit
// ones accumulating in f32; attention and dropout are forge's own kernels
// (attention_kernels.cu), every floating dtype.

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/gemm_cublas.h"
#include "backend/cuda/tables.h"

namespace forge::cuda {

void fill_linalg_table(backend::LinalgKernels& k) {
  k.matmul = {matmul, backend::kFloatDTypes};
  k.attention = {attention, backend::kFloatDTypes};
  k.dropout = {dropout, backend::kFloatDTypes};
}

}  // namespace forge::cuda
