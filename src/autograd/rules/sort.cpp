// VJPs of the sorting ops: one short function per op (see record.h).
//
// Each value of topk and sort is one element of x moved along dim, so its
// gradient goes back to the position its index names (indices are distinct
// along a line: nothing adds up).

#include "autograd/rules/sort.h"

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "forge/ops.h"

namespace forge::autograd::rules {
namespace {

void scattered_back(const char* name, const Tensor& values, const Tensor& x, int dim, const Tensor& indices) {
  record(values, name, inputs(x), saves(indices), [dim](Vjp& v) {
    const Shape& in = v.input_shape(0);
    if (in.rank() == 0) return v.set(0, v.grad());
    v.set(0, scatter_add(zeros_like_shape(v.grad(), in, v.grad().dtype()), dim, v.saved(0), v.grad()));
  });
}

}  // namespace

void topk(const Tensor& values, const Tensor& x, int dim, const Tensor& indices) {
  scattered_back("topk", values, x, dim, indices);
}
void sort(const Tensor& values, const Tensor& x, int dim, const Tensor& indices) {
  scattered_back("sort", values, x, dim, indices);
}

}  // namespace forge::autograd::rules
