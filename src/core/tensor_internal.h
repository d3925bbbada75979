#pragma once
// What ops share: output allocation, scope adoption, view construction, the
// checks every op makes on its tensor arguments, and the way to a kernel:
// the runtime of a tensor's device, whose table every kernel is called
// through (backend/backend.h).

#include <cstdint>
#include <functional>

#include "backend/device_runtime.h"
#include "backend/kernels.h"
#include "forge/runtime.h"
#include "forge/tensor.h"
#include "runtime/runtime_internal.h"

namespace forge {
class ExecContext;
}

namespace forge::detail {

// No tensor holds more bytes than this (2^56: beyond any machine, and far
// from overflowing size_t or int64 in byte arithmetic).
inline constexpr std::size_t kMaxTensorBytes = std::size_t{1} << 56;

// checked_extents, and the byte count fits in int64 (else invalid_argument)
// and in kMaxTensorBytes (else out_of_memory); returns the element count.
std::int64_t checked_numel(const char* op, const Shape& shape, DType dtype);

// A fresh contiguous tensor from rt's pool; checks the shape (checked_numel)
// and names op in errors. Makes room in an open exec scope first, so
// adopt_output cannot fail later.
Tensor allocate(Runtime& rt, const Shape& shape, DType dtype, const char* op);
// The same from `pool` (a device's, or pinned host memory) instead of the
// context's compute pool.
Tensor allocate_in(Runtime& rt, BufferPool& pool, const Shape& shape, DType dtype, const char* op);
// An uninitialised packed tensor on the context's device outside the pool
// (a module's weights, an optimizer's state: DESIGN §1), freed with its last view.
Tensor allocate_owned(Runtime& rt, const Shape& shape, DType dtype, const char* op);
// ExecContext::from_blob's body, over memory of `device` (the file readers
// wrap host bytes so in any context: what they load is on the host, as in
// libtorch, and .to(device) moves it).
Tensor blob_tensor(ExecContext& ctx, Device device, void* data, const Shape& shape, DType dtype,
                   std::function<void()> on_release);
// `t` packed on its own device, whichever the context computes on (itself
// when already packed): for what moves or writes out bytes.
Tensor packed_where_it_is(const Tensor& t, const char* op);

// Hands a finished op's output to the innermost open exec scope, if any.
inline void adopt_output(const Tensor& out) noexcept { out.runtime().scopes().adopt(out.buffer()); }

// A view of base's buffer (geometry already validated).
Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, std::int64_t offset);

// An op argument: defined and not a stale arena output.
void check_input(const char* op, const Tensor& t, const char* name);
// check_input without the device rule: for what reads or moves a tensor
// (to_vector, item, printing, to(Device)).
void check_readable(const char* op, const Tensor& t, const char* name);
// ErrorCode::device: `t` is not on the device its context computes on.
[[noreturn]] void refuse_host_input(const char* op, const Tensor& t, const char* name);
// Tensors of two contexts do not mix.
void check_same_runtime(const char* op, const Tensor& a, const Tensor& b);
// A destination: also no expanded (stride 0, size > 1) dimension.
void check_writable(const char* op, const Tensor& out, const char* name);
// `out` may be `in` exactly, or disjoint from it; a partial overlap is refused.
void check_no_partial_overlap(const char* op, const Tensor& out, const Tensor& in, const char* name);

// The runtime of t's device: the pool, executor and kernel table its ops use
// (ErrorCode::device for a device t's context does not serve).
inline DeviceRuntime& device_runtime(const Tensor& t) {
  if (DeviceRuntime* dev = t.impl()->device_runtime()) [[likely]]
    return *dev;
  return t.runtime().device_runtime(t.device());  // throws
}

// A kernel's view of a tensor, with its strides broadcast to `shape`.
backend::Operand operand(const Tensor& t);
backend::Operand operand_broadcast(const Tensor& t, const Shape& shape);

// The copy family on `on`'s device, for an op named `op`: dst = convert(src)
// over `shape`; dst = `value` (converted to dst's dtype) or one element of
// dst's dtype.
void copy_cast(const char* op, const Tensor& on, const Shape& shape, const backend::Operand& dst,
               const backend::Operand& src);
void fill(const char* op, const Tensor& on, const Shape& shape, const backend::Operand& dst, double value);
void fill(const char* op, const Tensor& on, const Shape& shape, const backend::Operand& dst, const std::byte* element);
inline std::byte* first_element(const Tensor& t) noexcept {
  // Views keep offset * element size inside their buffer; empty views have offset 0.
  return t.buffer()->data() + t.offset() * static_cast<std::int64_t>(t.element_size());
}

// A converted copy that no exec scope adopts (an op's internal temporary).
Tensor cast_temporary(const Tensor& t, DType dtype, const char* op);

}  // namespace forge::detail
