// VJPs of the linear-algebra ops: one short function per op (see record.h).
// Every gradient is a product of the output gradient with the other operand
// read transposed through its strides: forge's GEMM takes a transposed view
// in place, so no transpose is ever copied. Batch dims that an operand
// broadcast over are summed by Vjp::set, except where one GEMM over flattened
// rows does that sum for free (a 2-D weight under a batched input).

#include "autograd/rules/linalg.h"

#include "autograd/record.h"
#include "forge/ops.h"

namespace forge::autograd::rules {
namespace {

Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }

// t [..., c] as rows [product of the leading dims, c] (t itself when 2-D,
// else a view when t's layout allows it). The row count is the product of
// the leading dims, not numel / c: with c == 0 the rows still number
// [2, 3, 0] -> [6, 0], and a gradient contracted over them keeps its shape.
Tensor as_rows(const Tensor& t) {
  if (t.dim() == 2) return t;
  std::int64_t rows = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) rows *= t.shape()[d];
  return t.reshape(Shape{rows, t.shape().back()});
}

// The gradient of b [..., k, n] in a [..., m, k] @ b: a^T @ g, as one GEMM
// over all rows when b is a plain matrix.
Tensor matmul_rhs_grad(const Tensor& a, const Tensor& g, int b_rank) {
  if (b_rank == 2 && a.dim() > 2) return mm(as_rows(a).t(), as_rows(g));
  return matmul(mT(a), g);
}

// Saves a for b's gradient and b for a's, each only when that gradient is wanted.
template <typename F>
void record_product(const Tensor& out, const char* name, const Tensor& a, const Tensor& b, F fn) {
  const Tensor none;
  record(out, name, inputs(a, b), saves(wants_grad(b) ? a : none, wants_grad(a) ? b : none), std::move(fn));
}

}  // namespace

void matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  record_product(out, "matmul", a, b, [](Vjp& v) {
    const Tensor &g = v.grad(), &a = v.saved(0), &b = v.saved(1);
    const int ra = v.input_shape(0).rank(), rb = v.input_shape(1).rank();
    if (ra == 1 && rb == 1) {  // a dot product; g is 0-d
      if (v.needs(0)) v.set(0, mul(g, b));
      if (v.needs(1)) v.set(1, mul(g, a));
    } else if (ra == 1) {  // a [k] as a row: g [..., n]
      if (v.needs(0)) v.set(0, matmul(b, g.unsqueeze(-1)).squeeze(-1));
      if (v.needs(1)) v.set(1, matmul(a.unsqueeze(-1), g.unsqueeze(-2)));
    } else if (rb == 1) {  // b [k] as a column: g [..., m]
      if (v.needs(0)) v.set(0, matmul(g.unsqueeze(-1), b.unsqueeze(0)));
      if (v.needs(1)) v.set(1, matmul(g.unsqueeze(-2), a).squeeze(-2));
    } else {
      if (v.needs(0)) v.set(0, matmul(g, mT(b)));
      if (v.needs(1)) v.set(1, matmul_rhs_grad(a, g, rb));
    }
  });
}

void mm(const Tensor& out, const Tensor& a, const Tensor& b) {
  record_product(out, "mm", a, b, [](Vjp& v) {
    if (v.needs(0)) v.set(0, mm(v.grad(), v.saved(1).t()));
    if (v.needs(1)) v.set(1, mm(v.saved(0).t(), v.grad()));
  });
}

void bmm(const Tensor& out, const Tensor& a, const Tensor& b) {
  record_product(out, "bmm", a, b, [](Vjp& v) {
    if (v.needs(0)) v.set(0, bmm(v.grad(), mT(v.saved(1))));
    if (v.needs(1)) v.set(1, bmm(mT(v.saved(0)), v.grad()));
  });
}

// y = x W^T + b: dx = g W, dW = g^T x over all leading dims as one GEMM,
// db = g summed over the leading dims.
void linear(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Tensor none;
  record(out, "linear", inputs(x, weight, bias), saves(wants_grad(weight) ? x : none, wants_grad(x) ? weight : none),
         [](Vjp& v) {
           const Tensor &g = v.grad(), &x = v.saved(0), &w = v.saved(1);
           if (v.needs(0)) v.set(0, matmul(g, w));
           if (v.needs(1)) v.set(1, g.dim() == 1 ? outer(g, x) : mm(as_rows(g).t(), as_rows(x)));
           if (v.needs(2)) v.set(2, g.dim() == 1 ? g : sum(as_rows(g), {0}));
         });
}

void addmm(const Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  const Tensor none;
  const double be = beta.to_double(), al = alpha.to_double();
  record(out, "addmm", inputs(bias, a, b), saves(wants_grad(b) ? a : none, wants_grad(a) ? b : none), [be, al](Vjp& v) {
    const Tensor& g = v.grad();
    auto scaled = [](Tensor t, double s) { return s == 1.0 ? t : mul(t, s); };
    if (v.needs(0)) v.set(0, scaled(g, be));
    if (v.needs(1)) v.set(1, scaled(mm(g, v.saved(1).t()), al));
    if (v.needs(2)) v.set(2, scaled(mm(v.saved(0).t(), g), al));
  });
}

void outer(const Tensor& out, const Tensor& a, const Tensor& b) {
  record_product(out, "outer", a, b, [](Vjp& v) {
    if (v.needs(0)) v.set(0, matmul(v.grad(), v.saved(1)));
    if (v.needs(1)) v.set(1, matmul(v.saved(0), v.grad()));
  });
}

void dot(const Tensor& out, const Tensor& a, const Tensor& b) {
  record_product(out, "dot", a, b, [](Vjp& v) {
    if (v.needs(0)) v.set(0, mul(v.grad(), v.saved(1)));
    if (v.needs(1)) v.set(1, mul(v.grad(), v.saved(0)));
  });
}

}  // namespace forge::autograd::rules
