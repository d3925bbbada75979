#pragma once
// The cuda backend's index-map copy and mask compactions (the indexing
// family's mapped_copy, compact_rows, nonzero and flag_rows entries,
// backend/kernels/indexing.h): mapped_copy.cu and compact_kernels.cu.

#include <cstddef>
#include <cstdint>

#include "backend/device_runtime.h"
#include "backend/kernels/indexing.h"

namespace forge::cuda {

void mapped_copy(detail::DeviceRuntime& dev, const Shape& out_shape, const backend::Operand& out,
                 const backend::Operand& src, const std::int64_t* const* maps, std::int64_t inner_period,
                 const void* fill_value);
void compact_rows(detail::DeviceRuntime& dev, std::int64_t n, std::size_t row_bytes, const std::uint8_t* flags,
                  const std::byte* src, std::byte* dst);
void nonzero(detail::DeviceRuntime& dev, const Shape& shape, const std::uint8_t* flags, std::int64_t* out);
void flag_rows(detail::DeviceRuntime& dev, std::int64_t items, std::int64_t width, const std::uint8_t* flags,
               std::int64_t* offsets, std::int64_t* columns);

}  // namespace forge::cuda
