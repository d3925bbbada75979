// VJPs of the reductions: one short function per op (see record.h).

#include "autograd/rules/reduce.h"

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "forge/ops.h"

namespace forge::autograd::rules {

void sum(const Tensor& out, const Tensor& x, const DimList& dims, bool keepdim) {
  record(out, "sum", inputs(x), saves(), [dims, keepdim](Vjp& v) {
    v.set(0, unreduce(v.grad(), v.input_shape(0), dims, keepdim));
  });
}

}  // namespace forge::autograd::rules
