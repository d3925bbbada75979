// VJPs of views, copies and casts: one short function per op (see record.h).

#include "autograd/rules/views.h"

#include "autograd/record.h"
#include "forge/ops.h"

namespace forge::autograd::rules {

void clone(const Tensor& out, const Tensor& x) {
  record(out, "clone", inputs(x), saves(), [](Vjp& v) { v.set(0, v.grad()); });
}

}  // namespace forge::autograd::rules
