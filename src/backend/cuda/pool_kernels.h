#pragma once
// The cuda backend's pools (the conv family's max_pool2d, avg_pool2d and
// their gradients, backend/kernels/conv.h): pool_kernels.cu, forge's own
// kernels over pool_math.h's geometry.

#include "backend/device_runtime.h"
#include "backend/kernels/conv.h"

namespace forge::cuda {

void max_pool2d(detail::DeviceRuntime& dev, const backend::Pool2dProblem& p);
void avg_pool2d(detail::DeviceRuntime& dev, const backend::Pool2dProblem& p);
void max_pool2d_backward(detail::DeviceRuntime& dev, const backend::Pool2dBackwardProblem& p);
void avg_pool2d_backward(detail::DeviceRuntime& dev, const backend::Pool2dBackwardProblem& p);

}  // namespace forge::cuda
