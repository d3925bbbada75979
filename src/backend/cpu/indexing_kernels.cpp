#include "backend/cpu/indexing_kernels.h"

#include <cstring>
#include <limits>

#include "core/convert.h"

namespace forge::cpu {
namespace {

// Calls fn with an unsigned integer type of the element size: kernels that
// only move elements are compiled once per width, not once per dtype.
template <typename Fn>
void dispatch_width(std::size_t element_size, Fn&& fn) {
  switch (element_size) {
    case 1:
      fn(std::uint8_t{});
      break;
    case 2:
      fn(std::uint16_t{});
      break;
    case 4:
      fn(std::uint32_t{});
      break;
    default:
      fn(std::uint64_t{});
      break;
  }
}

// Rows per task so that a task covers about kGrainElements elements.
std::int64_t row_grain(std::int64_t row_len) {
  return std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(row_len, 1));
}

template <typename S>
void mapped_copy_impl(detail::DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& src,
                      const std::int64_t* const* maps, std::int64_t period, const void* fill_value) {
  const int r = shape.rank();
  S fill{};
  if (fill_value) std::memcpy(&fill, fill_value, sizeof(S));
  S* const o = reinterpret_cast<S*>(out.data);
  const S* const s = reinterpret_cast<const S*>(src.data);
  if (r == 0) {
    *o = *s;
    return;
  }
  const std::int64_t inner = shape[r - 1], rows = inner == 0 ? 0 : shape.numel() / inner;
  const std::int64_t os = out.strides[r - 1], ss = src.strides[r - 1];
  const std::int64_t* inner_map = maps[r - 1];
  // A constant pad's inner map is fill, then a run of consecutive sources,
  // then fill: copy the run as a block instead of element by element.
  std::int64_t run_lo = 0, run_hi = 0, run_src = 0;
  if (inner_map) {
    while (run_lo < inner && inner_map[run_lo] < 0) ++run_lo;
    run_hi = run_lo;
    run_src = run_lo < inner ? inner_map[run_lo] : 0;
    while (run_hi < inner && inner_map[run_hi] == run_src + (run_hi - run_lo)) ++run_hi;
    bool tail_filled = true;
    for (std::int64_t j = run_hi; j < inner && tail_filled; ++j) tail_filled = inner_map[j] < 0;
    if (tail_filled) inner_map = nullptr;
  }
  const bool blocked = maps[r - 1] && !inner_map;
  rt.parallel_for(rows, row_grain(inner), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      std::int64_t rest = row, oo = 0, so = 0;
      bool filled = false;
      for (int d = r - 2; d >= 0; --d) {
        const std::int64_t i = rest % shape[d];
        rest /= shape[d];
        oo += i * out.strides[d];
        const std::int64_t m = maps[d] ? maps[d][i] : i;
        if (m < 0) filled = true;
        so += m * src.strides[d];
      }
      S* dst = o + oo;
      const S* from = s + so;
      if (filled) {
        for (std::int64_t j = 0; j < inner; ++j) dst[j * os] = fill;
      } else if (blocked) {
        for (std::int64_t j = 0; j < run_lo; ++j) dst[j * os] = fill;
        if (os == 1 && ss == 1) {
          std::memcpy(dst + run_lo, from + run_src, static_cast<std::size_t>(run_hi - run_lo) * sizeof(S));
        } else {
          for (std::int64_t j = run_lo; j < run_hi; ++j) dst[j * os] = from[(run_src + j - run_lo) * ss];
        }
        for (std::int64_t j = run_hi; j < inner; ++j) dst[j * os] = fill;
      } else if (inner_map) {
        for (std::int64_t j = 0; j < inner; ++j) {
          const std::int64_t m = inner_map[j];
          dst[j * os] = m < 0 ? fill : from[m * ss];
        }
      } else if (period > 0) {
        for (std::int64_t j = 0; j < inner; j += period) {
          const std::int64_t n = std::min(period, inner - j);
          if (os == 1 && ss == 1) {
            std::memcpy(dst + j, from, static_cast<std::size_t>(n) * sizeof(S));
          } else {
            for (std::int64_t k = 0; k < n; ++k) dst[(j + k) * os] = from[k * ss];
          }
        }
      } else if (os == 1 && ss == 1) {
        std::memcpy(dst, from, static_cast<std::size_t>(inner) * sizeof(S));
      } else {
        for (std::int64_t j = 0; j < inner; ++j) dst[j * os] = from[j * ss];
      }
    }
  });
}

template <typename S>
void take_rows_impl(detail::DeviceRuntime& rt, const RowTake& g, const std::int64_t* rows, std::byte* out,
                    const std::byte* src) {
  const std::int64_t n = g.lead_shape.numel(), len = g.row_len;
  S* const o = reinterpret_cast<S*>(out);
  const S* const s = reinterpret_cast<const S*>(src);
  const bool packed = g.out_col_stride == 1 && g.src_col_stride == 1;
  rt.parallel_for(n, row_grain(len), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      std::int64_t rest = p, oo = 0;
      for (int d = g.lead_shape.rank() - 1; d >= 0; --d) {
        oo += (rest % g.lead_shape[d]) * g.lead_strides[d];
        rest /= g.lead_shape[d];
      }
      S* dst = o + oo;
      const S* from = s + rows[p] * g.src_row_stride;
      if (packed) {
        std::memcpy(dst, from, static_cast<std::size_t>(len) * sizeof(S));
      } else {
        for (std::int64_t j = 0; j < len; ++j) dst[j * g.out_col_stride] = from[j * g.src_col_stride];
      }
    }
  });
}

template <typename Fn>
void dispatch_index(DType t, Fn&& fn) {
  if (t == DType::i32)
    fn(std::int32_t{});
  else
    fn(std::int64_t{});
}

// Calls fn(value, pos) for each index in logical (row-major) order, inline,
// until it returns false.
template <typename Fn>
void for_each_index(const Shape& shape, const Operand& index, Fn&& fn) {
  if (shape.numel() == 0) return;
  const Strides* const strides[1] = {&index.strides};
  const StridedLoop<1> loop(shape, strides);
  const std::int64_t s = loop.strides[0].back(), inner = loop.inner(), rows = loop.shape.numel() / inner;
  dispatch_index(index.dtype, [&](auto tag) {
    using I = decltype(tag);
    const I* const p = reinterpret_cast<const I*>(index.data);
    for (std::int64_t row = 0; row < rows; ++row) {
      std::int64_t off[1];
      loop.row_offsets(row, off);
      for (std::int64_t k = 0; k < inner; ++k)
        if (!fn(static_cast<std::int64_t>(p[off[0] + k * s]), row * inner + k)) return;
    }
  });
}

}  // namespace

std::int64_t find_bad_index(detail::DeviceRuntime&, const Shape& shape, const Operand& index, std::int64_t bound,
                            const std::int64_t* allowed, std::int64_t* value) {
  std::int64_t found = -1;
  for_each_index(shape, index, [&](std::int64_t v, std::int64_t pos) {
    if ((v >= 0 && v < bound) || (allowed && v == *allowed)) return true;
    found = pos;
    *value = v;
    return false;
  });
  return found;
}

std::int64_t max_index(detail::DeviceRuntime&, const Shape& shape, const Operand& index, bool* any_negative) {
  std::int64_t m = std::numeric_limits<std::int64_t>::min();
  bool negative = false;
  for_each_index(shape, index, [&](std::int64_t v, std::int64_t) {
    m = std::max(m, v);
    negative = negative || v < 0;
    return true;
  });
  *any_negative = negative;
  return m;
}

void mapped_copy(detail::DeviceRuntime& rt, const Shape& out_shape, const Operand& out, const Operand& src,
                 const std::int64_t* const* maps, std::int64_t inner_period, const void* fill_value) {
  dispatch_width(dtype_size(out.dtype), [&](auto tag) {
    mapped_copy_impl<decltype(tag)>(rt, out_shape, out, src, maps, inner_period, fill_value);
  });
}

void take_rows(detail::DeviceRuntime& rt, const RowTake& geo, DType dtype, const std::int64_t* rows, std::byte* out,
               const std::byte* src) {
  dispatch_width(dtype_size(dtype), [&](auto tag) { take_rows_impl<decltype(tag)>(rt, geo, rows, out, src); });
}

void gather(detail::DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& index, const Operand& src,
            std::int64_t src_dim_stride) {
  const Strides* const strides[3] = {&out.strides, &index.strides, &src.strides};
  const StridedLoop<3> loop(shape, strides);
  const std::int64_t so = loop.strides[0].back(), si = loop.strides[1].back(), ss = loop.strides[2].back();
  dispatch_width(dtype_size(out.dtype), [&](auto tag) {
    using S = decltype(tag);
    dispatch_index(index.dtype, [&](auto itag) {
      using I = decltype(itag);
      for_each_run(rt, loop, [&](const std::int64_t(&off)[3], std::int64_t n) {
        S* o = reinterpret_cast<S*>(out.data) + off[0];
        const I* ix = reinterpret_cast<const I*>(index.data) + off[1];
        const S* s = reinterpret_cast<const S*>(src.data) + off[2];
        for (std::int64_t k = 0; k < n; ++k)
          o[k * so] = s[k * ss + static_cast<std::int64_t>(ix[k * si]) * src_dim_stride];
      });
    });
  });
}

void scatter_add(detail::DeviceRuntime& rt, const Shape& shape, int dim, const Operand& out, const Operand& index,
                 const Operand& src, std::int64_t out_dim_stride) {
  // Lines along dim are independent (they write disjoint elements of out), so
  // they run in parallel; each line runs in order.
  Shape lead;
  Strides ls[3];
  const Operand* ops[3] = {&out, &index, &src};
  for (int d = 0; d < shape.rank(); ++d) {
    if (d == dim) continue;
    lead.push_back(shape[d]);
    for (int k = 0; k < 3; ++k) ls[k].push_back(ops[k]->strides[d]);
  }
  const std::int64_t len = shape[dim], lines = len == 0 ? 0 : shape.numel() / len;
  const std::int64_t is = index.strides[dim], ss = src.strides[dim];
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(index.dtype, [&](auto itag) {
      using I = decltype(itag);
      rt.parallel_for(lines, row_grain(len), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t line = begin; line < end; ++line) {
          std::int64_t rest = line, off[3] = {0, 0, 0};
          for (int d = lead.rank() - 1; d >= 0; --d) {
            const std::int64_t i = rest % lead[d];
            rest /= lead[d];
            for (int k = 0; k < 3; ++k) off[k] += i * ls[k][d];
          }
          T* o = reinterpret_cast<T*>(out.data) + off[0];
          const I* ix = reinterpret_cast<const I*>(index.data) + off[1];
          const T* s = reinterpret_cast<const T*>(src.data) + off[2];
          for (std::int64_t j = 0; j < len; ++j) {
            T& dst = o[static_cast<std::int64_t>(ix[j * is]) * out_dim_stride];
            if constexpr (std::is_same_v<T, bool>) {
              dst = load(&dst) || load(s + j * ss);
            } else {
              dst = convert<T>(widen(dst) + widen(s[j * ss]));
            }
          }
        }
      });
    });
  });
}

void copy_slabs(detail::DeviceRuntime& rt, std::int64_t outer, std::size_t chunk_bytes, std::size_t dst_row_bytes,
                std::byte* dst, const std::byte* src) {
  const auto chunk = static_cast<std::int64_t>(chunk_bytes);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements * 4 / std::max<std::int64_t>(chunk, 1));
  rt.parallel_for(outer, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t o = begin; o < end; ++o)
      std::memcpy(dst + static_cast<std::size_t>(o) * dst_row_bytes, src + static_cast<std::size_t>(o) * chunk_bytes,
                  chunk_bytes);
  });
}

void triangle(detail::DeviceRuntime& rt, const Shape& shape, const Operand& out, const Operand& x,
              std::int64_t diagonal, bool upper) {
  const int r = shape.rank();
  const std::int64_t rows_per_plane = shape[r - 2], cols = shape[r - 1];
  const std::int64_t rows = cols == 0 ? 0 : shape.numel() / cols;
  const std::int64_t oc = out.strides[r - 1], xc = x.strides[r - 1];
  dispatch_width(dtype_size(out.dtype), [&](auto tag) {
    using S = decltype(tag);
    rt.parallel_for(rows, row_grain(cols), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t row = begin; row < end; ++row) {
        const std::int64_t i = row % rows_per_plane;
        std::int64_t rest = row / rows_per_plane, oo = i * out.strides[r - 2], xo = i * x.strides[r - 2];
        for (int d = r - 3; d >= 0; --d) {
          const std::int64_t k = rest % shape[d];
          rest /= shape[d];
          oo += k * out.strides[d];
          xo += k * x.strides[d];
        }
        // Kept columns [lo, hi); clamp before adding so huge diagonals cannot overflow.
        const std::int64_t edge = std::clamp<std::int64_t>(diagonal, -cols - rows_per_plane, cols + rows_per_plane) + i;
        const std::int64_t lo = upper ? std::clamp<std::int64_t>(edge, 0, cols) : 0;
        const std::int64_t hi = upper ? cols : std::clamp<std::int64_t>(edge + 1, 0, cols);
        S* o = reinterpret_cast<S*>(out.data) + oo;
        const S* s = reinterpret_cast<const S*>(x.data) + xo;
        for (std::int64_t j = 0; j < lo; ++j) o[j * oc] = S{0};
        if (oc == 1 && xc == 1) {
          if (o != s && hi > lo) std::memmove(o + lo, s + lo, static_cast<std::size_t>(hi - lo) * sizeof(S));
        } else {
          for (std::int64_t j = lo; j < hi; ++j) o[j * oc] = s[j * xc];
        }
        for (std::int64_t j = hi; j < cols; ++j) o[j * oc] = S{0};
      }
    });
  });
}

void one_hot(detail::DeviceRuntime& rt, const Shape& out_shape, const Operand& out, const std::int64_t* classes) {
  const int r = out_shape.rank();
  const std::int64_t n = out_shape[r - 1] == 0 ? 0 : out_shape.numel() / out_shape[r - 1];
  auto* const o = reinterpret_cast<std::int64_t*>(out.data);
  const std::int64_t cs = out.strides[r - 1];
  rt.parallel_for(n, kGrainElements, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      std::int64_t rest = p, off = 0;
      for (int d = r - 2; d >= 0; --d) {
        off += (rest % out_shape[d]) * out.strides[d];
        rest /= out_shape[d];
      }
      o[off + classes[p] * cs] = 1;
    }
  });
}

}  // namespace forge::cpu
