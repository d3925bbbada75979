#include "autograd/rules/common.h"

#include "core/tensor_internal.h"

namespace forge::autograd::rules {

Shape keepdim_shape(const Shape& input, const DimList& dims) {
  Shape s = input;
  if (dims.empty()) {
    for (int d = 0; d < s.rank(); ++d) s[d] = 1;
  } else {
    for (std::int64_t d : dims) s[wrap_dim(d, input.rank(), "backward")] = 1;
  }
  return s;
}

Tensor unreduce(const Tensor& grad, const Shape& input, const DimList& dims, bool keepdim) {
  const Tensor g = keepdim ? grad : grad.reshape(keepdim_shape(input, dims));
  return g.expand(input);
}

void refuse_recording(const Vjp& v, const char* op) {
  FORGE_CHECK(!v.create_graph() || !v.any_history(), not_implemented, op, "the backward of ", op,
              " runs a fused kernel and cannot be recorded: higher-order gradients (create_graph) "
              "through it are not supported");
}

Tensor zeros_like_shape(const Tensor& like, const Shape& shape, DType dtype) {
  Tensor out = detail::allocate(like.runtime(), shape, dtype, "backward");
  out.zero_();
  detail::adopt_output(out);
  return out;
}

}  // namespace forge::autograd::rules
