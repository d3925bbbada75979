// VJPs of the elementwise ops: one short function per op (see record.h).
// Broadcast reduction and dtype casts back to each input happen in Vjp::set.

#include "autograd/rules/elementwise.h"

#include "autograd/record.h"
#include "forge/ops.h"

namespace forge::autograd::rules {

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  record(out, "add", inputs(a, b), saves(), [](Vjp& v) {
    v.set(0, v.grad());
    v.set(1, v.grad());
  });
}

void add(const Tensor& out, const Tensor& a, Scalar) {
  record(out, "add", inputs(a), saves(), [](Vjp& v) { v.set(0, v.grad()); });
}

void sub(const Tensor& out, const Tensor& a, const Tensor& b) {
  record(out, "sub", inputs(a, b), saves(), [](Vjp& v) {
    v.set(0, v.grad());
    if (v.needs(1)) v.set(1, neg(v.grad()));
  });
}

void sub(const Tensor& out, const Tensor& a, Scalar) {
  record(out, "sub", inputs(a), saves(), [](Vjp& v) { v.set(0, v.grad()); });
}

void sub(const Tensor& out, Scalar, const Tensor& b) {
  record(out, "sub", inputs(b), saves(), [](Vjp& v) { v.set(0, neg(v.grad())); });
}

void mul(const Tensor& out, const Tensor& a, const Tensor& b) {
  // Save only what the other side's gradient reads.
  const Tensor none;
  record(out, "mul", inputs(a, b), saves(wants_grad(b) ? a : none, wants_grad(a) ? b : none), [](Vjp& v) {
    if (v.needs(0)) v.set(0, mul(v.grad(), v.saved(1)));
    if (v.needs(1)) v.set(1, mul(v.grad(), v.saved(0)));
  });
}

void mul(const Tensor& out, const Tensor& a, Scalar b) {
  record(out, "mul", inputs(a), saves(), [b](Vjp& v) { v.set(0, mul(v.grad(), b)); });
}

}  // namespace forge::autograd::rules
