// The cpu backend's elementwise family (backend/kernels/elementwise.h): the
// kernels of elementwise_kernels.cpp, unary_kernels.cpp and
// unary_backward_kernels.cpp.

#include "backend/cpu/elementwise_kernels.h"
#include "backend/cpu/tables.h"
#include "backend/cpu/unary_backward_kernels.h"

namespace forge::cpu {

// The binary, unary and where kernels compute in every dtype (bool included:
// comparisons, logic, abs, sign, where and masked_fill of masks); the fused
// activation VJPs in f32 and f64 (their rules widen 16-bit floats first).
void fill_elementwise_table(backend::ElementwiseKernels& k) {
  k.binary_op = {binary_op, backend::kAllDTypes};
  k.binary_flat = {binary_flat, backend::kAllDTypes};
  k.binary_rows = {binary_rows, backend::kAllDTypes};
  k.unary_op = {unary_op, backend::kAllDTypes};
  k.unary_flat = {unary_flat, backend::kAllDTypes};
  k.where_op = {where_op, backend::kAllDTypes};
  k.unary_backward_flat = {unary_backward_flat, backend::mask_of(DType::f32, DType::f64)};
}

}  // namespace forge::cpu
