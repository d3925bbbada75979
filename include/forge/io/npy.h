#pragma once
// NumPy .npy files: one array, a short Python-dict header (descr,
// fortran_order, shape), then the elements. Versions 1.0, 2.0 and 3.0 read;
// the writer picks 1.0 (2.0 only for a header too long for it).

#include <filesystem>

#include "forge/exec_context.h"
#include "forge/tensor.h"

namespace forge::io {

// Writes `t` (any layout; written packed, C order, little-endian) as '<f4',
// '<f8', '<f2', '<i4', '<i8', '|u1' or '|b1'. bf16 has no NumPy type:
// ErrorCode::dtype. Written to a temporary and renamed, as save_safetensors.
void save_npy(const std::filesystem::path& path, const Tensor& t);

// Reads an array of one of those types (either byte order; fortran_order
// arrays are transposed into C order) into a fresh tensor of `ctx`. A damaged
// or hostile file, or a type forge does not hold, is ErrorCode::io naming the
// file and the problem.
Tensor load_npy(ExecContext& ctx, const std::filesystem::path& path);

}  // namespace forge::io
