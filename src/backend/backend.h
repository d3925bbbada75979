#pragma once
// The backend seam. A Backend is what a device computes with: a name, the
// device type it serves and its kernel table. Every kernel an op, a VJP rule
// or an optimizer step runs is reached through the table of its output's
// device (DeviceRuntime::kernels()):
//
//   detail::DeviceRuntime& dev = detail::device_runtime(out);
//   dev.kernels().elementwise.binary_flat.get(op, dtype, dev)(dev, ...);
//
// The table is plain function pointers grouped by family (backend/kernels/),
// so a call costs one indirect call and a dtype test: nothing a tiny op
// notices. An entry a backend leaves empty, or a dtype it does not list for
// an entry, is "not supported": get() throws ErrorCode::device naming the op,
// the dtype and the device. The host backend (backend/cpu/) fills every
// entry; a device backend fills what it has and the ops say what it lacks.
// Adding a backend: docs/ARCHITECTURE.md, "Adding a backend".

#include <cstdint>

#include "forge/device.h"
#include "forge/dtype.h"

namespace forge::detail {
class DeviceRuntime;
}

namespace forge::backend {

// A set of dtypes, one bit each (bit i: DType(i)).
using DTypeMask = std::uint16_t;
constexpr DTypeMask mask_of(DType t) noexcept { return static_cast<DTypeMask>(1u << static_cast<unsigned>(t)); }
template <typename... Ts>
constexpr DTypeMask mask_of(DType t, Ts... rest) noexcept {
  return static_cast<DTypeMask>(mask_of(t) | mask_of(rest...));
}
inline constexpr DTypeMask kAllDTypes = static_cast<DTypeMask>((1u << kNumDTypes) - 1);
inline constexpr DTypeMask kFloatDTypes = mask_of(DType::f32, DType::f64, DType::f16, DType::bf16);
inline constexpr DTypeMask kNumericDTypes = static_cast<DTypeMask>(kAllDTypes & ~mask_of(DType::boolean));

// Throws ErrorCode::device: `op` has no kernel for `dtype` on `dev`'s device
// (`for_no_dtype`: the backend leaves the entry empty, the op is not supported there at all).
[[noreturn]] void unsupported(const char* op, DType dtype, const detail::DeviceRuntime& dev, bool for_no_dtype);

// One kernel of a table: the function and the dtypes it computes in (the
// dtype an op passes to get(): its compute dtype, or its output's).
template <typename Fn>
struct Entry {
  Fn* fn = nullptr;
  DTypeMask dtypes = 0;

  bool supports(DType dtype) const noexcept { return fn != nullptr && (dtypes & mask_of(dtype)) != 0; }
  // The kernel, or ErrorCode::device naming op, dtype and device.
  Fn* get(const char* op, DType dtype, const detail::DeviceRuntime& dev) const {
    if (supports(dtype)) [[likely]]
      return fn;
    unsupported(op, dtype, dev, fn == nullptr);
  }
};

struct Kernels;  // the table (backend/kernels.h)

struct Backend {
  const char* name;  // "cpu", "cuda"
  DeviceType type;   // the devices it serves
  const Kernels* kernels;
};

// The host backend (backend/cpu/cpu_backend.cpp).
const Backend& cpu_backend() noexcept;

}  // namespace forge::backend
