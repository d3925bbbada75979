// The cuda backend's conv family (backend/kernels/conv.h): conv2d and its
// backward through cuDNN (conv_cudnn.h), for every floating dtype, when the
// build found cuDNN. The pools are not filled yet ("not supported" on a
// CUDA device).

#include "backend/cuda/conv_cudnn.h"
#include "backend/cuda/tables.h"

namespace forge::cuda {

void fill_conv_table(backend::ConvKernels& k) { fill_cudnn_conv(k); }

}  // namespace forge::cuda
