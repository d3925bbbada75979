// The cpu backend's conv family (backend/kernels/conv.h): the kernels of
// conv_kernels.cpp. conv2d and the backwards run in f32 and f64 (the ops and
// rules widen 16-bit tensors); the pools in every floating dtype.

#include "backend/cpu/conv_kernels.h"
#include "backend/cpu/tables.h"

namespace forge::cpu {
namespace {

constexpr backend::DTypeMask kF32F64 = backend::mask_of(DType::f32, DType::f64);

}  // namespace

void fill_conv_table(backend::ConvKernels& k) {
  k.conv2d = {conv2d, kF32F64};
  k.conv2d_backward = {conv2d_backward, kF32F64};
  k.max_pool2d = {max_pool2d, backend::kFloatDTypes};
  k.avg_pool2d = {avg_pool2d, backend::kFloatDTypes};
  k.max_pool2d_backward = {max_pool2d_backward, kF32F64};
  k.avg_pool2d_backward = {avg_pool2d_backward, kF32F64};
}

}  // namespace forge::cpu
