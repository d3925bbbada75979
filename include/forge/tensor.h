#pragma once
// Tensor: a cheap value handle over a refcounted TensorImpl (shape, strides,
// element offset, dtype) that holds a Ref<Buffer> and a Ref<Runtime>. Copying
// a handle aliases the same impl, as in libtorch. Views share the buffer and
// retain it for as long as they live (Note [Views retain their buffer] in
// src/core/views.cpp).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "forge/buffer.h"
#include "forge/dtype.h"
#include "forge/error.h"
#include "forge/ref.h"
#include "forge/scalar.h"
#include "forge/shape.h"

namespace forge {

class Runtime;
class ExecContext;
struct ValuesIndices;  // forge/ops/reduce.h
namespace detail {
struct AutogradMeta;  // src/autograd/meta.h
struct AutogradAccess;
class DeviceRuntime;  // src/backend/device_runtime.h
}  // namespace detail
namespace autograd {
class Node;        // src/autograd/node.h
class HookHandle;  // forge/autograd.h
}  // namespace autograd
namespace indexing {
class TensorIndex;  // forge/ops/indexing.h
}

class TensorImpl : public RefCounted<TensorImpl> {
 public:
  // Made by forge only (the key): it trusts its geometry.
  TensorImpl(const detail::Internal&, Ref<Runtime> runtime, Ref<Buffer> buffer, const Shape& shape,
             const Strides& strides, std::int64_t offset, DType dtype) noexcept;
  ~TensorImpl();
  void on_last_release() noexcept { delete this; }

  Runtime& runtime() const noexcept { return *runtime_; }
  const Ref<Runtime>& runtime_ref() const noexcept { return runtime_; }
  const Ref<Buffer>& buffer() const noexcept { return buffer_; }
  const Shape& shape() const noexcept { return shape_; }
  const Strides& strides() const noexcept { return strides_; }
  std::int64_t offset() const noexcept { return offset_; }
  DType dtype() const noexcept { return dtype_; }
  // Autograd: set on leaves that require grad and on every recorded output.
  bool requires_grad() const noexcept { return requires_grad_; }
  // Made by a view op (shares another tensor's buffer).
  bool is_view() const noexcept { return is_view_; }
  void mark_view(const detail::Internal&) noexcept { is_view_ = true; }
  // The runtime of the buffer's device in this tensor's context (its pool,
  // executor and kernel table), found once when the impl is made; nullptr
  // for a device the context does not serve.
  detail::DeviceRuntime* device_runtime() const noexcept { return device_runtime_; }

 private:
  friend struct detail::AutogradAccess;
  Ref<Runtime> runtime_;
  Ref<Buffer> buffer_;
  detail::DeviceRuntime* device_runtime_;
  Shape shape_;
  Strides strides_;
  std::int64_t offset_;
  DType dtype_;
  bool requires_grad_ = false;
  bool is_view_ = false;
  autograd::Node* grad_fn_ = nullptr;         // owns a reference: the node that recorded this tensor
  detail::AutogradMeta* autograd_ = nullptr;  // owned: .grad, made on first use
};

class Stream;

class Tensor {
 public:
  Tensor() noexcept = default;
  explicit Tensor(Ref<TensorImpl> impl) noexcept : impl_(std::move(impl)) {}

  bool defined() const noexcept { return static_cast<bool>(impl_); }
  TensorImpl* impl() const noexcept { return impl_.get(); }
  // True when both handles alias the same impl.
  bool is_same(const Tensor& other) const noexcept { return impl_ == other.impl_; }

  // ---- geometry (an undefined handle throws invalid_argument) ----
  const Shape& shape() const { return body().shape(); }
  const Shape& sizes() const { return body().shape(); }
  const Strides& strides() const { return body().strides(); }
  int dim() const { return body().shape().rank(); }
  std::int64_t size(std::int64_t dim) const;
  std::int64_t stride(std::int64_t dim) const;
  std::int64_t numel() const { return body().shape().numel(); }
  std::int64_t offset() const { return body().offset(); }
  DType dtype() const { return body().dtype(); }
  std::size_t element_size() const { return dtype_size(body().dtype()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  Device device() const { return body().buffer()->device(); }
  bool is_contiguous() const;
  Runtime& runtime() const { return body().runtime(); }
  const Ref<Buffer>& buffer() const { return body().buffer(); }
  std::uint32_t version() const { return body().buffer()->version(); }

  // ---- data (checked: defined, not a stale arena output, dtype matches) ----
  template <typename T>
  T* data_ptr() const {
    check_dtype(dtype_v<T>, "data_ptr");
    return reinterpret_cast<T*>(raw_data("data_ptr"));
  }
  void* raw_data(const char* op = "data") const;
  template <typename T>
  std::vector<T> to_vector() const;  // converts from any dtype
  template <typename T>
  T item() const;

  // ---- views: share the buffer, never copy ----
  Tensor clone_view() const;
  Tensor view_with_strides(const Shape& shape, const Strides& strides, std::int64_t offset) const;
  Tensor view(const Shape& shape) const;     // error when the strides do not allow it
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor broadcast_to(const Shape& shape) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dimension
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor permute(const Dims& dims) const;
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  Tensor t() const;  // transpose of a tensor of rank <= 2
  Tensor squeeze() const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  Tensor contiguous() const;  // this tensor when already contiguous, else a packed copy

  // ---- autograd (forge/autograd.h; DESIGN §7) ----
  // Makes this leaf record every op it enters; floating dtypes only. A tensor
  // an op recorded (not a leaf) cannot be switched off: use detach().
  Tensor& requires_grad_(bool on = true);
  bool requires_grad() const { return body().requires_grad(); }
  // A leaf: made by the user, not by a recorded op.
  bool is_leaf() const;
  // The gradient accumulated by backward (undefined until one ran).
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  // Drops .grad (set_to_none), or zeroes it in place.
  void zero_grad(bool set_to_none = true);
  // The name of the op that recorded this tensor ("mul", ...), or nullptr for a leaf.
  const char* grad_fn_name() const;
  // Backpropagates from this tensor: `gradient` may be omitted for one element.
  // create_graph records the backward (higher-order gradients; autograd::backward).
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  // The same bytes, cut from the tape (a view that never requires grad).
  Tensor detach() const;
  // Hooks (docs/AUTOGRAD.md "Hooks"). register_hook: `hook` sees the gradient
  // flowing into this tensor during backward; a defined return replaces it.
  // register_post_accumulate_grad_hook (leaves only): `hook` is called with
  // this leaf once its .grad is complete for the backward pass. The handle
  // removes the hook (remove(), or nothing when it is dropped).
  autograd::HookHandle register_hook(std::function<Tensor(const Tensor&)> hook);
  autograd::HookHandle register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook);
  // Keeps this non-leaf's gradient in .grad() on later backward passes (a no-op on leaves).
  Tensor& retain_grad();
  bool retains_grad() const;

  // ---- indexing, as libtorch's (forge/ops/indexing.h: Slice, None, Ellipsis, integers, bool and integer tensors) ----
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& values);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, Scalar value);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, Scalar value);

  // ---- in place: write this tensor, bump its version; recorded when autograd needs it ----
  Tensor& add_(const Tensor& other);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(Scalar other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max);

  // ---- copies ----
  Tensor clone() const;          // a packed copy
  Tensor to(DType dtype) const;  // this tensor when the dtype already matches
  Tensor& fill_(Scalar value);   // the value must fit the dtype, as for full
  Tensor& zero_();
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype, moves it from another device

  // ---- devices: transfers within the tensor's ExecContext, which serves
  // the host and its own device (ErrorCode::device for any other) ----
  // This tensor when already there, else a packed copy on `device`. A copy
  // to a CUDA device returns once queued (the host bytes are staged); one to
  // the host waits for the copy unless `non_blocking`, which returns a
  // pinned host tensor to read after ctx.stream().synchronize(). Gradients
  // do not flow through a change of device.
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  // Marks this tensor's memory as used by work queued on `stream` as well:
  // when released, it is reused only after that work completes.
  void record_stream(const Stream& stream) const;

  // ---- ops: each calls the free function of the same name (forge/ops/*.h) ----
  Tensor add(const Tensor& other) const;
  Tensor add(Scalar other) const;
  Tensor sub(const Tensor& other) const;
  Tensor sub(Scalar other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(Scalar other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(Scalar other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor eq(const Tensor& other) const;
  Tensor eq(Scalar other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(Scalar other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(Scalar other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(Scalar other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(Scalar other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(Scalar other) const;
  Tensor logical_not() const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor neg() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor square() const;
  Tensor reciprocal() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;

  Tensor sum(const DimList& dims = {}, bool keepdim = false) const;
  Tensor mean(const DimList& dims = {}, bool keepdim = false) const;
  Tensor prod(const DimList& dims = {}, bool keepdim = false) const;
  Tensor amax(const DimList& dims = {}, bool keepdim = false) const;
  Tensor amin(const DimList& dims = {}, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  ValuesIndices max(std::int64_t dim, bool keepdim = false) const;
  ValuesIndices min(std::int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor argmin() const;
  Tensor argmax(std::int64_t dim, bool keepdim = false) const;
  Tensor argmin(std::int64_t dim, bool keepdim = false) const;
  Tensor var(const DimList& dims = {}, std::int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const DimList& dims = {}, std::int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const DimList& dims, bool keepdim = false) const;
  Tensor norm(double p = 2.0, const DimList& dims = {}, bool keepdim = false) const;
  Tensor all(const DimList& dims = {}, bool keepdim = false) const;
  Tensor any(const DimList& dims = {}, bool keepdim = false) const;
  Tensor cumsum(std::int64_t dim) const;

  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor dot(const Tensor& other) const;

  Tensor softmax(std::int64_t dim) const;
  Tensor log_softmax(std::int64_t dim) const;
  Tensor index_select(std::int64_t dim, const Tensor& index) const;
  Tensor gather(std::int64_t dim, const Tensor& index) const;
  Tensor triu(std::int64_t diagonal = 0) const;
  Tensor tril(std::int64_t diagonal = 0) const;

  std::vector<Tensor> split(std::int64_t split_size, std::int64_t dim = 0) const;
  std::vector<Tensor> chunk(std::int64_t chunks, std::int64_t dim = 0) const;
  Tensor repeat(const Dims& repeats) const;
  Tensor flip(const Dims& dims) const;

  std::string str() const;  // libtorch's printing

 private:
  void check_dtype(DType expected, const char* op) const;
  Tensor broadcast_as(const Shape& shape, const char* op) const;
  Tensor& fill_as(Scalar value, const char* op);
  TensorImpl& body() const {
    if (!impl_) [[unlikely]]
      throw_undefined();
    return *impl_;
  }
  [[noreturn]] static void throw_undefined();
  Ref<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

namespace detail {
// Copies `src` (any layout, any dtype) into the contiguous memory `dst` of dtype `dst_dtype`.
void copy_to_contiguous(const Tensor& src, void* dst, DType dst_dtype);
}  // namespace detail

template <typename T>
std::vector<T> Tensor::to_vector() const try {
  const auto n = static_cast<std::size_t>(defined() ? numel() : 0);
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> has no data()
    std::vector<std::uint8_t> bytes(n);
    if (n) detail::copy_to_contiguous(*this, bytes.data(), DType::boolean);
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> out(n);
    if (n) detail::copy_to_contiguous(*this, out.data(), dtype_v<T>);
    return out;
  }
}
FORGE_CATCH_OOM("to_vector")

template <typename T>
T Tensor::item() const {
  FORGE_CHECK(defined(), invalid_argument, "item", "undefined tensor");
  FORGE_CHECK(numel() == 1, invalid_argument, "item", "a tensor of shape ", shape(), " has ", numel(),
              " elements, not 1");
  T value{};
  detail::copy_to_contiguous(*this, &value, dtype_v<T>);
  return value;
}

}  // namespace forge
