#pragma once
// The conv entries cuDNN provides: cudnn/conv_cudnn.cpp when CMake finds
// cuDNN (cmake/forge_cuda.cmake), else cudnn/no_cudnn.cpp, which fills
// nothing (conv is then "not supported" on a CUDA device).

#include "backend/kernels/conv.h"

namespace forge::cuda {

void fill_cudnn_conv(backend::ConvKernels& k);

}  // namespace forge::cuda
