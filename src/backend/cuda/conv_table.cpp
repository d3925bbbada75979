// The cuda backend's conv family (backend/kernels/conv.h): conv2d and its
// backward through cuDNN (conv_cudnn.h), for every floating dtype, when the
// build found cuDNN; the pools are forge's own kernels (pool_kernels.cu),
// in the dtypes the cpu lists: every floating dtype forward, f32 and f64
// for the gradients.

#include "backend/cuda/conv_cudnn.h"
#include "backend/cuda/pool_kernels.h"
#include "backend/cuda/tables.h"

namespace forge::cuda {

void fill_conv_table(backend::ConvKernels& k) {
  fill_cudnn_conv(k);
  constexpr backend::DTypeMask kF32F64 = backend::mask_of(DType::f32, DType::f64);
  k.max_pool2d = {max_pool2d, backend::kFloatDTypes};
  k.avg_pool2d = {avg_pool2d, backend::kFloatDTypes};
  k.max_pool2d_backward = {max_pool2d_backward, kF32F64};
  k.avg_pool2d_backward = {avg_pool2d_backward, kF32F64};
}

}  // namespace forge::cuda
