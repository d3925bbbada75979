#pragma once
// Unchecked NCHW convolution and pooling kernels (the conv family,
// backend/kernels/conv.h). conv2d and the backwards take f32 and f64 (the
// ops widen 16-bit inputs first); the pools take every floating dtype,
// computing 16-bit ones in f32. Callers validate shapes, options and aliasing.

#include "backend/device_runtime.h"
#include "backend/kernels/conv.h"

namespace forge::cpu {

using backend::Conv2dBackwardProblem;
using backend::Conv2dProblem;
using backend::Pool2dBackwardProblem;
using backend::Pool2dProblem;
using backend::spatial_is_flat;
using backend::unit_window;
using backend::Window2d;

void conv2d(detail::DeviceRuntime& rt, const Conv2dProblem& p);
void max_pool2d(detail::DeviceRuntime& rt, const Pool2dProblem& p);
void avg_pool2d(detail::DeviceRuntime& rt, const Pool2dProblem& p);
void conv2d_backward(detail::DeviceRuntime& rt, const Conv2dBackwardProblem& p);
void max_pool2d_backward(detail::DeviceRuntime& rt, const Pool2dBackwardProblem& p);
void avg_pool2d_backward(detail::DeviceRuntime& rt, const Pool2dBackwardProblem& p);

}  // namespace forge::cpu
