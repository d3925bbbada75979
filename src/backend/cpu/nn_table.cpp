// The cpu backend's nn family (backend/kernels/nn.h): the fused forward rows
// of norm_kernels.cpp and the losses of loss_kernels.cpp for every floating
// dtype, and the gradients of nn_backward_kernels.cpp for f32 and f64 (the
// rules widen f16 and bf16 before they call them).

#include "backend/cpu/loss_kernels.h"
#include "backend/cpu/nn_backward_kernels.h"
#include "backend/cpu/reduce_kernels.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {
namespace {

constexpr backend::DTypeMask kF32F64 = backend::mask_of(DType::f32, DType::f64);

}  // namespace

void fill_nn_table(backend::NnKernels& k) {
  k.softmax = {softmax, backend::kFloatDTypes};
  k.layer_norm = {layer_norm, backend::kFloatDTypes};
  k.rms_norm = {rms_norm, backend::kFloatDTypes};
  k.cross_entropy = {cross_entropy, backend::kFloatDTypes};
  k.nll_loss = {nll_loss, backend::kFloatDTypes};
  k.mse_loss = {mse_loss, backend::kFloatDTypes};
  k.softmax_backward = {softmax_backward, kF32F64};
  k.norm_backward = {norm_backward, kF32F64};
  k.cross_entropy_backward = {cross_entropy_backward, kF32F64};
  k.nll_loss_backward = {nll_loss_backward, kF32F64};
}

}  // namespace forge::cpu
