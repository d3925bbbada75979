// Note [Views retain their buffer]
// Every view holds its own Ref<Buffer>, so a view's lifetime is independent of
// its parent's: dropping the parent never frees bytes a view still reads, and
// the buffer goes back to its pool when the last view of it dies. Views never
// allocate, so an exec scope does not adopt them (the buffer it may hold is
// already the one the view shares). Geometry is checked against the buffer's
// bytes, so no view can reach outside them.

#include "autograd/rules/views.h"

#include <algorithm>
#include <optional>

#include "autograd/record.h"
#include "core/tensor_internal.h"
#include "forge/tensor.h"

namespace forge {
namespace {

// Replaces a single -1 by what makes the element count `numel`.
Shape infer_shape(const char* op, const Shape& requested, std::int64_t numel) {
  Shape shape = requested;
  int infer = -1;
  std::int64_t known = 1;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == -1) {
      FORGE_CHECK(infer < 0, invalid_argument, op, "only one dimension can be -1, got ", requested);
      infer = d;
    } else {
      FORGE_CHECK(shape[d] >= 0, invalid_argument, op, "negative size ", shape[d], " in shape ", requested);
      FORGE_CHECK(!__builtin_mul_overflow(known, shape[d], &known), shape, op, "shape ", requested, " is invalid for ",
                  numel, " elements");
    }
  }
  if (infer >= 0) {
    FORGE_CHECK(known != 0 && numel % known == 0, shape, op, "shape ", requested, " is invalid for ", numel,
                " elements");
    shape[infer] = numel / known;
  }
  FORGE_CHECK(infer >= 0 || known == numel, shape, op, "shape ", requested, " is invalid for ", numel, " elements");
  checked_extents(shape, op);
  return shape;
}

// Strides that view `old` memory as `shape` without a copy, if any exist
// (the chunk-matching rule libtorch's view uses).
std::optional<Strides> view_strides(const Shape& old_shape_in, const Strides& old_strides_in, const Shape& shape) {
  Shape old_shape = old_shape_in;
  Strides old_strides = old_strides_in;
  if (old_shape.rank() == 0) {
    old_shape = Shape{1};
    old_strides = Strides{1};
  }
  if (old_shape.numel() == 0) return contiguous_strides(shape);
  Strides strides = Strides::filled(shape.rank(), 0);
  int view_d = shape.rank() - 1;
  std::int64_t chunk_base = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int d = old_shape.rank() - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace

Tensor Tensor::clone_view() const try {
  detail::check_readable("clone_view", *this, "tensor");
  Tensor out = detail::make_view(*this, shape(), strides(), offset());
  FORGE_RECORD(clone_view, out, *this);
  return out;
}
FORGE_CATCH_OOM("clone_view")

Tensor Tensor::view_with_strides(const Shape& shape, const Strides& strides, std::int64_t offset) const try {
  const char* op = "view_with_strides";
  detail::check_readable(op, *this, "tensor");
  FORGE_CHECK(shape.rank() == strides.rank(), invalid_argument, op, "shape ", shape, " and strides ", strides,
              " differ in rank");
  FORGE_CHECK(offset >= 0, out_of_range, op, "negative offset ", offset);
  const std::int64_t numel = checked_extents(shape, op);
  if (numel > 0) {
    std::int64_t lo = offset, hi = offset;
    bool overflow = false;
    for (int d = 0; d < shape.rank(); ++d) {
      std::int64_t span = 0;
      overflow |= __builtin_mul_overflow(shape[d] - 1, strides[d], &span);
      overflow |= __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi);
    }
    const auto capacity = static_cast<std::int64_t>(buffer()->nbytes() / element_size());
    FORGE_CHECK(!overflow && lo >= 0 && hi < capacity, out_of_range, op, "shape ", shape, " with strides ", strides,
                " at offset ", offset, " reaches outside the buffer's ", capacity, " elements");
  }
  Tensor out = detail::make_view(*this, shape, strides, offset);
  FORGE_RECORD(as_strided, out, *this);
  return out;
}
FORGE_CATCH_OOM("view_with_strides")

Tensor Tensor::view(const Shape& requested) const try {
  detail::check_readable("view", *this, "tensor");
  const Shape shape = infer_shape("view", requested, numel());
  auto strides = view_strides(this->shape(), this->strides(), shape);
  FORGE_CHECK(strides.has_value(), invalid_argument, "view", "a tensor of shape ", this->shape(), " and strides ",
              this->strides(), " cannot be viewed as ", shape, " without a copy; use reshape");
  Tensor out = detail::make_view(*this, shape, *strides, offset());
  FORGE_RECORD(view, out, *this);
  return out;
}
FORGE_CATCH_OOM("view")

Tensor Tensor::reshape(const Shape& requested) const try {
  detail::check_readable("reshape", *this, "tensor");
  const Shape shape = infer_shape("reshape", requested, numel());
  if (auto strides = view_strides(this->shape(), this->strides(), shape)) {
    Tensor out = detail::make_view(*this, shape, *strides, offset());
    FORGE_RECORD(reshape, out, *this);
    return out;
  }
  return clone().view(shape);  // both record themselves
}
FORGE_CATCH_OOM("reshape")

Tensor Tensor::broadcast_to(const Shape& target) const { return broadcast_as(target, "broadcast_to"); }

Tensor Tensor::broadcast_as(const Shape& target, const char* op) const try {
  detail::check_readable(op, *this, "tensor");
  FORGE_CHECK(target.rank() >= dim(), shape, op, "cannot broadcast shape ", shape(), " to fewer dimensions ", target);
  Strides strides = Strides::filled(target.rank(), 0);
  const int lead = target.rank() - dim();
  for (int d = 0; d < target.rank(); ++d) {
    FORGE_CHECK(target[d] >= 0, invalid_argument, op, "negative size ", target[d], " in shape ", target);
    if (d < lead) continue;
    const std::int64_t own = shape()[d - lead];
    FORGE_CHECK(own == target[d] || own == 1, shape, op, "shape ", shape(), " does not broadcast to ", target,
                " (dimension ", d, ": ", own, " vs ", target[d], ")");
    strides[d] = own == target[d] ? this->strides()[d - lead] : 0;
  }
  checked_extents(target, op);
  Tensor out = detail::make_view(*this, target, strides, offset());
  FORGE_RECORD(expand, out, *this, op);
  return out;
}
FORGE_CATCH_OOM(op)

Tensor Tensor::expand(const Shape& sizes) const try {
  detail::check_readable("expand", *this, "tensor");
  FORGE_CHECK(sizes.rank() >= dim(), shape, "expand", "cannot expand shape ", shape(), " to fewer dimensions ", sizes);
  Shape target = sizes;
  const int lead = sizes.rank() - dim();
  for (int d = 0; d < sizes.rank(); ++d) {
    if (sizes[d] != -1) continue;
    FORGE_CHECK(d >= lead, invalid_argument, "expand", "-1 is not allowed for the new leading dimension ", d, " in ",
                sizes);
    target[d] = shape()[d - lead];
  }
  return broadcast_as(target, "expand");
}
FORGE_CATCH_OOM("expand")

Tensor Tensor::narrow(std::int64_t dim_arg, std::int64_t start, std::int64_t length) const try {
  detail::check_readable("narrow", *this, "tensor");
  FORGE_CHECK(dim() > 0, invalid_argument, "narrow", "cannot narrow a 0-dimensional tensor");
  const int d = wrap_dim(dim_arg, dim(), "narrow");
  const std::int64_t size = shape()[d];
  if (start < 0 && start >= -size) start += size;
  FORGE_CHECK(start >= 0 && start <= size, out_of_range, "narrow", "start ", start, " is out of range for dimension ",
              d, " of size ", size);
  FORGE_CHECK(length >= 0, invalid_argument, "narrow", "negative length ", length);
  FORGE_CHECK(length <= size - start, out_of_range, "narrow", "start ", start, " + length ", length,
              " exceeds dimension ", d, " of size ", size);
  Shape s = shape();
  s[d] = length;
  Tensor out = detail::make_view(*this, s, strides(), offset() + (length > 0 ? start * strides()[d] : 0));
  FORGE_RECORD(narrow, out, *this, d, start, length);
  return out;
}
FORGE_CATCH_OOM("narrow")

Tensor Tensor::slice(std::int64_t dim_arg, std::int64_t start, std::int64_t end, std::int64_t step) const try {
  detail::check_readable("slice", *this, "tensor");
  FORGE_CHECK(dim() > 0, invalid_argument, "slice", "cannot slice a 0-dimensional tensor");
  const int d = wrap_dim(dim_arg, dim(), "slice");
  FORGE_CHECK(step > 0, invalid_argument, "slice", "step must be positive, got ", step);
  const std::int64_t size = shape()[d];
  // Python's clamping, as libtorch does.
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<std::int64_t>(start, 0, size);
  end = std::clamp<std::int64_t>(end, start, size);
  Shape s = shape();
  Strides st = strides();
  s[d] = end > start ? (end - start - 1) / step + 1 : 0;
  // With one element or none the stride is never used; keep it from overflowing.
  if (s[d] > 1) {
    FORGE_CHECK(!__builtin_mul_overflow(strides()[d], step, &st[d]), out_of_range, "slice", "step ", step,
                " times stride ", strides()[d], " overflows");
  }
  Tensor out = detail::make_view(*this, s, st, offset() + (s[d] > 0 ? start * strides()[d] : 0));
  FORGE_RECORD(slice, out, *this, d, start, step);
  return out;
}
FORGE_CATCH_OOM("slice")

Tensor Tensor::select(std::int64_t dim_arg, std::int64_t index) const try {
  detail::check_readable("select", *this, "tensor");
  FORGE_CHECK(dim() > 0, invalid_argument, "select", "cannot select from a 0-dimensional tensor");
  const int d = wrap_dim(dim_arg, dim(), "select");
  const std::int64_t size = shape()[d];
  FORGE_CHECK(index >= -size && index < size, out_of_range, "select", "index ", index,
              " is out of range for dimension ", d, " of size ", size);
  if (index < 0) index += size;
  Shape s = shape();
  Strides st = strides();
  s.erase(d);
  st.erase(d);
  Tensor out = detail::make_view(*this, s, st, offset() + index * strides()[d]);
  FORGE_RECORD(select, out, *this, d, index);
  return out;
}
FORGE_CATCH_OOM("select")

Tensor Tensor::permute(const Dims& dims) const try {
  detail::check_readable("permute", *this, "tensor");
  FORGE_CHECK(dims.rank() == dim(), invalid_argument, "permute", "got ", dims.rank(), " dims ", dims,
              " for a tensor of rank ", dim());
  Shape s = shape();
  Strides st = strides();
  Dims wrapped = dims;
  bool seen[kMaxRank] = {};
  for (int i = 0; i < dims.rank(); ++i) {
    const int d = wrap_dim(dims[i], dim(), "permute");
    FORGE_CHECK(!seen[d], invalid_argument, "permute", "dim ", d, " repeats in ", dims);
    seen[d] = true;
    wrapped[i] = d;
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = detail::make_view(*this, s, st, offset());
  FORGE_RECORD(permute, out, *this, wrapped);
  return out;
}
FORGE_CATCH_OOM("permute")

Tensor Tensor::transpose(std::int64_t dim0, std::int64_t dim1) const try {
  detail::check_readable("transpose", *this, "tensor");
  if (dim() == 0) {
    wrap_dim(dim0, 0, "transpose");
    wrap_dim(dim1, 0, "transpose");
    return clone_view();
  }
  const int a = wrap_dim(dim0, dim(), "transpose"), b = wrap_dim(dim1, dim(), "transpose");
  Shape s = shape();
  Strides st = strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  Tensor out = detail::make_view(*this, s, st, offset());
  FORGE_RECORD(transpose, out, *this, a, b);
  return out;
}
FORGE_CATCH_OOM("transpose")

Tensor Tensor::t() const try {
  detail::check_readable("t", *this, "tensor");
  FORGE_CHECK(dim() <= 2, invalid_argument, "t", "expects a tensor of rank <= 2, got shape ", shape());
  return dim() < 2 ? clone_view() : transpose(0, 1);
}
FORGE_CATCH_OOM("t")

Tensor Tensor::squeeze() const try {
  detail::check_readable("squeeze", *this, "tensor");
  Shape s;
  Strides st;
  for (int d = 0; d < dim(); ++d) {
    if (shape()[d] == 1) continue;
    s.push_back(shape()[d]);
    st.push_back(strides()[d]);
  }
  Tensor out = detail::make_view(*this, s, st, offset());
  FORGE_RECORD(squeeze, out, *this);
  return out;
}
FORGE_CATCH_OOM("squeeze")

Tensor Tensor::squeeze(std::int64_t dim_arg) const try {
  detail::check_readable("squeeze", *this, "tensor");
  const int d = wrap_dim(dim_arg, dim(), "squeeze");
  if (dim() == 0 || shape()[d] != 1) return clone_view();
  Shape s = shape();
  Strides st = strides();
  s.erase(d);
  st.erase(d);
  Tensor out = detail::make_view(*this, s, st, offset());
  FORGE_RECORD(squeeze, out, *this);
  return out;
}
FORGE_CATCH_OOM("squeeze")

Tensor Tensor::unsqueeze(std::int64_t dim_arg) const try {
  detail::check_readable("unsqueeze", *this, "tensor");
  FORGE_CHECK(dim() < kMaxRank, invalid_argument, "unsqueeze", "rank ", dim() + 1, " exceeds the maximum rank ",
              kMaxRank);
  const int d = wrap_dim(dim_arg, dim() + 1, "unsqueeze");
  Shape s = shape();
  Strides st = strides();
  const std::int64_t stride = d < dim() ? shape()[d] * strides()[d] : 1;
  s.insert(d, 1);
  st.insert(d, stride);
  Tensor out = detail::make_view(*this, s, st, offset());
  FORGE_RECORD(unsqueeze, out, *this);
  return out;
}
FORGE_CATCH_OOM("unsqueeze")

Tensor Tensor::flatten(std::int64_t start_dim, std::int64_t end_dim) const try {
  detail::check_readable("flatten", *this, "tensor");
  if (dim() == 0) return reshape(Shape{1});
  const int a = wrap_dim(start_dim, dim(), "flatten"), b = wrap_dim(end_dim, dim(), "flatten");
  FORGE_CHECK(a <= b, invalid_argument, "flatten", "start_dim ", a, " comes after end_dim ", b);
  Shape s;
  std::int64_t merged = 1;
  for (int d = 0; d < dim(); ++d) {
    if (d < a || d > b) {
      s.push_back(shape()[d]);
    } else {
      merged *= shape()[d];
      if (d == b) s.push_back(merged);
    }
  }
  return reshape(s);
}
FORGE_CATCH_OOM("flatten")

}  // namespace forge
