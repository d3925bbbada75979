// The conv entries of a CUDA build made without cuDNN (not found at
// configure time): none, so conv2d on a CUDA device says it is not supported.

#include "backend/cuda/conv_cudnn.h"

namespace forge::cuda {

void fill_cudnn_conv(backend::ConvKernels&) {}

}  // namespace forge::cuda
