// VJPs of the normalizations, indexing ops, masks, padding and dropout: one
// short function per op (see record.h). softmax and the normalizations run
// the nn family's fused row gradients (backend/kernels/nn.h) on packed
// f32/f64 rows; the indexing gradients are scatter_adds of the output gradient.

#include "autograd/rules/nn.h"

#include <algorithm>
#include <vector>

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "autograd/rules/unary.h"
#include "core/tensor_internal.h"
#include "forge/ops.h"
#include "ops/attention_internal.h"

namespace forge::autograd::rules {
namespace {

// The dtype the fused kernels compute a gradient in: f64 for f64, else f32.
DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// t packed in dtype (itself when it already is).
Tensor packed(const Tensor& t, DType dtype) { return t.to(dtype).contiguous(); }

// An uninitialized tensor for a kernel to fill.
Tensor empty(const Tensor& like, const Shape& shape, DType dtype) {
  Tensor out = detail::allocate(like.runtime(), shape, dtype, "backward");
  detail::adopt_output(out);
  return out;
}

// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g), over dim.
// Composed of ops where the kernel does not apply or the backward records.
Tensor softmax_grad(const Vjp& v, std::int64_t dim, bool log) {
  const Tensor &y = v.saved(0), &g = v.grad();
  const int d = wrap_dim(dim, y.dim(), "backward");
  const bool fused = !v.create_graph() && y.dim() > 0 && d == y.dim() - 1 && y.is_contiguous() &&
                     (y.dtype() == DType::f32 || y.dtype() == DType::f64);
  if (!fused) {
    if (log) return sub(g, mul(exp(y), sum(g, {d}, true)));
    return mul(y, sub(g, sum(mul(g, y), {d}, true)));
  }
  detail::DeviceRuntime& dev = detail::device_runtime(y);
  backend::SoftmaxBackwardFn* const kernel =
      dev.kernels().nn.softmax_backward.get(log ? "log_softmax" : "softmax", y.dtype(), dev);
  const Tensor gc = packed(g, y.dtype());
  Tensor dx = empty(y, y.shape(), y.dtype());
  const std::int64_t n = y.shape().back(), rows = n == 0 ? 0 : y.numel() / n;
  kernel(dev, y.dtype(), rows, n, detail::first_element(y), detail::first_element(gc), detail::first_element(dx), log);
  return dx;
}

// The gradients of layer_norm or rms_norm composed of ops (for a backward
// that records), in the wide dtype over the last normalized_shape.rank() dims:
//   xhat = (x - mean) * rstd (rms: x * rstd),  gw = g * w,
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))  (rms: no mean(gw) term),
//   dw = g * xhat,  db = g  (Vjp::set sums them over the leading dims).
void norm_grad_ops(Vjp& v, const Shape& normalized_shape, double eps, bool rms) {
  const Tensor x = wide(v.saved(0)), g = wide(v.grad());
  const Tensor& w = v.saved(1);
  DimList dims;
  for (int k = 0; k < normalized_shape.rank(); ++k) dims.push_back(x.dim() - 1 - k);
  const Tensor centered = rms ? x : x - mean(x, dims, true);
  const Tensor rstd = rsqrt(mean(square(centered), dims, true) + eps);
  const Tensor xhat = centered * rstd;
  const Tensor gw = w.defined() ? g * wide(w) : g;
  Tensor inner = gw - xhat * mean(gw * xhat, dims, true);
  if (!rms) inner = inner - mean(gw, dims, true);
  if (v.needs(0)) v.set(0, rstd * inner);
  if (v.needs(1)) v.set(1, g * xhat);
  if (!rms && v.needs(2)) v.set(2, g);
}

// The gradients of layer_norm (rms = false) or rms_norm (rms = true).
void norm_grad(Vjp& v, const Shape& normalized_shape, double eps, bool rms) {
  if (v.create_graph()) return norm_grad_ops(v, normalized_shape, eps, rms);
  const Tensor &x = v.saved(0), &w = v.saved(1);
  const DType cd = compute_dtype(x.dtype());
  detail::DeviceRuntime& dev = detail::device_runtime(x);
  backend::NormBackwardFn* const kernel = dev.kernels().nn.norm_backward.get(rms ? "rms_norm" : "layer_norm", cd, dev);
  const Tensor xc = packed(x, cd), gc = packed(v.grad(), cd);
  const Tensor wc = w.defined() ? packed(w, cd) : Tensor();
  Tensor dx = v.needs(0) ? empty(x, x.shape(), cd) : Tensor();
  Tensor dw = v.needs(1) ? empty(x, normalized_shape, cd) : Tensor();
  Tensor db = !rms && v.needs(2) ? empty(x, normalized_shape, cd) : Tensor();
  auto data = [](const Tensor& t) { return t.defined() ? detail::first_element(t) : nullptr; };
  backend::NormBackward p;
  p.dtype = cd;
  p.n = normalized_shape.numel();
  p.rows = p.n == 0 ? 0 : x.numel() / p.n;
  p.eps = eps;
  p.rms = rms;
  p.x = data(xc);
  p.w = data(wc);
  p.g = data(gc);
  p.dx = data(dx);
  p.dw = data(dw);
  p.db = data(db);
  kernel(dev, p);
  v.set(0, dx);
  v.set(1, dw);
  if (!rms) v.set(2, db);
}

// index reshaped to run along dim d of a tensor of `shape` and expanded over it.
Tensor index_along(const Tensor& index, int d, const Shape& shape) {
  Shape s = Shape::filled(shape.rank(), 1);
  s[d] = index.numel();
  return index.reshape(s).expand(shape);
}

// The source index of each output position along one dim of a reflect or
// replicate pad (the forward's table in ops/masks.cpp).
Tensor pad_sources(const Tensor& like, std::int64_t before, std::int64_t size, std::int64_t n, PadMode mode) {
  std::vector<std::int64_t> table(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t j = i - before;
    table[static_cast<std::size_t>(i)] = mode == PadMode::reflect ? (j < 0 ? -j : (j >= size ? 2 * (size - 1) - j : j))
                                                                  : std::clamp<std::int64_t>(j, 0, size - 1);
  }
  Tensor t = empty(like, Shape{n}, DType::i64);
  std::copy(table.begin(), table.end(), reinterpret_cast<std::int64_t*>(detail::first_element(t)));
  return t;
}

// Reflect/replicate pads read some source elements more than once: each
// padded dim's gradient adds every output position into its source.
Tensor pad_grad(Tensor g, const Shape& input, const Dims& pad, PadMode mode) {
  if (mode == PadMode::constant) {  // the gradient cropped (or, where the pad cropped, zero-padded)
    Dims back;
    for (std::int64_t p : pad) back.push_back(-p);
    return forge::pad(g, back, PadMode::constant, 0.0);
  }
  for (int k = 0; k < pad.size() / 2; ++k) {
    const int d = input.rank() - 1 - k;
    if (pad[2 * k] == 0 && pad[2 * k + 1] == 0) continue;
    Shape to = g.shape();
    to[d] = input[d];
    const Tensor src = pad_sources(g, pad[2 * k], input[d], g.shape()[d], mode);
    g = forge::scatter_add(zeros_like_shape(g, to, g.dtype()), d, index_along(src, d, g.shape()), g);
  }
  return g;
}

}  // namespace

void softmax(const Tensor& out, const Tensor& x, std::int64_t dim) {
  record(out, "softmax", inputs(x), saves(out), [dim](Vjp& v) { v.set(0, softmax_grad(v, dim, false)); });
}

void log_softmax(const Tensor& out, const Tensor& x, std::int64_t dim) {
  record(out, "log_softmax", inputs(x), saves(out), [dim](Vjp& v) { v.set(0, softmax_grad(v, dim, true)); });
}

void layer_norm(const Tensor& out, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                const Tensor& bias, double eps) {
  record(out, "layer_norm", inputs(x, weight, bias), saves(x, weight),
         [normalized_shape, eps](Vjp& v) { norm_grad(v, normalized_shape, eps, false); });
}

void rms_norm(const Tensor& out, const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps) {
  record(out, "rms_norm", inputs(x, weight), saves(x, weight),
         [normalized_shape, eps](Vjp& v) { norm_grad(v, normalized_shape, eps, true); });
}

// The weight's gradient adds each output row into the row it was read from;
// the padding row's stays zero (libtorch).
void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices, std::int64_t padding_row) {
  record(out, "embedding", inputs(weight), saves(indices), [padding_row](Vjp& v) {
    const Shape& ws = v.input_shape(0);
    const Tensor& g = v.grad();
    Tensor rows = g.reshape(Shape{v.saved(0).numel(), ws[1]});
    const Tensor flat = v.saved(0).reshape(Shape{rows.shape()[0], 1});
    // Recording: the padding row's contributions are masked out, since writing zeros into a row would not record.
    if (padding_row >= 0 && v.create_graph()) rows = forge::masked_fill(rows, forge::eq(flat, padding_row), 0);
    Tensor gw = forge::scatter_add(zeros_like_shape(g, ws, g.dtype()), 0, flat.expand(rows.shape()), rows);
    if (padding_row >= 0 && !v.create_graph()) gw.select(0, padding_row).zero_();
    v.set(0, gw);
  });
}

void index_select(const Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index) {
  record(out, "index_select", inputs(x), saves(index), [dim](Vjp& v) {
    const Shape& xs = v.input_shape(0);
    const Tensor& g = v.grad();
    if (xs.rank() == 0) return v.set(0, g.reshape(xs));
    const int d = wrap_dim(dim, xs.rank(), "backward");
    v.set(0, forge::scatter_add(zeros_like_shape(g, xs, g.dtype()), d, index_along(v.saved(0), d, g.shape()), g));
  });
}

void gather(const Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index) {
  record(out, "gather", inputs(x), saves(index), [dim](Vjp& v) {
    const Tensor& g = v.grad();
    v.set(0, forge::scatter_add(zeros_like_shape(g, v.input_shape(0), g.dtype()), dim, v.saved(0), g));
  });
}

// src's gradient is g read back at the positions src was added into; src
// entries beyond index's extent were not read and get zeros.
void scatter_add(const Tensor& out, const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src) {
  record(out, "scatter_add", inputs(x, src), saves(index), [dim](Vjp& v) {
    const Tensor& g = v.grad();
    v.set(0, g);
    if (!v.needs(1)) return;
    Tensor taken = forge::gather(g, dim, v.saved(0));
    const Shape& ss = v.input_shape(1);
    if (taken.shape() == ss) return v.set(1, taken);
    Dims after;  // zero-pad every dim at its end, the last dim first (pad's order)
    for (int k = ss.rank() - 1; k >= 0; --k) {
      after.push_back(0);
      after.push_back(ss[k] - taken.shape()[k]);
    }
    v.set(1, forge::pad(taken, after, PadMode::constant, 0.0));
  });
}

void triu(const Tensor& out, const Tensor& x, std::int64_t diagonal) {
  record(out, "triu", inputs(x), saves(), [diagonal](Vjp& v) { v.set(0, forge::triu(v.grad(), diagonal)); });
}

void tril(const Tensor& out, const Tensor& x, std::int64_t diagonal) {
  record(out, "tril", inputs(x), saves(), [diagonal](Vjp& v) { v.set(0, forge::tril(v.grad(), diagonal)); });
}

void pad(const Tensor& out, const Tensor& x, const Dims& pad, PadMode mode) {
  record(out, "pad", inputs(x), saves(),
         [pad, mode](Vjp& v) { v.set(0, pad_grad(v.grad(), v.input_shape(0), pad, mode)); });
}

// The gradient goes through the forward's own mask, replayed from its seed;
// a backward that records records that replay as a dropout of the gradient.
void dropout(const Tensor& out, const Tensor& x, double p, std::uint64_t seed) {
  record(out, "dropout", inputs(x), saves(), [p, seed](Vjp& v) {
    const Tensor dx = detail::dropout_with_seed(v.grad(), p, seed);
    if (needs_grad(v.grad())) rules::dropout(dx, v.grad(), p, seed);
    v.set(0, dx);
  });
}

}  // namespace forge::autograd::rules
