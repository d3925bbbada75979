#pragma once
// The indexing family of the kernel table (backend/kernels.h): kernels that
// move elements by index (gathers, index maps, row takes, slabs, triangles,
// one_hot), the one that adds (scatter_add), the index checks the ops make
// before them, and the mask compactions of the arena ops. Callers have
// validated shapes, dtypes and every index; the kernels trust them.

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/kernels/copy.h"

namespace forge::backend {

// For each of the positions p of lead_shape (row-major; out's strides over it
// are lead_strides): out row p = src row rows[p], each row `row_len` elements.
struct RowTake {
  Shape lead_shape;
  Strides lead_strides;  // out's strides over lead_shape
  std::int64_t row_len;
  std::int64_t out_col_stride;
  std::int64_t src_row_stride;
  std::int64_t src_col_stride;
};

// ---- index checks (index: i64 or i32, strides over `shape`) ----

// The first logical position (row-major over shape) whose index is outside
// [0, bound) and, when `allowed` is not null, not *allowed; -1 when none.
// *value receives the index found there.
using FindBadIndexFn = std::int64_t(detail::DeviceRuntime& dev, const Shape& shape, const Operand& index,
                                    std::int64_t bound, const std::int64_t* allowed, std::int64_t* value);
// The largest index of a non-empty index tensor; *any_negative: whether any is negative.
using MaxIndexFn = std::int64_t(detail::DeviceRuntime& dev, const Shape& shape, const Operand& index,
                                bool* any_negative);

// ---- element moves ----

// out[i0, ..., ir] = src[m0(i0), ..., mr(ir)] over out_shape, where md is
// maps[d] (a table of out_shape[d] source indices, -1 meaning "write
// fill_value") or the identity when maps[d] is null. When inner_period > 0 the
// last dim reads source index (i mod inner_period) instead: a tiled row. out
// and src share a dtype; fill_value points to one element of it (or is null
// when no map holds -1). src.strides has out_shape's rank; negative strides
// (a flip) are fine; maps has an entry per dim of out_shape.
using MappedCopyFn = void(detail::DeviceRuntime& dev, const Shape& out_shape, const Operand& out, const Operand& src,
                          const std::int64_t* const* maps, std::int64_t inner_period, const void* fill_value);
// Row takes (RowTake) of elements of `dtype`; rows[p] is a valid row of src.
using TakeRowsFn = void(detail::DeviceRuntime& dev, const RowTake& geo, DType dtype, const std::int64_t* rows,
                        std::byte* out, const std::byte* src);
// out[p] = src[p with dim replaced by index[p]] over `shape` (index's); out,
// index and src strides are over that shape, src's along the gathered dim
// being 0 there and src_dim_stride here. out and src share a dtype.
using GatherFn = void(detail::DeviceRuntime& dev, const Shape& shape, const Operand& out, const Operand& index,
                      const Operand& src, std::int64_t src_dim_stride);
// out[p with dim replaced by index[p]] += src[p] over `shape` (index's); `dim`
// is the dim the index runs along; out's stride along it is 0 in out.strides
// and out_dim_stride here. Positions along dim are summed in order, so the
// result is deterministic. out and src share a dtype (bool: logical or).
using ScatterAddFn = void(detail::DeviceRuntime& dev, const Shape& shape, int dim, const Operand& out,
                          const Operand& index, const Operand& src, std::int64_t out_dim_stride);
// For o in [0, outer): chunk_bytes bytes from src + o * chunk_bytes to
// dst + o * dst_row_bytes (cat's packed inputs into a packed output; a fast
// path: cat uses the copy family where a backend leaves it out).
using CopySlabsFn = void(detail::DeviceRuntime& dev, std::int64_t outer, std::size_t chunk_bytes,
                         std::size_t dst_row_bytes, std::byte* dst, const std::byte* src);
// The triangle of each [R, C] plane (the last two dims of shape) of x kept
// (j - i >= diagonal for upper, <= for lower), zeros elsewhere; out may be x
// exactly. out and x share a dtype.
using TriangleFn = void(detail::DeviceRuntime& dev, const Shape& shape, const Operand& out, const Operand& x,
                        std::int64_t diagonal, bool upper);
// out (i64, already zero, shape [..., C]): out[p, classes[p]] = 1 for each of
// the n = numel / C leading positions p (row-major); classes[p] in [0, C).
using OneHotFn = void(detail::DeviceRuntime& dev, const Shape& out_shape, const Operand& out,
                      const std::int64_t* classes);

// ---- mask compactions (flags: packed bool bytes, each 0 or 1) ----

// How many of the n flags are set.
using CountFlagsFn = std::int64_t(detail::DeviceRuntime& dev, std::int64_t n, const std::uint8_t* flags);
// Copies the rows of src ([n, row_bytes] packed) whose flag is set, in order,
// to dst (packed).
using CompactRowsFn = void(detail::DeviceRuntime& dev, std::int64_t n, std::size_t row_bytes, const std::uint8_t* flags,
                           const std::byte* src, std::byte* dst);
// The multi-index (rank entries) of each set flag of a packed tensor of
// `shape`, in order, into out (i64, [count, rank] packed).
using NonzeroFn = void(detail::DeviceRuntime& dev, const Shape& shape, const std::uint8_t* flags, std::int64_t* out);
// flags [items, width] packed: offsets[b] = the set flags of rows before b
// (items + 1 entries); columns, unless null, the column of every set flag,
// row by row.
using FlagRowsFn = void(detail::DeviceRuntime& dev, std::int64_t items, std::int64_t width, const std::uint8_t* flags,
                        std::int64_t* offsets, std::int64_t* columns);

struct IndexingKernels {
  // get() with the index's dtype (i64 or i32).
  Entry<FindBadIndexFn> find_bad_index;
  Entry<MaxIndexFn> max_index;
  // get() with out's dtype.
  Entry<MappedCopyFn> mapped_copy;  // index_select, repeat, flip, pad
  Entry<TakeRowsFn> take_rows;      // embedding
  Entry<GatherFn> gather;
  Entry<ScatterAddFn> scatter_add;
  Entry<CopySlabsFn> copy_slabs;  // cat
  Entry<TriangleFn> triangle;     // triu, tril
  Entry<OneHotFn> one_hot;
  // get() with the flags' dtype (bool), compact_rows with the rows'.
  Entry<CountFlagsFn> count_flags;
  Entry<CompactRowsFn> compact_rows;  // masked_select, rows_where, rows_where_per_item
  Entry<NonzeroFn> nonzero;
  Entry<FlagRowsFn> flag_rows;  // nonzero_per_row, rows_where_per_item

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("find_bad_index", k.find_bad_index);
    f("max_index", k.max_index);
    f("mapped_copy", k.mapped_copy);
    f("take_rows", k.take_rows);
    f("gather", k.gather);
    f("scatter_add", k.scatter_add);
    f("copy_slabs", k.copy_slabs);
    f("triangle", k.triangle);
    f("one_hot", k.one_hot);
    f("count_flags", k.count_flags);
    f("compact_rows", k.compact_rows);
    f("nonzero", k.nonzero);
    f("flag_rows", k.flag_rows);
  }
};

}  // namespace forge::backend
