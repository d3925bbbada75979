#include <cstring>

#include "backend/cpu/kernels.h"
#include "core/convert.h"

namespace forge::cpu {

void copy_cast(DeviceRuntime& rt, const Shape& shape, const Operand& dst, const Operand& src) {
  const Strides* const strides[2] = {&dst.strides, &src.strides};
  const StridedLoop<2> loop(shape, strides);
  const std::int64_t sd = loop.strides[0].back(), ss = loop.strides[1].back();
  dispatch_dtype(dst.dtype, [&](auto to_tag) {
    dispatch_dtype(src.dtype, [&](auto from_tag) {
      using To = decltype(to_tag);
      using From = decltype(from_tag);
      for_each_run(rt, loop, [&](const std::int64_t(&off)[2], std::int64_t n) {
        To* d = reinterpret_cast<To*>(dst.data) + off[0];
        const From* s = reinterpret_cast<const From*>(src.data) + off[1];
        if (sd == 1 && ss == 1) {
          if constexpr (std::is_same_v<To, From> && !std::is_same_v<To, bool>) {
            std::memcpy(d, s, static_cast<std::size_t>(n) * sizeof(To));
          } else {
            for (std::int64_t i = 0; i < n; ++i) d[i] = convert<To>(load(s + i));
          }
        } else {
          for (std::int64_t i = 0; i < n; ++i) d[i * sd] = convert<To>(load(s + i * ss));
        }
      });
    });
  });
}

void fill(DeviceRuntime& rt, const Shape& shape, const Operand& dst, const std::byte* element) {
  const Strides* const strides[1] = {&dst.strides};
  const StridedLoop<1> loop(shape, strides);
  const std::int64_t sd = loop.strides[0].back();
  dispatch_dtype(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, element, sizeof v);
    for_each_run(rt, loop, [&](const std::int64_t(&off)[1], std::int64_t n) {
      T* d = reinterpret_cast<T*>(dst.data) + off[0];
      for (std::int64_t i = 0; i < n; ++i) d[i * sd] = v;
    });
  });
}

}  // namespace forge::cpu
