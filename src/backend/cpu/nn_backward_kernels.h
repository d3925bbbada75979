#pragma once
// Unchecked CPU kernels of the neural-network ops' gradients: the row-wise
// softmax and normalization backwards and the fused class-loss backwards
// (the nn family's contract: backend/kernels/nn.h).

#include <cstddef>
#include <cstdint>

#include "backend/device_runtime.h"
#include "backend/kernels/nn.h"
#include "forge/dtype.h"

namespace forge::cpu {

using backend::ClassLossBackward;
using backend::ClassRows;
using backend::NormBackward;

void softmax_backward(detail::DeviceRuntime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* y,
                      const std::byte* g, std::byte* dx, bool log);
void norm_backward(detail::DeviceRuntime& rt, const NormBackward& p);
void cross_entropy_backward(detail::DeviceRuntime& rt, const ClassLossBackward& p);
void nll_loss_backward(detail::DeviceRuntime& rt, const ClassLossBackward& p);

}  // namespace forge::cpu
