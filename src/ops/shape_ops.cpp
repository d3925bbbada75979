// cat, stack, split, chunk, repeat, flip. cat and stack copy each input into
// its slab of the output (packed slabs are block copies, a dtype that differs
// from the promoted one is converted on the way); repeat and flip are one
// index-mapped copy; split and chunk only make views.

#include <vector>

#include "autograd/record.h"
#include "autograd/rules/shape.h"
#include "autograd/rules/views.h"
#include "forge/ops.h"
#include "ops/nn_internal.h"

namespace forge {
namespace {

// libtorch skips 1-D empty tensors in cat, whatever the other shapes.
bool skipped_in_cat(const Tensor& t) { return t.dim() == 1 && t.shape()[0] == 0; }

void check_list(const char* op, const std::vector<Tensor>& tensors) {
  FORGE_CHECK(!tensors.empty(), invalid_argument, op, "expected a non-empty list of tensors");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    detail::check_input(op, tensors[i], "tensors");
    detail::check_same_runtime(op, tensors[0], tensors[i]);
  }
}

DType promoted(const std::vector<Tensor>& tensors) {
  DType t = tensors[0].dtype();
  for (const Tensor& x : tensors) t = promote_types(t, x.dtype());
  return t;
}

struct CatPlan {
  int dim = 0;
  Shape shape;
  DType dtype;
};

CatPlan plan_cat(const char* op, const std::vector<Tensor>& tensors, std::int64_t dim) {
  check_list(op, tensors);
  CatPlan plan;
  plan.dtype = promoted(tensors);
  std::size_t ref = tensors.size();
  for (std::size_t i = 0; i < tensors.size() && ref == tensors.size(); ++i)
    if (!skipped_in_cat(tensors[i])) ref = i;
  if (ref == tensors.size()) {  // only empty 1-D tensors: libtorch checks no dim then
    plan.shape = Shape{0};
    return plan;
  }
  const Tensor& r = tensors[ref];
  FORGE_CHECK(r.dim() > 0, invalid_argument, op, "tensor ", ref, " is 0-dimensional and cannot be concatenated");
  plan.dim = wrap_dim(dim, r.dim(), op);
  plan.shape = r.shape();
  std::int64_t total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (skipped_in_cat(t)) continue;
    FORGE_CHECK(t.dim() == r.dim(), shape, op, "tensor ", i, " has shape ", t.shape(), " but tensor ", ref,
                " has shape ", r.shape(), ": ranks differ");
    for (int d = 0; d < r.dim(); ++d) {
      FORGE_CHECK(d == plan.dim || t.shape()[d] == r.shape()[d], shape, op, "tensor ", i, " has shape ", t.shape(),
                  " but tensor ", ref, " has shape ", r.shape(), ": they differ in dimension ", d);
    }
    FORGE_CHECK(!__builtin_add_overflow(total, t.shape()[plan.dim], &total), invalid_argument, op,
                "the joined size overflows");
  }
  plan.shape[plan.dim] = total;
  return plan;
}

// A packed input of out's dtype into a packed out: for each index of the dims
// before `dim`, one block copy of the input's whole slab.
void cat_slabs(detail::DeviceRuntime& dev, backend::CopySlabsFn* copy_slabs, Tensor& out, const Tensor& t, int dim,
               std::int64_t at) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= out.shape()[d];
  for (int d = dim + 1; d < out.dim(); ++d) inner *= out.shape()[d];
  const auto es = static_cast<std::int64_t>(out.element_size());
  const std::int64_t chunk = t.shape()[dim] * inner * es, out_row = out.shape()[dim] * inner * es;
  copy_slabs(dev, outer, static_cast<std::size_t>(chunk), static_cast<std::size_t>(out_row),
             detail::first_element(out) + at * inner * es, detail::first_element(t));
}

// Each input into its slab of out: block copies when both are packed and of
// one dtype and the device has them, else the copy family (which converts on
// the way).
void cat_kernel(const char* op, Tensor& out, const std::vector<Tensor>& tensors, int dim) {
  if (out.numel() == 0) return;
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto& slabs = dev.kernels().indexing.copy_slabs;
  backend::CopySlabsFn* const copy_slabs =
      out.is_contiguous() && out.dtype() != DType::boolean && slabs.supports(out.dtype()) ? slabs.fn : nullptr;
  std::int64_t at = 0;
  const backend::Operand base = detail::operand(out);
  const std::int64_t step = out.strides()[dim] * static_cast<std::int64_t>(out.element_size());
  for (const Tensor& t : tensors) {
    if (skipped_in_cat(t)) continue;
    if (t.numel() > 0 && copy_slabs && t.dtype() == out.dtype() && t.is_contiguous()) {
      cat_slabs(dev, copy_slabs, out, t, dim, at);
    } else if (t.numel() > 0) {
      backend::Operand dst = base;
      dst.data += at * step;
      detail::copy_cast(op, out, t.shape(), dst, detail::operand(t));
    }
    at += t.shape()[dim];
  }
}

struct StackPlan {
  int dim;
  Shape shape;
  DType dtype;
};

StackPlan plan_stack(const char* op, const std::vector<Tensor>& tensors, std::int64_t dim) {
  check_list(op, tensors);
  const Tensor& r = tensors[0];
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    FORGE_CHECK(tensors[i].shape() == r.shape(), shape, op, "tensor ", i, " has shape ", tensors[i].shape(),
                " but tensor 0 has shape ", r.shape(), "; stack needs equal shapes");
  }
  FORGE_CHECK(r.dim() < kMaxRank, invalid_argument, op, "stacking tensors of rank ", r.dim(),
              " would exceed the maximum rank ", kMaxRank);
  StackPlan plan;
  plan.dim = wrap_dim(dim, r.dim() + 1, op);
  plan.shape = r.shape();
  plan.shape.insert(plan.dim, static_cast<std::int64_t>(tensors.size()));
  plan.dtype = promoted(tensors);
  return plan;
}

void stack_kernel(const char* op, Tensor& out, const std::vector<Tensor>& tensors, int dim) {
  if (out.numel() == 0) return;
  backend::Operand dst = detail::operand(out);
  dst.strides.erase(dim);
  const std::int64_t step = out.strides()[dim] * static_cast<std::int64_t>(out.element_size());
  for (const Tensor& t : tensors) {
    detail::copy_cast(op, out, t.shape(), dst, detail::operand(t));
    dst.data += step;
  }
}

Shape repeat_shape(const char* op, const Tensor& x, const Dims& repeats) {
  FORGE_CHECK(repeats.size() >= x.dim(), invalid_argument, op, "repeats ", repeats,
              " has fewer entries than x has dims (", x.dim(), ")");
  const int lead = repeats.size() - x.dim();
  Shape s;
  for (int d = 0; d < repeats.size(); ++d) {
    FORGE_CHECK(repeats[d] >= 0, invalid_argument, op, "negative repeat ", repeats[d], " in ", repeats);
    const std::int64_t in = d < lead ? 1 : x.shape()[d - lead];
    std::int64_t n = 0;
    FORGE_CHECK(!__builtin_mul_overflow(in, repeats[d], &n), invalid_argument, op, "size ", in, " times repeat ",
                repeats[d], " overflows");
    s.push_back(n);
  }
  return s;
}

void repeat_kernel(const char* op, Tensor& out, const Tensor& x, const Dims& repeats) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto mapped_copy = dev.kernels().indexing.mapped_copy.get(op, out.dtype(), dev);
  if (out.numel() == 0) return;
  const int r = out.dim(), lead = r - x.dim();
  backend::Operand src = detail::operand(x);
  src.strides = Strides::filled(r, 0);
  for (int d = 0; d < x.dim(); ++d) src.strides[lead + d] = x.strides()[d];
  // Leading dims read source index i mod size; the last dim tiles whole rows.
  std::vector<std::int64_t> table;
  std::size_t need = 0;
  for (int d = lead; d < r - 1; ++d)
    if (repeats[d] > 1) need += static_cast<std::size_t>(out.shape()[d]);
  table.reserve(need);
  const std::int64_t* maps[kMaxRank] = {};
  for (int d = lead; d < r - 1; ++d) {
    if (repeats[d] <= 1) continue;
    const std::int64_t size = x.shape()[d - lead];
    const std::size_t start = table.size();
    for (std::int64_t i = 0; i < out.shape()[d]; ++i) table.push_back(i % size);
    maps[d] = table.data() + start;
  }
  const std::int64_t period = r > 0 && r - 1 >= lead && repeats[r - 1] > 1 ? x.shape()[x.dim() - 1] : 0;
  mapped_copy(dev, out.shape(), detail::operand(out), src, maps, period, nullptr);
}

Dims flip_dims(const char* op, const Tensor& x, const Dims& dims) {
  Dims wrapped;
  for (int i = 0; i < dims.size(); ++i) {
    const int d = wrap_dim(dims[i], x.dim(), op);
    for (int j = 0; j < wrapped.size(); ++j)
      FORGE_CHECK(wrapped[j] != d, invalid_argument, op, "dim ", d, " appears more than once in ", dims);
    wrapped.push_back(d);
  }
  return wrapped;
}

void flip_kernel(const char* op, Tensor& out, const Tensor& x, const Dims& dims) {
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  const auto mapped_copy = dev.kernels().indexing.mapped_copy.get(op, out.dtype(), dev);
  if (out.numel() == 0) return;
  backend::Operand src = detail::operand(x);
  for (int i = 0; i < dims.size(); ++i) {
    if (x.dim() == 0) break;
    const int d = static_cast<int>(dims[i]);
    src.data += (x.shape()[d] - 1) * src.strides[d] * static_cast<std::int64_t>(x.element_size());
    src.strides[d] = -src.strides[d];
  }
  const std::int64_t* maps[kMaxRank] = {};
  mapped_copy(dev, out.shape(), detail::operand(out), src, maps, 0, nullptr);
}

void check_into(const char* op, const Tensor& out, const Tensor& in) {
  detail::check_writable(op, out, "out");
  detail::check_same_runtime(op, out, in);
}

// A view of x: `length` entries of dim d from `start`; it records as a narrow of x.
Tensor piece(const Tensor& x, int d, std::int64_t start, std::int64_t length) {
  Shape s = x.shape();
  s[d] = length;
  Tensor out = detail::make_view(x, s, x.strides(), x.offset() + (length > 0 ? start * x.strides()[d] : 0));
  FORGE_RECORD(narrow, out, x, d, start, length);
  return out;
}

int split_dim(const char* op, const Tensor& x, std::int64_t dim) {
  detail::check_input(op, x, "x");
  FORGE_CHECK(x.dim() > 0, invalid_argument, op, "cannot split a 0-dimensional tensor");
  return wrap_dim(dim, x.dim(), op);
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) try {
  const char* op = "cat";
  const CatPlan plan = plan_cat(op, tensors, dim);
  Tensor out = detail::allocate(tensors[0].runtime(), plan.shape, plan.dtype, op);
  cat_kernel(op, out, tensors, plan.dim);
  detail::adopt_output(out);
  FORGE_RECORD(cat, out, tensors, plan.dim);
  return out;
}
FORGE_CATCH_OOM("cat")

Tensor& cat_into(Tensor& out, const std::vector<Tensor>& tensors, std::int64_t dim) try {
  const char* op = "cat_into";
  const CatPlan plan = plan_cat(op, tensors, dim);
  check_into(op, out, tensors[0]);
  detail::check_out_geometry(op, out, plan.shape, plan.dtype);
  for (const Tensor& t : tensors) detail::check_no_overlap(op, out, t, "an input");
  cat_kernel(op, out, tensors, plan.dim);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("cat_into")

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) try {
  const char* op = "stack";
  const StackPlan plan = plan_stack(op, tensors, dim);
  Tensor out = detail::allocate(tensors[0].runtime(), plan.shape, plan.dtype, op);
  stack_kernel(op, out, tensors, plan.dim);
  detail::adopt_output(out);
  FORGE_RECORD(stack, out, tensors, plan.dim);
  return out;
}
FORGE_CATCH_OOM("stack")

Tensor& stack_into(Tensor& out, const std::vector<Tensor>& tensors, std::int64_t dim) try {
  const char* op = "stack_into";
  const StackPlan plan = plan_stack(op, tensors, dim);
  check_into(op, out, tensors[0]);
  detail::check_out_geometry(op, out, plan.shape, plan.dtype);
  for (const Tensor& t : tensors) detail::check_no_overlap(op, out, t, "an input");
  stack_kernel(op, out, tensors, plan.dim);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("stack_into")

std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim) try {
  const char* op = "split";
  const int d = split_dim(op, x, dim);
  const std::int64_t size = x.shape()[d];
  FORGE_CHECK(split_size >= 0, invalid_argument, op, "split_size must be non-negative, got ", split_size);
  FORGE_CHECK(split_size > 0 || size == 0, invalid_argument, op, "split_size 0 cannot split dimension ", d, " of size ",
              size);
  // ceil(size / split_size) pieces, at least one; written so that a huge split_size cannot overflow.
  const std::int64_t n = split_size == 0 || size == 0 ? 1 : (size - 1) / split_size + 1;
  std::vector<Tensor> pieces;
  pieces.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t start = i * split_size;
    pieces.push_back(piece(x, d, start, std::min(split_size, size - start)));
  }
  return pieces;
}
FORGE_CATCH_OOM("split")

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) try {
  const char* op = "split";
  const int d = split_dim(op, x, dim);
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    FORGE_CHECK(s >= 0, invalid_argument, op, "split sizes must be non-negative, got ", s);
    FORGE_CHECK(!__builtin_add_overflow(total, s, &total), invalid_argument, op, "split sizes overflow");
  }
  FORGE_CHECK(total == x.shape()[d], invalid_argument, op, "split sizes add up to ", total, " but dimension ", d,
              " has size ", x.shape()[d]);
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  std::int64_t start = 0;
  for (std::int64_t s : sizes) {
    pieces.push_back(piece(x, d, start, s));
    start += s;
  }
  return pieces;
}
FORGE_CATCH_OOM("split")

std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim) try {
  const char* op = "chunk";
  const int d = split_dim(op, x, dim);
  FORGE_CHECK(chunks > 0, invalid_argument, op, "chunks must be positive, got ", chunks);
  const std::int64_t size = x.shape()[d];
  if (size == 0) {  // libtorch gives `chunks` empty pieces here
    return split(x, std::vector<std::int64_t>(static_cast<std::size_t>(chunks), 0), d);
  }
  const std::int64_t piece_size = size / chunks + (size % chunks != 0);
  return split(x, piece_size, d);
}
FORGE_CATCH_OOM("chunk")

Tensor repeat(const Tensor& x, const Dims& repeats) try {
  const char* op = "repeat";
  detail::check_input(op, x, "x");
  const Shape shape = repeat_shape(op, x, repeats);
  Tensor out = detail::allocate(x.runtime(), shape, x.dtype(), op);
  repeat_kernel(op, out, x, repeats);
  detail::adopt_output(out);
  FORGE_RECORD(repeat, out, x, repeats);
  return out;
}
FORGE_CATCH_OOM("repeat")

Tensor& repeat_into(Tensor& out, const Tensor& x, const Dims& repeats) try {
  const char* op = "repeat_into";
  detail::check_input(op, x, "x");
  check_into(op, out, x);
  detail::check_out_geometry(op, out, repeat_shape(op, x, repeats), x.dtype());
  detail::check_no_overlap(op, out, x, "x");
  repeat_kernel(op, out, x, repeats);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("repeat_into")

Tensor flip(const Tensor& x, const Dims& dims) try {
  const char* op = "flip";
  detail::check_input(op, x, "x");
  const Dims wrapped = flip_dims(op, x, dims);
  Tensor out = detail::allocate(x.runtime(), x.shape(), x.dtype(), op);
  flip_kernel(op, out, x, wrapped);
  detail::adopt_output(out);
  FORGE_RECORD(flip, out, x, wrapped);
  return out;
}
FORGE_CATCH_OOM("flip")

Tensor& flip_into(Tensor& out, const Tensor& x, const Dims& dims) try {
  const char* op = "flip_into";
  detail::check_input(op, x, "x");
  check_into(op, out, x);
  const Dims wrapped = flip_dims(op, x, dims);
  detail::check_out_geometry(op, out, x.shape(), x.dtype());
  detail::check_no_overlap(op, out, x, "x");
  flip_kernel(op, out, x, wrapped);
  out.buffer()->bump_version();
  return out;
}
FORGE_CATCH_OOM("flip_into")

std::vector<Tensor> Tensor::split(std::int64_t split_size, std::int64_t dim) const {
  return forge::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::chunk(std::int64_t chunks, std::int64_t dim) const {
  return forge::chunk(*this, chunks, dim);
}
Tensor Tensor::repeat(const Dims& repeats) const { return forge::repeat(*this, repeats); }
Tensor Tensor::flip(const Dims& dims) const { return forge::flip(*this, dims); }

}  // namespace forge
