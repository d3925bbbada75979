// VJPs of cat, stack, repeat and flip: one short function per op (see record.h).

#include "autograd/rules/shape.h"

#include "autograd/record.h"
#include "autograd/rules/common.h"
#include "forge/ops.h"

namespace forge::autograd::rules {

// Each input's gradient is its slab of the output's. Empty 1-D inputs, which
// cat skips, get an empty gradient.
void cat(const Tensor& out, const std::vector<Tensor>& tensors, int dim) {
  std::vector<std::int64_t> sizes;
  sizes.reserve(tensors.size());
  for (const Tensor& t : tensors) sizes.push_back(t.dim() == 1 && t.shape()[0] == 0 ? -1 : t.shape()[dim]);
  record_list(out, "cat", tensors, [sizes = std::move(sizes), dim](Vjp& v) {
    std::int64_t at = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] < 0) {
        v.set(i, zeros_like_shape(v.grad(), Shape{0}, v.grad().dtype()));
        continue;
      }
      if (v.needs(i)) v.set(i, v.grad().narrow(dim, at, sizes[i]));
      at += sizes[i];
    }
  });
}

void stack(const Tensor& out, const std::vector<Tensor>& tensors, int dim) {
  record_list(out, "stack", tensors, [dim](Vjp& v) {
    const std::int64_t n = v.grad().shape()[dim];
    for (std::int64_t i = 0; i < n; ++i)
      if (v.needs(static_cast<std::size_t>(i))) v.set(static_cast<std::size_t>(i), v.grad().select(dim, i));
  });
}

// Every tile adds into the input: each repeated dim of the gradient is split
// into [repeats, size] and the repeats summed, one dim at a time (so the rank
// never exceeds the output's by more than one).
void repeat(const Tensor& out, const Tensor& x, const Dims& repeats) {
  record(out, "repeat", inputs(x), saves(), [repeats](Vjp& v) {
    const Shape& in = v.input_shape(0);
    const int lead = repeats.rank() - in.rank();
    Tensor g = v.grad();
    for (int d = 0; d < repeats.rank(); ++d) {
      if (repeats[d] == 1) continue;
      Shape split = g.shape();
      split[d] = d < lead ? 1 : in[d - lead];
      split.insert(d, repeats[d]);
      g = g.reshape(split).sum(d);
    }
    v.set(0, g.reshape(in));
  });
}

void flip(const Tensor& out, const Tensor& x, const Dims& dims) {
  record(out, "flip", inputs(x), saves(), [dims](Vjp& v) { v.set(0, flip(v.grad(), dims)); });
}

}  // namespace forge::autograd::rules
