#pragma once
// Unchecked CPU kernels that move elements without arithmetic (gathers,
// index maps, triangles) and the one that adds (scatter_add). They work on
// element sizes, not dtypes, wherever no arithmetic happens, so one body
// serves every dtype of a width. Callers have validated every index.

#include <cstdint>

#include "backend/cpu/kernels.h"

namespace forge::cpu {

// out[i0, ..., ir] = src[m0(i0), ..., mr(ir)] over out_shape, where md is
// maps[d] (a table of out_shape[d] source indices, -1 meaning "write
// fill_value") or the identity when maps[d] is null. When inner_period > 0 the
// last dim reads source index (i mod inner_period) instead: a tiled row. out
// and src share a dtype; fill_value points to one element of it (or is null
// when no map holds -1). src.strides has out_shape's rank; negative strides
// (a flip) are fine.
void mapped_copy(detail::DeviceRuntime& rt, const Shape& out_shape, const Operand& out, const Operand& src,
                 const std::int64_t* const* maps, std::int64_t inner_period, const void* fill_value);

// For each of the `lead` positions p (row-major over lead_shape, whose out
// strides are lead_strides): out row p = src row rows[p], each row `row_len`
// elements; rows[p] is a validated row of src.
struct RowTake {
  Shape lead_shape;
  Strides lead_strides;  // out's strides over lead_shape
  std::int64_t row_len;
  std::int64_t out_col_stride;
  std::int64_t src_row_stride;
  std::int64_t src_col_stride;
};
void take_rows(detail::DeviceRuntime& rt, const RowTake& geo, const std::int64_t* rows, std::byte* out,
               const std::byte* src, std::size_t element_size);

// out[p] = src[p with dim replaced by index[p]] over index's shape.
// out/index/src strides are given over index's shape; src_dim_stride is src's
// stride along dim.
void gather(detail::DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& index, const Operand& src,
            std::int64_t src_dim_stride);

// out[p with dim replaced by index[p]] += src[p] over index's shape. `dim`
// is the dim of `shape` the index runs along; positions along it are summed
// in order, so the result is deterministic.
void scatter_add(detail::DeviceRuntime& rt, const Shape& shape, int dim, const Operand& out, const Operand& index,
                 const Operand& src, std::int64_t out_dim_stride);

// The triangle of each [R, C] plane of x kept (j - i >= diagonal for upper,
// <= for lower), zeros elsewhere; out may be x exactly.
void triangle(detail::DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& x,
              std::int64_t diagonal, bool upper);

}  // namespace forge::cpu
