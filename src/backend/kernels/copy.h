#pragma once
// The copy family of the kernel table (backend/kernels.h), and the operand
// every strided kernel takes.

#include <cstddef>

#include "backend/backend.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::backend {

// One operand of a strided loop: its first element and its strides (in
// elements) over the loop's shape; a broadcast dimension has stride 0.
struct Operand {
  std::byte* data;
  DType dtype;
  Strides strides;
};

using CopyCastFn = void(detail::DeviceRuntime& dev, const Shape& shape, const Operand& dst, const Operand& src);
using FillFn = void(detail::DeviceRuntime& dev, const Shape& shape, const Operand& dst, const std::byte* element);

struct CopyKernels {
  // dst[i] = convert(src[i]) over `shape`, any dtypes, any strides; get()
  // with dst's dtype (a backend that lists a dtype converts from every one).
  Entry<CopyCastFn> copy_cast;
  // dst[i] = one element of dst's dtype (its bytes).
  Entry<FillFn> fill;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("copy_cast", k.copy_cast);
    f("fill", k.fill);
  }
};

}  // namespace forge::backend
