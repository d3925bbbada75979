#pragma once
// Unchecked CPU kernels of the loss forwards (the nn family's contract:
// backend/kernels/nn.h).

#include "backend/device_runtime.h"
#include "backend/kernels/nn.h"

namespace forge::cpu {

using backend::ClassLoss;
using backend::ClassRows;
using backend::MseLoss;

void cross_entropy(detail::DeviceRuntime& rt, const ClassLoss& p);
void nll_loss(detail::DeviceRuntime& rt, const ClassLoss& p);
void mse_loss(detail::DeviceRuntime& rt, const MseLoss& p);

}  // namespace forge::cpu
