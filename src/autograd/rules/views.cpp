// VJPs of views, copies and casts: one short function per op (see record.h).
// Views are on every hot path, so their records save nothing and capture a
// few integers at most; the input's shape comes from the edge.

#include "autograd/rules/views.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"

namespace forge::autograd::rules {
namespace {

// The gradient of a view that picks part of x: zeros of x's shape with the
// output's gradient copied into the picked part (grad mode is off here, so
// writing into a view of the zeros records nothing). A backward that records
// scatter-adds instead, through the positions the view picks.
template <typename Pick>
void scatter_into_zeros(Vjp& v, Pick&& pick) {
  const Tensor& g = v.grad();
  const Shape& in = v.input_shape(0);
  if (!(v.create_graph() && g.requires_grad())) {
    const Tensor z = zeros_like_shape(g, in, g.dtype());
    pick(z).copy_(g);
    return v.set(0, z);
  }
  Tensor positions = detail::allocate(g.runtime(), in, DType::i64, "backward");
  auto* p = reinterpret_cast<std::int64_t*>(detail::first_element(positions));
  for (std::int64_t i = 0; i < in.numel(); ++i) p[i] = i;
  const Tensor picked = pick(positions).reshape(Shape{-1});
  const Tensor flat = zeros_like_shape(g, Shape{in.numel()}, g.dtype());
  v.set(0, scatter_add(flat, 0, picked, g.reshape(Shape{-1})).reshape(in));
}

void reshaped(const Tensor& out, const Tensor& x, const char* name) {
  record(out, name, inputs(x), saves(), [](Vjp& v) { v.set(0, v.grad().reshape(v.input_shape(0))); });
}

// Whether distinct elements of a layout may share memory: taking the dims of
// size > 1 by increasing |stride|, each stride must step past everything the
// smaller ones reach (the test check_writable uses).
bool may_overlap(const Shape& shape, const Strides& strides) {
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // |stride|, size
  for (int d = 0; d < shape.rank(); ++d)
    if (shape[d] > 1) dims.emplace_back(std::abs(strides[d]), shape[d]);
  std::sort(dims.begin(), dims.end());
  std::int64_t reach = 0;
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += (size - 1) * stride;
  }
  return false;
}

// Calls f(position) for each element of a layout, in row-major order.
template <typename F>
void for_each_position(const Tensor& t, F&& f) {
  if (t.numel() == 0) return;
  std::int64_t index[kMaxRank] = {};
  std::int64_t pos = t.offset();
  for (;;) {
    f(pos);
    int d = t.dim() - 1;
    for (; d >= 0; --d) {
      pos += t.strides()[d];
      if (++index[d] < t.shape()[d]) break;
      pos -= t.strides()[d] * t.shape()[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void clone(const Tensor& out, const Tensor& x) {
  record(out, "clone", inputs(x), saves(), [](Vjp& v) { v.set(0, v.grad()); });
}

void clone_view(const Tensor& out, const Tensor& x) {
  record(out, "clone_view", inputs(x), saves(), [](Vjp& v) { v.set(0, v.grad()); });
}

// For each element of out, the index of the element of x it reads (both
// walked over x's buffer); the gradient scatter-adds through that map, so a
// view that reads an element twice sums both contributions.
void as_strided(const Tensor& out, const Tensor& x) {
  const char* op = "view_with_strides";
  FORGE_CHECK(!may_overlap(x.shape(), x.strides()), not_implemented, op,
              "no gradient through a view of a tensor whose elements overlap each other (shape ", x.shape(),
              ", strides ", x.strides(), ")");
  std::int64_t lo = x.offset(), hi = x.offset();
  for (int d = 0; d < x.dim(); ++d) (x.strides()[d] < 0 ? lo : hi) += (x.shape()[d] - 1) * x.strides()[d];
  std::vector<std::int64_t> owner(x.numel() > 0 ? static_cast<std::size_t>(hi - lo + 1) : 0, -1);
  std::int64_t k = 0;
  for_each_position(x, [&](std::int64_t pos) { owner[static_cast<std::size_t>(pos - lo)] = k++; });
  Tensor index = detail::allocate(out.runtime(), out.shape(), DType::i64, op);
  auto* at = reinterpret_cast<std::int64_t*>(detail::first_element(index));
  for_each_position(out, [&](std::int64_t pos) {
    const std::int64_t i = pos >= lo && pos <= hi ? owner[static_cast<std::size_t>(pos - lo)] : -1;
    FORGE_CHECK(i >= 0, not_implemented, op, "no gradient through a view that reads buffer element ", pos,
                ", which is not an element of its input (shape ", x.shape(), ", strides ", x.strides(), ", offset ",
                x.offset(), ")");
    *at++ = i;
  });
  record(out, op, inputs(x), saves(index), [](Vjp& v) {
    const Shape& in = v.input_shape(0);
    const Tensor flat = zeros_like_shape(v.grad(), Shape{in.numel()}, v.grad().dtype());
    if (v.grad().numel() == 0) return v.set(0, flat.reshape(in));
    v.set(0, scatter_add(flat, 0, v.saved(0).reshape(Shape{-1}), v.grad().reshape(Shape{-1})).reshape(in));
  });
}

void view(const Tensor& out, const Tensor& x) { reshaped(out, x, "view"); }
void reshape(const Tensor& out, const Tensor& x) { reshaped(out, x, "reshape"); }
void squeeze(const Tensor& out, const Tensor& x) { reshaped(out, x, "squeeze"); }
void unsqueeze(const Tensor& out, const Tensor& x) { reshaped(out, x, "unsqueeze"); }

// Vjp::set sums the gradient over the broadcast dims.
void expand(const Tensor& out, const Tensor& x, const char* op) {
  record(out, op, inputs(x), saves(), [](Vjp& v) { v.set(0, v.grad()); });
}

void narrow(const Tensor& out, const Tensor& x, int dim, std::int64_t start, std::int64_t length) {
  record(out, "narrow", inputs(x), saves(), [dim, start, length](Vjp& v) {
    scatter_into_zeros(v, [&](const Tensor& z) { return z.narrow(dim, start, length); });
  });
}

void slice(const Tensor& out, const Tensor& x, int dim, std::int64_t start, std::int64_t step) {
  const std::int64_t length = out.shape()[dim];
  record(out, "slice", inputs(x), saves(), [dim, start, step, length](Vjp& v) {
    const std::int64_t end = length > 0 ? start + (length - 1) * step + 1 : start;
    scatter_into_zeros(v, [&](const Tensor& z) { return z.slice(dim, start, end, step); });
  });
}

void select(const Tensor& out, const Tensor& x, int dim, std::int64_t index) {
  record(out, "select", inputs(x), saves(),
         [dim, index](Vjp& v) { scatter_into_zeros(v, [&](const Tensor& z) { return z.select(dim, index); }); });
}

// The gradient goes back through the inverse permutation.
void permute(const Tensor& out, const Tensor& x, const Dims& dims) {
  Dims inverse = Dims::filled(dims.rank(), 0);
  for (int i = 0; i < dims.rank(); ++i) inverse[static_cast<int>(dims[i])] = i;
  record(out, "permute", inputs(x), saves(), [inverse](Vjp& v) { v.set(0, v.grad().permute(inverse)); });
}

void transpose(const Tensor& out, const Tensor& x, int dim0, int dim1) {
  record(out, "transpose", inputs(x), saves(), [dim0, dim1](Vjp& v) { v.set(0, v.grad().transpose(dim0, dim1)); });
}

// Vjp::set casts the gradient back to x's dtype.
void to(const Tensor& out, const Tensor& x) {
  record(out, "to", inputs(x), saves(), [](Vjp& v) { v.set(0, v.grad()); });
}

}  // namespace forge::autograd::rules
