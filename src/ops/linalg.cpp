// matmul, mm, bmm, linear, addmm, outer, dot: each op states its operands as
// (possibly batched, possibly broadcast) strided matrices, checks them, and
// hands one MatmulProblem to the linalg family's matmul entry of its device.
// Nothing is copied to make an operand contiguous; the kernel reads views
// through their strides. Under autocast (forge/amp.h) matmul, bmm and linear
// first recall themselves on their f32 operands cast to the region's dtype.
// matmul, mm and bmm (and their _into forms) also take int8 operands: a u8
// or i8, b i8, the result i32 (Note [int8 products]).

#include "autograd/rules/linalg.h"

#include "autograd/record.h"
#include "forge/amp.h"
#include "forge/ops.h"
#include "ops/linalg_internal.h"

namespace forge {
namespace {

// An operand as a stack of matrices: its leading dims, their strides, and
// the matrix's extents and strides.
struct Side {
  Shape batch;
  Strides batch_strides;
  std::int64_t rows = 1, cols = 1, rs = 0, cs = 0;
};

// The last two dims of t; a 1-D t is a row (as_row) or a column.
Side matrix_side(const Tensor& t, bool as_row) {
  Side s;
  const int r = t.dim();
  if (r == 1) {
    (as_row ? s.cols : s.rows) = t.shape()[0];
    (as_row ? s.cs : s.rs) = t.strides()[0];
    return s;
  }
  for (int d = 0; d < r - 2; ++d) {
    s.batch.push_back(t.shape()[d]);
    s.batch_strides.push_back(t.strides()[d]);
  }
  s.rows = t.shape()[r - 2];
  s.cols = t.shape()[r - 1];
  s.rs = t.strides()[r - 2];
  s.cs = t.strides()[r - 1];
  return s;
}

// s's batch strides over `batch` (right-aligned; broadcast dims get 0).
Strides broadcast_strides(const Side& s, const Shape& batch) {
  Strides out = Strides::filled(batch.rank(), 0);
  const int lead = batch.rank() - s.batch.rank();
  for (int d = 0; d < s.batch.rank(); ++d) out[lead + d] = s.batch[d] == 1 ? 0 : s.batch_strides[d];
  return out;
}

// Note [int8 products]
// An int8 product multiplies a u8 or i8 `a` by an i8 `b` and sums in i32,
// as VPDPBUSD does (u8 x s8; an i8 a is offset by 128 and corrected), and
// as libtorch's _int_mm does for i8 x i8. The sums are exact while they fit
// in i32 and wrap modulo 2^32 beyond. There is no bias, alpha or beta and
// no gradient (integer tensors never require one); an i8 x u8 product is
// refused rather than silently reordered.
bool int8_product(const Tensor& a, const Tensor& b) {
  return (a.dtype() == DType::u8 || a.dtype() == DType::i8) && b.dtype() == DType::i8;
}

struct Plan {
  backend::MatmulProblem p;
  Shape out_shape;
  DType out_dtype = DType::f32;
  bool has_rows = true, has_cols = true;  // whether out keeps the m and n dims
};

Plan plan(const char* op, const Tensor& a, const Side& sa, bool a_vector, const Tensor& b, const Side& sb,
          bool b_vector) {
  FORGE_CHECK(sa.cols == sb.rows, shape, op, "inner dimensions differ: ", a.shape(), " @ ", b.shape());
  Plan pl;
  backend::MatmulProblem& p = pl.p;
  p.dtype = a.dtype();
  pl.out_dtype = int8_product(a, b) ? DType::i32 : a.dtype();
  p.batch = broadcast_shapes(sa.batch, sb.batch, op);
  p.m = sa.rows;
  p.k = sa.cols;
  p.n = sb.cols;
  p.a = {detail::first_element(a), broadcast_strides(sa, p.batch), sa.rs, sa.cs};
  p.b = {detail::first_element(b), broadcast_strides(sb, p.batch), sb.rs, sb.cs};
  pl.out_shape = p.batch;
  pl.has_rows = !a_vector;
  pl.has_cols = !b_vector;
  if (pl.has_rows) pl.out_shape.push_back(p.m);
  if (pl.has_cols) pl.out_shape.push_back(p.n);
  return pl;
}

// bias broadcast to [batch..., m, n] (the shape of out, without dropped dims).
void bind_bias(const char* op, Plan& pl, const Tensor& bias, double beta, double alpha) {
  pl.p.alpha = alpha;
  pl.p.beta = beta;
  if (!bias.defined()) return;
  FORGE_CHECK(broadcast_shapes(bias.shape(), pl.out_shape, op) == pl.out_shape, shape, op, "bias of shape ",
              bias.shape(), " does not broadcast to the result's shape ", pl.out_shape);
  const backend::Operand o = detail::operand_broadcast(bias, pl.out_shape);
  const int br = pl.p.batch.rank();
  pl.p.bias.data = o.data;
  for (int d = 0; d < br; ++d) pl.p.bias.batch_strides.push_back(o.strides[d]);
  pl.p.bias.rs = pl.has_rows ? o.strides[br] : 0;
  pl.p.bias.cs = pl.has_cols ? o.strides[o.strides.rank() - 1] : 0;
}

void bind_out(Plan& pl, const Tensor& out) {
  const int br = pl.p.batch.rank();
  pl.p.c.data = detail::first_element(out);
  pl.p.c.batch_strides = Strides{};
  for (int d = 0; d < br; ++d) pl.p.c.batch_strides.push_back(out.strides()[d]);
  pl.p.c.rs = pl.has_rows ? out.strides()[br] : 0;
  pl.p.c.cs = pl.has_cols ? out.strides()[out.dim() - 1] : 0;
}

// Both operands floating and of one dtype, or, where the op takes them
// (`int8`), an int8 product's (Note [int8 products]).
void check_operands(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                    bool int8 = false) {
  detail::check_input(op, a, a_name);
  detail::check_input(op, b, b_name);
  detail::check_same_runtime(op, a, b);
  if (int8 && int8_product(a, b)) return;
  const auto eight_bit = [](const Tensor& t) { return t.dtype() == DType::u8 || t.dtype() == DType::i8; };
  FORGE_CHECK(!int8 || !(eight_bit(a) || eight_bit(b)), dtype, op, "an int8 product takes a u8 or i8 ", a_name,
              " and an i8 ", b_name, ", but ", a_name, " is ", dtype_name(a.dtype()), " and ", b_name, " is ",
              dtype_name(b.dtype()));
  detail::check_same_floating(op, a, a_name, b, b_name);
}

void check_bias(const char* op, const Tensor& bias, const Tensor& a) {
  if (!bias.defined()) return;
  detail::check_input(op, bias, "bias");
  detail::check_same_runtime(op, bias, a);
  FORGE_CHECK(bias.dtype() == a.dtype(), dtype, op, "bias is ", dtype_name(bias.dtype()), " but the operands are ",
              dtype_name(a.dtype()));
}

// The product into out, on out's device.
void compute(const char* op, Plan& pl, const Tensor& out) {
  bind_out(pl, out);
  detail::DeviceRuntime& dev = detail::device_runtime(out);
  dev.kernels().linalg.matmul.get(op, pl.p.dtype, dev)(dev, pl.p);
}

Tensor run(const char* op, Plan& pl, const Tensor& a) {
  Tensor out = detail::allocate(a.runtime(), pl.out_shape, pl.out_dtype, op);
  compute(op, pl, out);
  detail::adopt_output(out);
  return out;
}

// Checks out against the plan (after the operands' own checks) and runs.
Tensor& run_into(const char* op, Tensor& out, Plan& pl, const Tensor& a, const Tensor& b,
                 const Tensor& bias = Tensor()) {
  detail::check_same_runtime(op, out, a);
  FORGE_CHECK(out.shape() == pl.out_shape, shape, op, "out has shape ", out.shape(), " but the result has shape ",
              pl.out_shape);
  FORGE_CHECK(out.dtype() == pl.out_dtype, dtype, op, "out is ", dtype_name(out.dtype()), " but the result is ",
              dtype_name(pl.out_dtype));
  detail::check_no_overlap(op, out, a, "a");
  detail::check_no_overlap(op, out, b, "b");
  if (bias.defined()) detail::check_no_overlap(op, out, bias, "bias");
  compute(op, pl, out);
  out.buffer()->bump_version();
  return out;
}

// ---- the plans of each op (operands already checked) ----

Plan plan_matmul(const char* op, const Tensor& a, const Tensor& b) {
  FORGE_CHECK(a.dim() >= 1 && b.dim() >= 1, shape, op, "operands need at least one dimension, got shapes ", a.shape(),
              " and ", b.shape());
  return plan(op, a, matrix_side(a, true), a.dim() == 1, b, matrix_side(b, false), b.dim() == 1);
}

Plan plan_mm(const char* op, const Tensor& a, const Tensor& b) {
  FORGE_CHECK(a.dim() == 2 && b.dim() == 2, shape, op, "expects 2-D operands, got shapes ", a.shape(), " and ",
              b.shape());
  return plan(op, a, matrix_side(a, true), false, b, matrix_side(b, false), false);
}

Plan plan_bmm(const char* op, const Tensor& a, const Tensor& b) {
  FORGE_CHECK(a.dim() == 3 && b.dim() == 3, shape, op, "expects 3-D operands, got shapes ", a.shape(), " and ",
              b.shape());
  FORGE_CHECK(a.shape()[0] == b.shape()[0], shape, op, "batch sizes differ: ", a.shape(), " and ", b.shape());
  return plan(op, a, matrix_side(a, true), false, b, matrix_side(b, false), false);
}

Plan plan_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  FORGE_CHECK(x.dim() >= 1, shape, op, "x needs at least one dimension, got shape ", x.shape());
  FORGE_CHECK(weight.dim() == 2, shape, op, "weight must be [out_features, in_features], got shape ", weight.shape());
  FORGE_CHECK(x.shape().back() == weight.shape()[1], shape, op, "x has ", x.shape().back(),
              " features in its last dim (shape ", x.shape(), ") but weight takes ", weight.shape()[1], " (shape ",
              weight.shape(), ")");
  if (bias.defined())
    FORGE_CHECK(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0], shape, op, "bias must have shape [",
                weight.shape()[0], "], got ", bias.shape());
  // weight read transposed through its strides: [in, out].
  Side w;
  w.rows = weight.shape()[1];
  w.cols = weight.shape()[0];
  w.rs = weight.strides()[1];
  w.cs = weight.strides()[0];
  Plan pl = plan(op, x, matrix_side(x, true), x.dim() == 1, weight, w, false);
  bind_bias(op, pl, bias, 1.0, 1.0);
  return pl;
}

Plan plan_addmm(const char* op, const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  Plan pl = plan_mm(op, a, b);
  bind_bias(op, pl, bias, beta.to_double(), alpha.to_double());
  return pl;
}

Plan plan_outer(const char* op, const Tensor& a, const Tensor& b) {
  FORGE_CHECK(a.dim() == 1 && b.dim() == 1, shape, op, "expects 1-D operands, got shapes ", a.shape(), " and ",
              b.shape());
  return plan(op, a, matrix_side(a, false), false, b, matrix_side(b, true), false);
}

Plan plan_dot(const char* op, const Tensor& a, const Tensor& b) {
  FORGE_CHECK(a.dim() == 1 && b.dim() == 1, shape, op, "expects 1-D operands, got shapes ", a.shape(), " and ",
              b.shape());
  FORGE_CHECK(a.shape()[0] == b.shape()[0], shape, op, "operands differ in length: ", a.shape(), " and ", b.shape());
  return plan(op, a, matrix_side(a, true), true, b, matrix_side(b, false), true);
}

}  // namespace

// Each op records itself when autograd needs it (FORGE_RECORD; the rules are
// in src/autograd/rules/linalg.cpp). The _into forms do not record.
Tensor matmul(const Tensor& a, const Tensor& b) try {
  if (amp::detail::autocasts(a, b)) [[unlikely]]
    return matmul(amp::detail::autocast(a), amp::detail::autocast(b));
  check_operands("matmul", a, "a", b, "b", true);
  Plan pl = plan_matmul("matmul", a, b);
  Tensor out = run("matmul", pl, a);
  FORGE_RECORD(matmul, out, a, b);
  return out;
}
FORGE_CATCH_OOM("matmul")

Tensor mm(const Tensor& a, const Tensor& b) try {
  check_operands("mm", a, "a", b, "b", true);
  Plan pl = plan_mm("mm", a, b);
  Tensor out = run("mm", pl, a);
  FORGE_RECORD(mm, out, a, b);
  return out;
}
FORGE_CATCH_OOM("mm")

Tensor bmm(const Tensor& a, const Tensor& b) try {
  if (amp::detail::autocasts(a, b)) [[unlikely]]
    return bmm(amp::detail::autocast(a), amp::detail::autocast(b));
  check_operands("bmm", a, "a", b, "b", true);
  Plan pl = plan_bmm("bmm", a, b);
  Tensor out = run("bmm", pl, a);
  FORGE_RECORD(bmm, out, a, b);
  return out;
}
FORGE_CATCH_OOM("bmm")

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) try {
  if (amp::detail::autocasts(x, weight, bias)) [[unlikely]]
    return linear(amp::detail::autocast(x), amp::detail::autocast(weight), amp::detail::autocast(bias));
  check_operands("linear", x, "x", weight, "weight");
  check_bias("linear", bias, x);
  Plan pl = plan_linear("linear", x, weight, bias);
  Tensor out = run("linear", pl, x);
  FORGE_RECORD(linear, out, x, weight, bias);
  return out;
}
FORGE_CATCH_OOM("linear")

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) try {
  check_operands("addmm", a, "a", b, "b");
  detail::check_input("addmm", bias, "bias");
  check_bias("addmm", bias, a);
  Plan pl = plan_addmm("addmm", bias, a, b, beta, alpha);
  Tensor out = run("addmm", pl, a);
  FORGE_RECORD(addmm, out, bias, a, b, beta, alpha);
  return out;
}
FORGE_CATCH_OOM("addmm")

Tensor outer(const Tensor& a, const Tensor& b) try {
  check_operands("outer", a, "a", b, "b");
  Plan pl = plan_outer("outer", a, b);
  Tensor out = run("outer", pl, a);
  FORGE_RECORD(outer, out, a, b);
  return out;
}
FORGE_CATCH_OOM("outer")

Tensor dot(const Tensor& a, const Tensor& b) try {
  check_operands("dot", a, "a", b, "b");
  Plan pl = plan_dot("dot", a, b);
  Tensor out = run("dot", pl, a);
  FORGE_RECORD(dot, out, a, b);
  return out;
}
FORGE_CATCH_OOM("dot")

Tensor& matmul_into(Tensor& out, const Tensor& a, const Tensor& b) try {
  detail::check_writable("matmul_into", out, "out");
  check_operands("matmul_into", a, "a", b, "b", true);
  Plan pl = plan_matmul("matmul_into", a, b);
  return run_into("matmul_into", out, pl, a, b);
}
FORGE_CATCH_OOM("matmul_into")

Tensor& mm_into(Tensor& out, const Tensor& a, const Tensor& b) try {
  detail::check_writable("mm_into", out, "out");
  check_operands("mm_into", a, "a", b, "b", true);
  Plan pl = plan_mm("mm_into", a, b);
  return run_into("mm_into", out, pl, a, b);
}
FORGE_CATCH_OOM("mm_into")

Tensor& bmm_into(Tensor& out, const Tensor& a, const Tensor& b) try {
  detail::check_writable("bmm_into", out, "out");
  check_operands("bmm_into", a, "a", b, "b", true);
  Plan pl = plan_bmm("bmm_into", a, b);
  return run_into("bmm_into", out, pl, a, b);
}
FORGE_CATCH_OOM("bmm_into")

Tensor& linear_into(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias) try {
  detail::check_writable("linear_into", out, "out");
  check_operands("linear_into", x, "x", weight, "weight");
  check_bias("linear_into", bias, x);
  Plan pl = plan_linear("linear_into", x, weight, bias);
  return run_into("linear_into", out, pl, x, weight, bias);
}
FORGE_CATCH_OOM("linear_into")

Tensor& addmm_into(Tensor& out, const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) try {
  detail::check_writable("addmm_into", out, "out");
  check_operands("addmm_into", a, "a", b, "b");
  detail::check_input("addmm_into", bias, "bias");
  check_bias("addmm_into", bias, a);
  Plan pl = plan_addmm("addmm_into", bias, a, b, beta, alpha);
  return run_into("addmm_into", out, pl, a, b, bias);
}
FORGE_CATCH_OOM("addmm_into")

Tensor& outer_into(Tensor& out, const Tensor& a, const Tensor& b) try {
  detail::check_writable("outer_into", out, "out");
  check_operands("outer_into", a, "a", b, "b");
  Plan pl = plan_outer("outer_into", a, b);
  return run_into("outer_into", out, pl, a, b);
}
FORGE_CATCH_OOM("outer_into")

Tensor& dot_into(Tensor& out, const Tensor& a, const Tensor& b) try {
  detail::check_writable("dot_into", out, "out");
  check_operands("dot_into", a, "a", b, "b");
  Plan pl = plan_dot("dot_into", a, b);
  return run_into("dot_into", out, pl, a, b);
}
FORGE_CATCH_OOM("dot_into")

Tensor Tensor::matmul(const Tensor& other) const { return forge::matmul(*this, other); }
Tensor Tensor::mm(const Tensor& other) const { return forge::mm(*this, other); }
Tensor Tensor::dot(const Tensor& other) const { return forge::dot(*this, other); }

}  // namespace forge
