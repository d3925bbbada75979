#pragma once
// The linalg family of the kernel table (backend/kernels.h): its entries
// and the device-neutral arguments they take: batched matrix products. The
// ops validate shapes, dtypes and aliasing before any entry runs.

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/kernels/copy.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::backend {

// One operand of a batched product: its first element, its strides over the
// batch shape (0 where it broadcasts) and its row and column strides, all in
// elements.
struct MatrixOperand {
  std::byte* data = nullptr;
  Strides batch_strides;
  std::int64_t rs = 0, cs = 0;
};

// c[i] = beta * bias[i] + alpha * a[i] b[i] for every index i of `batch`;
// without a bias (bias.data null) c[i] = alpha * a[i] b[i]. Every operand has
// `dtype` (f32, f64, f16 or bf16; the 16-bit ones accumulate in f32). c must
// not overlap the others.
struct MatmulProblem {
  DType dtype = DType::f32;
  Shape batch;
  std::int64_t m = 0, n = 0, k = 0;
  MatrixOperand a, b, c, bias;
  double alpha = 1, beta = 1;
};

using MatmulFn = void(detail::DeviceRuntime& dev, const MatmulProblem& p);

// get() with the dtype of the operands.
struct LinalgKernels {
  Entry<MatmulFn> matmul;
};

}  // namespace forge::backend
