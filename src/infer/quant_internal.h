#pragma once
// What the PackedMatrix, linear and checkpoint sources share: the storage a
// format takes, and the checks on host-only arguments.

#include <cstdint>

#include "forge/infer/quant.h"

namespace forge::infer::detail {

// The storage's dtype (f32, bf16, or u8 bytes) and its row length in elements.
DType storage_dtype(WeightFormat format) noexcept;
std::int64_t storage_cols(WeightFormat format, std::int64_t cols);
// Defined, not stale, and on the host (ErrorCode::device otherwise: these
// kernels have no device implementation).
void check_host(const char* op, const Tensor& t, const char* name);
// Non-negative extents, cols % 32 == 0 for a block format, and a byte size
// forge can allocate.
void check_matrix_extents(const char* op, WeightFormat format, std::int64_t rows, std::int64_t cols);
// An uninitialised packed host tensor outside the pool (owned memory).
Tensor owned_host(Runtime& rt, const Shape& shape, DType dtype, const char* op);

}  // namespace forge::infer::detail

#include "infer/quant_kernels.h"

namespace forge::infer::detail {

// linear with a chosen kernel (linear takes best_kernel): for tests that
// hold the portable and native kernels to each other.
Tensor linear_using(LinearKernel kernel, const Tensor& x, const PackedMatrix& w, const Tensor& bias);

}  // namespace forge::infer::detail
