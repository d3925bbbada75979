#pragma once
// Unchecked CPU kernels of the indexing family (backend/kernels/indexing.h):
// they move elements without arithmetic (gathers, index maps, triangles) and
// one adds (scatter_add). They work on element sizes, not dtypes, wherever no
// arithmetic happens, so one body serves every dtype of a width. Callers have
// validated every index. The mask compactions are in mask_kernels.cpp.

#include <cstdint>

#include "backend/cpu/kernels.h"
#include "backend/kernels/indexing.h"

namespace forge::cpu {

using backend::RowTake;

std::int64_t find_bad_index(detail::DeviceRuntime& rt, const Shape& shape, const Operand& index, std::int64_t bound,
                            const std::int64_t* allowed, std::int64_t* value);
std::int64_t max_index(detail::DeviceRuntime& rt, const Shape& shape, const Operand& index, bool* any_negative);

void mapped_copy(detail::DeviceRuntime& rt, const Shape& out_shape, const Operand& out, const Operand& src,
                 const std::int64_t* const* maps, std::int64_t inner_period, const void* fill_value);
void take_rows(detail::DeviceRuntime& rt, const RowTake& geo, DType dtype, const std::int64_t* rows, std::byte* out,
               const std::byte* src);
void gather(detail::DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& index, const Operand& src,
            std::int64_t src_dim_stride);
void scatter_add(detail::DeviceRuntime& rt, const Shape& shape, int dim, const Operand& out, const Operand& index,
                 const Operand& src, std::int64_t out_dim_stride);
void copy_slabs(detail::DeviceRuntime& rt, std::int64_t outer, std::size_t chunk_bytes, std::size_t dst_row_bytes,
                std::byte* dst, const std::byte* src);
void triangle(detail::DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& x,
              std::int64_t diagonal, bool upper);
void one_hot(detail::DeviceRuntime& rt, const Shape& out_shape, const Operand& out, const std::int64_t* classes);

// mask_kernels.cpp
std::int64_t count_flags(detail::DeviceRuntime& rt, std::int64_t n, const std::uint8_t* flags);
void compact_rows(detail::DeviceRuntime& rt, std::int64_t n, std::size_t row_bytes, const std::uint8_t* flags,
                  const std::byte* src, std::byte* dst);
void nonzero(detail::DeviceRuntime& rt, const Shape& shape, const std::uint8_t* flags, std::int64_t* out);
void flag_rows(detail::DeviceRuntime& rt, std::int64_t items, std::int64_t width, const std::uint8_t* flags,
               std::int64_t* offsets, std::int64_t* columns);

}  // namespace forge::cpu
