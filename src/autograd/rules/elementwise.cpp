// VJPs of the elementwise ops: one short function per op (see record.h).
// Broadcast reduction and dtype casts back to each input happen in Vjp::set.

#include "autograd/rules/elementwise.h"

#include <cmath>

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "autograd/rules/unary.h"
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

void div(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Tensor none;
  record(out, "div", inputs(a, b), saves(wants_grad(b) ? a : none, b), [](Vjp& v) {
    const Tensor g = wide(v.grad());
    const Tensor den = wide(v.saved(1));
    if (v.needs(0)) v.set(0, g / den);
    if (v.needs(1)) v.set(1, forge::neg(g * (wide(v.saved(0)) / den / den)));
  });
}

void div(const Tensor& out, const Tensor& a, Scalar b) {
  record(out, "div", inputs(a), saves(), [b](Vjp& v) { v.set(0, forge::div(wide(v.grad()), b)); });
}

// d(a / b)/db = -a / b^2 = -out / b.
void div(const Tensor& out, Scalar, const Tensor& b) {
  record(out, "div", inputs(b), saves(out, b),
         [](Vjp& v) { v.set(0, forge::neg(wide(v.grad()) * (wide(v.saved(0)) / wide(v.saved(1))))); });
}

namespace {

// g * b * a^(b-1), 0 where b == 0 (libtorch's pow_backward_self: a 0^-1 there
// must not turn the zero gradient into NaN).
Tensor pow_base_grad(const Tensor& g, const Tensor& a, const Tensor& b) {
  return forge::masked_fill(g * b * forge::pow(a, b - 1.0), forge::eq(b, 0), 0);
}

// g * out * log(a), 0 where a == 0 and b >= 0 (libtorch's
// pow_backward_exponent: out is 0 or 1 there and log(0) would give NaN).
Tensor pow_exponent_grad(const Tensor& g, const Tensor& out, const Tensor& a, const Tensor& b) {
  const Tensor zero_base = forge::logical_and(forge::eq(a, 0), forge::ge(b, 0));
  return forge::masked_fill(g * out * forge::log(a), zero_base, 0);
}

}  // namespace

void pow(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Tensor none;
  record(out, "pow", inputs(a, b), saves(a, b, wants_grad(b) ? out : none), [](Vjp& v) {
    const Tensor g = wide(v.grad());
    const Tensor base = wide(v.saved(0));
    const Tensor exponent = wide(v.saved(1));
    if (v.needs(0)) v.set(0, pow_base_grad(g, base, exponent));
    if (v.needs(1)) v.set(1, pow_exponent_grad(g, wide(v.saved(2)), base, exponent));
  });
}

void pow(const Tensor& out, const Tensor& a, Scalar b) {
  record(out, "pow", inputs(a), saves(a), [b](Vjp& v) {
    const Tensor g = wide(v.grad());
    if (b.to_double() == 0.0) {
      v.set(0, zeros_like_shape(g, g.shape(), g.dtype()));
    } else {
      v.set(0, g * forge::pow(wide(v.saved(0)), b.to_double() - 1.0) * b);
    }
  });
}

// d(a^b)/db = out * log(a); 0 everywhere b >= 0 when a == 0.
void pow(const Tensor& out, Scalar a, const Tensor& b) {
  record(out, "pow", inputs(b), saves(out, b), [a](Vjp& v) {
    const Tensor g = wide(v.grad());
    const Tensor grad = g * wide(v.saved(0)) * std::log(a.to_double());
    v.set(0, a.to_double() == 0.0 ? forge::masked_fill(grad, forge::ge(v.saved(1), 0), 0) : grad);
  });
}

namespace {

// maximum/minimum's gradient to one side: all of g where that side wins, half
// where the two tie, none where it loses (libtorch's rule; NaN compares false
// both ways, so both sides get all of g).
Tensor pick_grad(const Tensor& g, const Tensor& a, const Tensor& b, bool a_wins_when_greater) {
  const Tensor loses = a_wins_when_greater ? forge::lt(a, b) : forge::gt(a, b);
  const Tensor split = forge::where(forge::eq(a, b), g * 0.5, g);
  return forge::masked_fill(split, loses, 0);
}

}  // namespace

void maximum(const Tensor& out, const Tensor& a, const Tensor& b) {
  record(out, "maximum", inputs(a, b), saves(a, b), [](Vjp& v) {
    const Tensor g = wide(v.grad());
    if (v.needs(0)) v.set(0, pick_grad(g, v.saved(0), v.saved(1), true));
    if (v.needs(1)) v.set(1, pick_grad(g, v.saved(1), v.saved(0), true));
  });
}

void minimum(const Tensor& out, const Tensor& a, const Tensor& b) {
  record(out, "minimum", inputs(a, b), saves(a, b), [](Vjp& v) {
    const Tensor g = wide(v.grad());
    if (v.needs(0)) v.set(0, pick_grad(g, v.saved(0), v.saved(1), false));
    if (v.needs(1)) v.set(1, pick_grad(g, v.saved(1), v.saved(0), false));
  });
}

// cond gets no gradient: it is bool.
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  record(out, "where", inputs(a, b), saves(cond), [](Vjp& v) {
    const Tensor& g = v.grad();
    const Tensor& take_a = v.saved(0);
    if (v.needs(0)) v.set(0, forge::masked_fill(g, forge::logical_not(take_a), 0));
    if (v.needs(1)) v.set(1, forge::masked_fill(g, take_a, 0));
  });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, Scalar) {
  record(out, "where", inputs(a), saves(cond),
         [](Vjp& v) { v.set(0, forge::masked_fill(v.grad(), forge::logical_not(v.saved(0)), 0)); });
}

void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, Scalar) {
  record(out, "masked_fill", inputs(x), saves(mask),
         [](Vjp& v) { v.set(0, forge::masked_fill(v.grad(), v.saved(0), 0)); });
}

// g where min <= x <= max (bounds included, as libtorch), else 0; a NaN x gets 0.
void clamp(const Tensor& out, const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  record(out, "clamp", inputs(x), saves(x), [min, max](Vjp& v) {
    const Tensor& xs = v.saved(0);
    Tensor inside;
    if (min) inside = forge::ge(xs, *min);
    if (max) inside = inside.defined() ? forge::logical_and(inside, forge::le(xs, *max)) : forge::le(xs, *max);
    v.set(0, forge::masked_fill(wide(v.grad()), forge::logical_not(inside), 0));
  });
}

}  // namespace forge::autograd::rules
