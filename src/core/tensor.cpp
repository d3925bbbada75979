#include "forge/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/autograd_hooks.h"
#include "core/convert.h"
#include "core/internal.h"
#include "core/tensor_internal.h"
#include "forge/runtime.h"

namespace forge {

TensorImpl::TensorImpl(const detail::Internal&, Ref<Runtime> runtime, Ref<Buffer> buffer, const Shape& shape,
                       const Strides& strides, std::int64_t offset, DType dtype) noexcept
    : runtime_(std::move(runtime)),
      buffer_(std::move(buffer)),
      device_runtime_(runtime_->find_device_runtime(buffer_->device())),
      shape_(shape),
      strides_(strides),
      offset_(offset),
      dtype_(dtype) {}

TensorImpl::~TensorImpl() {
  if (grad_fn_ != nullptr || autograd_ != nullptr) detail::release_autograd(*this);
}

void Tensor::throw_undefined() {
  FORGE_FAIL(invalid_argument, "tensor", "the handle is undefined (default-constructed or moved from)");
}

std::int64_t Tensor::size(std::int64_t dim) const {
  FORGE_CHECK(this->dim() > 0, out_of_range, "size", "a 0-dimensional tensor has no dimension ", dim);
  return shape()[wrap_dim(dim, this->dim(), "size")];
}

std::int64_t Tensor::stride(std::int64_t dim) const {
  FORGE_CHECK(this->dim() > 0, out_of_range, "stride", "a 0-dimensional tensor has no dimension ", dim);
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    const std::int64_t n = shape()[d];
    if (n == 0) return true;
    if (n != 1 && strides()[d] != expected) return false;
    expected *= n;
  }
  return true;
}

// Host bytes only: a pointer into device memory read on the host would
// crash, so a device tensor is refused, naming the move.
void* Tensor::raw_data(const char* op) const {
  detail::check_readable(op, *this, "tensor");
  FORGE_CHECK(device().is_cpu(), device, op, "reads the tensor's bytes on the host, but it lives on ", device().str(),
              ": call .cpu() first");
  return detail::first_element(*this);
}

void Tensor::check_dtype(DType expected, const char* op) const {
  FORGE_CHECK(defined(), invalid_argument, op, "undefined tensor");
  FORGE_CHECK(dtype() == expected, dtype, op, "the tensor holds ", dtype_name(dtype()), ", not ", dtype_name(expected));
}

namespace detail {

std::int64_t checked_numel(const char* op, const Shape& shape, DType dtype) {
  const std::int64_t n = checked_extents(shape, op);
  const auto size = static_cast<std::int64_t>(dtype_size(dtype));
  FORGE_CHECK(n <= std::numeric_limits<std::int64_t>::max() / size, invalid_argument, op, "shape ", shape, " of ",
              dtype_name(dtype), " holds more bytes than fit in int64");
  FORGE_CHECK(static_cast<std::size_t>(n * size) <= kMaxTensorBytes, out_of_memory, op, "shape ", shape, " of ",
              dtype_name(dtype), " needs ", n * size, " bytes, more than any allocation forge makes (", kMaxTensorBytes,
              ")");
  return n;
}

Tensor allocate(Runtime& rt, const Shape& shape, DType dtype, const char* op) {
  return allocate_in(rt, rt.compute_pool(), shape, dtype, op);
}

Tensor allocate_in(Runtime& rt, BufferPool& pool, const Shape& shape, DType dtype, const char* op) {
  const std::int64_t n = checked_numel(op, shape, dtype);
  rt.scopes().reserve(op);
  Ref<Buffer> buffer = pool.acquire(static_cast<std::size_t>(n) * dtype_size(dtype), op);
  return Tensor(Ref<TensorImpl>::adopt(new TensorImpl(internal, Ref<Runtime>::share(&rt), std::move(buffer), shape,
                                                      contiguous_strides(shape), 0, dtype)));
}

Tensor allocate_owned(Runtime& rt, const Shape& shape, DType dtype, const char* op) {
  const std::int64_t n = checked_numel(op, shape, dtype);
  Ref<Buffer> buffer = rt.compute().allocate_owned(static_cast<std::size_t>(n) * dtype_size(dtype), op);
  return Tensor(Ref<TensorImpl>::adopt(new TensorImpl(internal, Ref<Runtime>::share(&rt), std::move(buffer), shape,
                                                      contiguous_strides(shape), 0, dtype)));
}

Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, std::int64_t offset) {
  // An empty view reads nothing: give it a canonical layout, so that no later
  // offset or stride arithmetic on it can overflow (Note [Views retain their buffer]).
  const bool empty = shape.numel() == 0;
  auto* impl = new TensorImpl(internal, base.impl()->runtime_ref(), base.buffer(), shape,
                              empty ? contiguous_strides(shape) : strides, empty ? 0 : offset, base.dtype());
  impl->mark_view(internal);
  return Tensor(Ref<TensorImpl>::adopt(impl));
}

void check_readable(const char* op, const Tensor& t, const char* name) {
  FORGE_CHECK(t.defined(), invalid_argument, op, name, " is an undefined tensor");
  FORGE_CHECK(!t.buffer()->stale(), stale_output, op, name,
              " views an arena output that a later call has rewound (stale)");
}

void check_input(const char* op, const Tensor& t, const char* name) {
  check_readable(op, t, name);
  if (t.device() != t.runtime().device()) [[unlikely]]
    refuse_host_input(op, t, name);
  // The _into forms are not recorded (Note [In-place writes under autograd]).
  if (t.impl()->requires_grad() && grad_mode_enabled() && std::string_view(op).ends_with("_into"))
    FORGE_FAIL(backward, op, name, " requires grad, and _into writes are not recorded by autograd; call ",
               std::string_view(op).substr(0, std::string_view(op).size() - 5), " instead, or write under NoGradGuard");
}

// Note [A context computes on its device] in runtime.cpp.
void refuse_host_input(const char* op, const Tensor& t, const char* name) {
  FORGE_FAIL(device, op, name, " is on ", t.device().str(), ", but its ExecContext computes on ",
             t.runtime().device().str(), ": move it with .to(", t.runtime().device().str(),
             ") first, or compute on the host in a CPU ExecContext");
}

void check_same_runtime(const char* op, const Tensor& a, const Tensor& b) {
  FORGE_CHECK(&a.runtime() == &b.runtime(), device, op, "tensors belong to two different ExecContexts; move one first");
}

namespace {

// Whether distinct elements of a layout may share memory. Sufficient test:
// taking the dimensions of size > 1 by increasing |stride|, each stride must
// step past everything the smaller ones reach. (Conservative: a few exotic
// interleavings that do not overlap are refused too.)
bool may_overlap_itself(const Shape& shape, const Strides& strides) {
  std::int64_t span[kMaxRank];  // |stride| of each dimension of size > 1, ascending
  std::int64_t size[kMaxRank];
  int n = 0;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] <= 1) continue;
    int i = n++;
    for (; i > 0 && span[i - 1] > std::abs(strides[d]); --i) {
      span[i] = span[i - 1];
      size[i] = size[i - 1];
    }
    span[i] = std::abs(strides[d]);
    size[i] = shape[d];
  }
  std::int64_t reach = 0;  // the largest offset the smaller dimensions reach
  for (int i = 0; i < n; ++i) {
    if (span[i] <= reach) return true;
    reach += (size[i] - 1) * span[i];
  }
  return false;
}

}  // namespace

void check_writable(const char* op, const Tensor& out, const char* name) {
  check_input(op, out, name);
  for (int d = 0; d < out.dim(); ++d)
    FORGE_CHECK(out.strides()[d] != 0 || out.shape()[d] <= 1, invalid_argument, op,
                "cannot write through an expanded view: ", name, " has stride 0 in dimension ", d, " of size ",
                out.shape()[d]);
  FORGE_CHECK(!may_overlap_itself(out.shape(), out.strides()), invalid_argument, op, "cannot write through a view ",
              "whose elements overlap each other: ", name, " has shape ", out.shape(), " and strides ", out.strides());
}

namespace {
// [first, last] element offsets a tensor touches (numel > 0).
std::pair<std::int64_t, std::int64_t> extent(const Tensor& t) noexcept {
  std::int64_t lo = t.offset(), hi = t.offset();
  for (int d = 0; d < t.dim(); ++d) {
    const std::int64_t span = (t.shape()[d] - 1) * t.strides()[d];
    (span < 0 ? lo : hi) += span;
  }
  return {lo, hi};
}
}  // namespace

void check_no_partial_overlap(const char* op, const Tensor& out, const Tensor& in, const char* name) {
  if (out.buffer() != in.buffer() || out.numel() == 0 || in.numel() == 0) return;
  const bool same_layout = out.offset() == in.offset() && out.shape() == in.shape() && out.strides() == in.strides() &&
                           out.dtype() == in.dtype();
  if (same_layout) return;
  const auto [olo, ohi] = extent(out);
  const auto [ilo, ihi] = extent(in);
  const auto es_out = static_cast<std::int64_t>(out.element_size()),
             es_in = static_cast<std::int64_t>(in.element_size());
  const bool disjoint = (ohi + 1) * es_out <= ilo * es_in || (ihi + 1) * es_in <= olo * es_out;
  FORGE_CHECK(disjoint, invalid_argument, op, "out partially overlaps ", name,
              "; write into a separate tensor or exactly in place");
}

backend::Operand operand(const Tensor& t) { return {first_element(t), t.dtype(), t.strides()}; }

backend::Operand operand_broadcast(const Tensor& t, const Shape& shape) {
  Strides s = Strides::filled(shape.rank(), 0);
  const int lead = shape.rank() - t.dim();
  for (int d = 0; d < t.dim(); ++d) s[lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return {first_element(t), t.dtype(), s};
}

void copy_cast(const char* op, const Tensor& on, const Shape& shape, const backend::Operand& dst,
               const backend::Operand& src) {
  DeviceRuntime& dev = device_runtime(on);
  dev.kernels().copy.copy_cast.get(op, dst.dtype, dev)(dev, shape, dst, src);
}

void fill(const char* op, const Tensor& on, const Shape& shape, const backend::Operand& dst, const std::byte* element) {
  DeviceRuntime& dev = device_runtime(on);
  dev.kernels().copy.fill.get(op, dst.dtype, dev)(dev, shape, dst, element);
}

void fill(const char* op, const Tensor& on, const Shape& shape, const backend::Operand& dst, double value) {
  alignas(8) std::byte element[8] = {};
  dispatch_dtype(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = from_double<T>(value);
    std::memcpy(element, &v, sizeof v);
  });
  fill(op, on, shape, dst, element);
}

// On t's own device (a host tensor of a device context stays on the host).
Tensor cast_temporary(const Tensor& t, DType dtype, const char* op) {
  Tensor out = allocate_in(t.runtime(), device_runtime(t).pool(), t.shape(), dtype, op);
  copy_cast(op, out, t.shape(), operand(out), operand(t));
  return out;
}

// Reads `src` on the host: a device tensor is packed in `dst_dtype` on its
// device, then downloaded (waiting for it).
void copy_to_contiguous(const Tensor& src, void* dst, DType dst_dtype) {
  check_readable("to_vector", src, "tensor");
  if (!src.device().is_cpu()) {
    const Tensor packed = cast_temporary(src, dst_dtype, "to_vector");
    device_runtime(src).download(static_cast<std::byte*>(dst), first_element(packed), packed.nbytes(), false);
    return;
  }
  copy_cast("copy_to_contiguous", src, src.shape(),
            {static_cast<std::byte*>(dst), dst_dtype, contiguous_strides(src.shape())}, operand(src));
}

}  // namespace detail
}  // namespace forge
