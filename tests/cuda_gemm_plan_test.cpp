// The CUDA backend's GEMM plan (src/backend/cuda/gemm_plan.h), on the host:
// which cuBLAS op, leading dimension and batch stride each row-major layout
// becomes, and, end to end, that running a plan the way cuBLAS reads it
// (column-major, op(first) op(second), strided batch in a host loop, with
// the plan's packing and staging done by plain loops) gives the row-major
// product a naive f64 triple loop gives, for transposed, broadcast, sliced
// and strided operands; and the conv plan (src/backend/cuda/conv_plan.h):
// output extents, dense-layout detection and cuDNN's int32 limits. Needs no
// GPU.

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/conv_plan.h"
#include "backend/cuda/gemm_plan.h"
#include "support.h"

namespace {

using forge::Shape;
using forge::Strides;
using forge::backend::MatmulProblem;
using forge::backend::MatrixOperand;
namespace gemm = forge::cuda::gemm;

// A strided operand over a buffer of doubles it owns.
struct Buf {
  std::vector<double> v;
  MatrixOperand op;
};

Buf make(std::int64_t elements, Strides batch_strides, std::int64_t rs, std::int64_t cs, std::mt19937& rng) {
  Buf b;
  b.v.resize(static_cast<std::size_t>(elements));
  std::uniform_real_distribution<double> u(-1, 1);
  for (double& x : b.v) x = u(rng);
  b.op.batch_strides = batch_strides;
  b.op.rs = rs;
  b.op.cs = cs;
  return b;
}

double* at(const MatrixOperand& x) { return reinterpret_cast<double*>(x.data); }

// c = beta * bias + alpha * a b, row-major, straight from the problem.
std::vector<double> reference(const MatmulProblem& p, std::int64_t c_elements) {
  std::vector<double> c(static_cast<std::size_t>(c_elements), 0.0);
  const std::int64_t batches = p.batch.numel();
  for (std::int64_t e = 0; e < batches; ++e) {
    const auto off = [&](const MatrixOperand& x) { return gemm::batch_offset(p.batch, x.batch_strides, e); };
    for (std::int64_t i = 0; i < p.m; ++i)
      for (std::int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (std::int64_t l = 0; l < p.k; ++l)
          s += at(p.a)[off(p.a) + i * p.a.rs + l * p.a.cs] * at(p.b)[off(p.b) + l * p.b.rs + j * p.b.cs];
        double v = p.alpha * s;
        if (p.bias.data) v += p.beta * at(p.bias)[off(p.bias) + i * p.bias.rs + j * p.bias.cs];
        c[static_cast<std::size_t>(off(p.c) + i * p.c.rs + j * p.c.cs)] = v;
      }
  }
  return c;
}

// Copies a [batch..., rows, cols] strided block into contiguous row-major.
std::vector<double> pack(const Shape& batch, const Strides& bs, std::int64_t rows, std::int64_t cols, std::int64_t rs,
                         std::int64_t cs, const double* src) {
  std::vector<double> out;
  for (std::int64_t e = 0; e < batch.numel(); ++e)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) out.push_back(src[gemm::batch_offset(batch, bs, e) + i * rs + j * cs]);
  return out;
}

// Runs `g` as cuBLAS would, into the problem's c.
void run_like_cublas(const gemm::GemmPlan& g) {
  const MatmulProblem& p = g.problem;
  std::vector<double> pa, pb, stage;
  const double* a = at(p.a);
  const double* b = at(p.b);
  double* c = at(p.c);
  if (g.pack_a) {
    pa = pack(p.batch, p.a.batch_strides, p.m, p.k, p.a.rs, p.a.cs, a);
    a = pa.data();
  }
  if (g.pack_b) {
    pb = pack(p.batch, p.b.batch_strides, p.k, p.n, p.b.rs, p.b.cs, b);
    b = pb.data();
  }
  // The bias goes into the output first; the GEMM scales it by beta.
  const Strides c_bs = g.stage_c ? gemm::detail::contiguous_batch(p.batch, p.m * p.n) : p.c.batch_strides;
  const std::int64_t c_rs = g.stage_c ? p.n : p.c.rs, c_cs = g.stage_c ? 1 : p.c.cs;
  if (g.stage_c) {
    stage.assign(static_cast<std::size_t>(p.batch.numel() * p.m * p.n), -7.0);  // garbage the GEMM must not read
    c = stage.data();
  }
  double beta = 0;
  if (p.bias.data) {
    beta = p.beta;
    for (std::int64_t e = 0; e < p.batch.numel(); ++e)
      for (std::int64_t i = 0; i < p.m; ++i)
        for (std::int64_t j = 0; j < p.n; ++j)
          c[gemm::batch_offset(p.batch, c_bs, e) + i * c_rs + j * c_cs] =
              at(p.bias)[gemm::batch_offset(p.batch, p.bias.batch_strides, e) + i * p.bias.rs + j * p.bias.cs];
  }

  const double* first = g.swap ? b : a;
  const double* second = g.swap ? a : b;
  const auto read = [](const gemm::Side& s, const double* x, std::int64_t r, std::int64_t col) {
    return s.op == gemm::Op::n ? x[r + col * s.ld] : x[col + r * s.ld];
  };
  const gemm::BatchPlan& bp = g.batch;
  for (std::int64_t o = 0; o < bp.outer.numel(); ++o)
    for (std::int64_t e = 0; e < bp.count; ++e) {
      const double* f = first + gemm::batch_offset(bp.outer, bp.outer_first, o) + e * bp.first_stride;
      const double* s = second + gemm::batch_offset(bp.outer, bp.outer_second, o) + e * bp.second_stride;
      double* d = c + gemm::batch_offset(bp.outer, bp.outer_out, o) + e * bp.out_stride;
      for (std::int64_t i = 0; i < g.m; ++i)
        for (std::int64_t j = 0; j < g.n; ++j) {
          double acc = 0;
          for (std::int64_t l = 0; l < g.k; ++l) acc += read(g.first, f, i, l) * read(g.second, s, l, j);
          double& out = d[i + j * g.out.ld];
          out = p.alpha * acc + (beta != 0 ? beta * out : 0.0);
        }
    }
  if (g.stage_c) {
    for (std::int64_t e = 0; e < p.batch.numel(); ++e)
      for (std::int64_t i = 0; i < p.m; ++i)
        for (std::int64_t j = 0; j < p.n; ++j)
          at(p.c)[gemm::batch_offset(p.batch, p.c.batch_strides, e) + i * p.c.rs + j * p.c.cs] =
              stage[static_cast<std::size_t>(e * p.m * p.n + i * p.n + j)];
  }
}

// Checks the side's stored extents fit its leading dimension as cuBLAS
// requires (ld >= max(1, stored rows)).
void check_sides(const gemm::GemmPlan& g) {
  for (const gemm::Side* s : {&g.first, &g.second, &g.out}) CHECK(s->ld >= std::max<std::int64_t>(1, s->rows));
  CHECK((g.first.op == gemm::Op::n ? g.first.rows : g.first.cols) == g.m);
  CHECK((g.second.op == gemm::Op::n ? g.second.cols : g.second.rows) == g.n);
  CHECK(g.out.rows == g.m);
  CHECK(g.out.cols == g.n);
}

struct Case {
  MatmulProblem p;
  Buf a, b, c, bias;
};

// Plans, runs like cuBLAS and compares c (every element, the gaps included)
// with the reference.
gemm::GemmPlan plan_and_check(Case& t) {
  t.p.a.data = reinterpret_cast<std::byte*>(t.a.v.data());
  t.p.b.data = reinterpret_cast<std::byte*>(t.b.v.data());
  t.p.c.data = reinterpret_cast<std::byte*>(t.c.v.data());
  t.p.bias.data = t.bias.v.empty() ? nullptr : reinterpret_cast<std::byte*>(t.bias.v.data());
  const std::vector<double> before = t.c.v;
  MatmulProblem ref_problem = t.p;
  std::vector<double> expected = reference(ref_problem, static_cast<std::int64_t>(t.c.v.size()));
  // Elements of c the product does not write keep their value.
  std::vector<double> mark(t.c.v.size(), 0.0);
  {
    MatmulProblem probe = t.p;
    probe.c.data = reinterpret_cast<std::byte*>(mark.data());
    for (std::int64_t e = 0; e < probe.batch.numel(); ++e)
      for (std::int64_t i = 0; i < probe.m; ++i)
        for (std::int64_t j = 0; j < probe.n; ++j)
          mark[static_cast<std::size_t>(gemm::batch_offset(probe.batch, probe.c.batch_strides, e) + i * probe.c.rs +
                                        j * probe.c.cs)] = 1;
  }
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (mark[i] == 0) expected[i] = before[i];

  const gemm::GemmPlan g = gemm::plan(t.p);
  check_sides(g);
  run_like_cublas(g);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("element " << i);
    CHECK(t.c.v[i] == Approx(expected[i]).margin(1e-12));
  }
  return g;
}

}  // namespace

TEST_CASE("cuda gemm plan: a row-major block is its transpose column-major with ld = row stride", "[cuda-plan]") {
  const auto l = gemm::column_major_layout(3, 5, 8, 1);
  REQUIRE(l);
  CHECK(l->row_major);
  CHECK(l->ld == 8);
  const auto t = gemm::column_major_layout(3, 5, 1, 4);  // a transposed view of [5, 4] storage
  REQUIRE(t);
  CHECK_FALSE(t->row_major);
  CHECK(t->ld == 4);
  // One row: its row stride is never followed, whatever it is.
  const auto row = gemm::column_major_layout(1, 5, 0, 1);
  REQUIRE(row);
  CHECK(row->ld == 5);
  // What cuBLAS cannot read: a non-unit inner stride, a broadcast row,
  // overlapping rows.
  CHECK_FALSE(gemm::column_major_layout(3, 5, 10, 2));
  CHECK_FALSE(gemm::column_major_layout(3, 5, 0, 1));
  CHECK_FALSE(gemm::column_major_layout(3, 5, 4, 1));
}

TEST_CASE("cuda gemm plan: a row-major product swaps operands (C^T = B^T A^T) with op n", "[cuda-plan]") {
  std::mt19937 rng(1);
  Case t;
  t.p.m = 3, t.p.n = 4, t.p.k = 5;
  t.a = make(15, {}, 5, 1, rng);
  t.b = make(20, {}, 4, 1, rng);
  t.c = make(12, {}, 4, 1, rng);
  t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op;
  t.p.alpha = 0.5;
  const gemm::GemmPlan g = plan_and_check(t);
  CHECK(g.swap);
  CHECK(g.m == 4);
  CHECK(g.n == 3);
  CHECK(g.first.op == gemm::Op::n);
  CHECK(g.first.ld == 4);
  CHECK(g.second.op == gemm::Op::n);
  CHECK(g.second.ld == 5);
  CHECK(g.out.ld == 4);
  CHECK_FALSE(g.pack_a);
  CHECK_FALSE(g.pack_b);
  CHECK_FALSE(g.stage_c);
}

TEST_CASE("cuda gemm plan: transposed operands become op t, a column-major c runs unswapped", "[cuda-plan]") {
  std::mt19937 rng(2);
  SECTION("a^T and b^T views, row-major c") {
    Case t;
    t.p.m = 3, t.p.n = 4, t.p.k = 5;
    t.a = make(15, {}, 1, 3, rng);  // [3, 5] view of [5, 3] storage
    t.b = make(20, {}, 1, 5, rng);  // [5, 4] view of [4, 5] storage
    t.c = make(12, {}, 4, 1, rng);
    t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op;
    const gemm::GemmPlan g = plan_and_check(t);
    CHECK(g.swap);
    CHECK(g.first.op == gemm::Op::t);
    CHECK(g.first.ld == 5);
    CHECK(g.second.op == gemm::Op::t);
    CHECK(g.second.ld == 3);
  }
  SECTION("column-major c (a transposed output view)") {
    Case t;
    t.p.m = 3, t.p.n = 4, t.p.k = 5;
    t.a = make(15, {}, 5, 1, rng);
    t.b = make(20, {}, 1, 5, rng);
    t.c = make(12, {}, 1, 3, rng);
    t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op;
    const gemm::GemmPlan g = plan_and_check(t);
    CHECK_FALSE(g.swap);
    CHECK(g.m == 3);
    CHECK(g.n == 4);
    CHECK(g.first.op == gemm::Op::t);  // a is row-major: its memory is a^T
    CHECK(g.second.op == gemm::Op::n);
    CHECK(g.out.ld == 3);
  }
}

TEST_CASE("cuda gemm plan: operands cuBLAS cannot read are packed, an unreadable c is staged", "[cuda-plan]") {
  std::mt19937 rng(3);
  Case t;
  t.p.m = 3, t.p.n = 4, t.p.k = 5;
  t.a = make(40, {}, 10, 2, rng);  // every other column
  t.b = make(4, {}, 0, 1, rng);    // one row broadcast over k
  t.c = make(30, {}, 10, 2, rng);  // an output with gaps
  t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op;
  const gemm::GemmPlan g = plan_and_check(t);
  CHECK(g.pack_a);
  CHECK(g.pack_b);
  CHECK(g.stage_c);
  CHECK(g.swap);
  CHECK(g.first.ld == 4);
  CHECK(g.second.ld == 5);
}

TEST_CASE("cuda gemm plan: a broadcast b folds the batch into m", "[cuda-plan]") {
  std::mt19937 rng(4);
  Case t;
  t.p.batch = Shape{2, 3};
  t.p.m = 4, t.p.n = 5, t.p.k = 6;
  t.a = make(6 * 24, {72, 24}, 6, 1, rng);
  t.b = make(30, {0, 0}, 5, 1, rng);
  t.c = make(6 * 20, {60, 20}, 5, 1, rng);
  t.bias = make(5, {0, 0}, 0, 1, rng);  // a row bias, as linear's
  t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op, t.p.bias = t.bias.op;
  t.p.beta = 2;
  const gemm::GemmPlan g = plan_and_check(t);
  CHECK(g.problem.batch.rank() == 0);
  CHECK(g.n == 24);  // swapped: cuBLAS's n is forge's folded m
  CHECK(g.batch.count == 1);
}

TEST_CASE("cuda gemm plan: a broadcast batch operand gets batch stride 0", "[cuda-plan]") {
  std::mt19937 rng(5);
  Case t;
  t.p.batch = Shape{3};
  t.p.m = 4, t.p.n = 5, t.p.k = 6;
  t.a = make(24, {0}, 6, 1, rng);  // a broadcasts: no fold (only b's broadcast folds)
  t.b = make(3 * 30, {30}, 5, 1, rng);
  t.c = make(3 * 20, {20}, 5, 1, rng);
  t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op;
  const gemm::GemmPlan g = plan_and_check(t);
  CHECK(g.swap);
  CHECK(g.batch.count == 3);
  CHECK(g.batch.first_stride == 30);  // b
  CHECK(g.batch.second_stride == 0);  // a, broadcast
  CHECK(g.batch.out_stride == 20);
  CHECK(g.batch.outer.rank() == 0);
}

TEST_CASE("cuda gemm plan: batch dimensions coalesce, the rest loop on the host", "[cuda-plan]") {
  std::mt19937 rng(6);
  SECTION("contiguous batches merge into one strided batch") {
    Case t;
    t.p.batch = Shape{2, 1, 3};
    t.p.m = 2, t.p.n = 3, t.p.k = 4;
    t.a = make(6 * 8, {24, 99, 8}, 4, 1, rng);
    t.b = make(6 * 12, {36, 99, 12}, 3, 1, rng);
    t.c = make(6 * 6, {18, 99, 6}, 3, 1, rng);
    t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op;
    const gemm::GemmPlan g = plan_and_check(t);
    CHECK(g.batch.count == 6);
    CHECK(g.batch.outer.rank() == 0);
  }
  SECTION("b broadcast over the inner batch dimension only: an outer loop") {
    Case t;
    t.p.batch = Shape{2, 3};
    t.p.m = 2, t.p.n = 3, t.p.k = 4;
    t.a = make(6 * 8, {24, 8}, 4, 1, rng);
    t.b = make(2 * 12, {12, 0}, 3, 1, rng);
    t.c = make(6 * 6 + 5, {21, 7}, 3, 1, rng);  // padded batches: no fold either
    t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op;
    const gemm::GemmPlan g = plan_and_check(t);
    CHECK(g.batch.count == 3);
    CHECK(g.batch.first_stride == 0);  // b
    REQUIRE(g.batch.outer.rank() == 1);
    CHECK(g.batch.outer[0] == 2);
    CHECK(g.batch.outer_first[0] == 12);
  }
}

TEST_CASE("cuda gemm plan: beta 0 drops the bias, NaN included", "[cuda-plan]") {
  std::mt19937 rng(7);
  Case t;
  t.p.m = 2, t.p.n = 2, t.p.k = 2;
  t.a = make(4, {}, 2, 1, rng);
  t.b = make(4, {}, 2, 1, rng);
  t.c = make(4, {}, 2, 1, rng);
  t.bias = make(4, {}, 2, 1, rng);
  t.bias.v[0] = std::numeric_limits<double>::quiet_NaN();
  t.p.a = t.a.op, t.p.b = t.b.op, t.p.c = t.c.op, t.p.bias = t.bias.op;
  t.p.beta = 0;
  t.p.a.data = reinterpret_cast<std::byte*>(t.a.v.data());
  t.p.b.data = reinterpret_cast<std::byte*>(t.b.v.data());
  t.p.c.data = reinterpret_cast<std::byte*>(t.c.v.data());
  t.p.bias.data = reinterpret_cast<std::byte*>(t.bias.v.data());
  const gemm::GemmPlan g = gemm::plan(t.p);
  CHECK(g.problem.bias.data == nullptr);
  run_like_cublas(g);
  for (double v : t.c.v) CHECK_FALSE(std::isnan(v));
}

TEST_CASE("cuda gemm plan: the alignment cuBLASLt may assume divides address, ld and batch stride", "[cuda-plan]") {
  CHECK(gemm::alignment_bytes(0x1000, 4, 1024, 0) == 256);
  CHECK(gemm::alignment_bytes(0x1004, 4, 1024, 0) == 4);
  CHECK(gemm::alignment_bytes(0x1000, 2, 1001, 0) == 2);  // odd ld of 16-bit elements
  CHECK(gemm::alignment_bytes(0x1000, 4, 64, 3) == 4);    // batch stride 12 bytes
  CHECK(gemm::alignment_bytes(0x1000, 4, 64, 0) == 256);  // a broadcast batch
}

TEST_CASE("cuda gemm plan: extents past int32 leave cuBLASLt for the 64-bit cuBLAS entry points", "[cuda-plan]") {
  MatmulProblem p;
  p.m = 1, p.k = 1, p.n = std::int64_t{3} << 30;
  p.a.rs = 1, p.a.cs = 1;
  p.b.rs = p.n, p.b.cs = 1;
  p.c.rs = p.n, p.c.cs = 1;
  CHECK_FALSE(gemm::plan(p).fits_int32);
  p.n = 1000, p.b.rs = 1000, p.c.rs = 1000;
  CHECK(gemm::plan(p).fits_int32);
}

// ---- conv (src/backend/cuda/conv_plan.h) ----

namespace conv = forge::cuda::conv;

TEST_CASE("cuda conv plan: the output extent counts the window positions inside the padded input", "[cuda-plan]") {
  for (std::int64_t size : {1, 5, 8, 13})
    for (std::int64_t kernel : {1, 2, 3})
      for (std::int64_t stride : {1, 2, 3})
        for (std::int64_t pad : {0, 1, 2})
          for (std::int64_t dilation : {1, 2}) {
            const std::int64_t span = dilation * (kernel - 1) + 1;
            if (span > size + 2 * pad) continue;
            std::int64_t positions = 0;  // starts s (in padded coordinates) whose window ends inside
            for (std::int64_t s = 0; s + span <= size + 2 * pad; s += stride) ++positions;
            INFO("size " << size << " kernel " << kernel << " stride " << stride << " pad " << pad << " dilation "
                         << dilation);
            CHECK(conv::out_extent(size, kernel, stride, pad, dilation) == positions);
          }
}

TEST_CASE("cuda conv plan: dense NCHW and NHWC views are described in place, others are packed", "[cuda-plan]") {
  const conv::Dims4 dims{2, 3, 4, 5};
  CHECK(conv::layout_of(dims, {60, 20, 5, 1}) == conv::Layout::nchw);
  CHECK(conv::layout_of(dims, {60, 1, 15, 3}) == conv::Layout::nhwc);    // a channels-last permute
  CHECK(conv::layout_of(dims, {120, 40, 10, 2}) == conv::Layout::pack);  // every other column
  CHECK(conv::layout_of(dims, {0, 20, 5, 1}) == conv::Layout::pack);     // an expanded batch
  CHECK(conv::layout_of(dims, {60, 20, 5, 1}) != conv::Layout::pack);
  CHECK(conv::layout_of({1, 3, 1, 5}, {7, 5, 99, 1}) == conv::Layout::nchw);  // extent-1 strides do not decide
  const conv::Dims4 nhwc = conv::descriptor_strides(dims, {60, 1, 15, 3});
  CHECK(nhwc == conv::Dims4{60, 1, 15, 3});
  const conv::Dims4 packed = conv::descriptor_strides(dims, {120, 40, 10, 2});
  CHECK(packed == conv::Dims4{60, 20, 5, 1});
  CHECK(conv::descriptor_strides({1, 3, 1, 5}, {7, 5, 99, 1}) == conv::Dims4{15, 5, 5, 1});
}

TEST_CASE("cuda conv plan: the shapes and descriptor fields of a grouped convolution", "[cuda-plan]") {
  forge::backend::Window2d w;
  w.n = 2, w.c = 6, w.h = 9, w.w = 7;
  w.kernel_h = 3, w.kernel_w = 2;
  w.stride_h = 2, w.stride_w = 1;
  w.pad_h = 1, w.pad_w = 0;
  w.dilation_h = 1, w.dilation_w = 2;
  w.out_h = conv::out_extent(w.h, w.kernel_h, w.stride_h, w.pad_h, w.dilation_h);
  w.out_w = conv::out_extent(w.w, w.kernel_w, w.stride_w, w.pad_w, w.dilation_w);
  const conv::ConvShapes s = conv::shapes_of(w, 4, 2);
  CHECK(s.x == conv::Dims4{2, 6, 9, 7});
  CHECK(s.weight == conv::Dims4{4, 3, 3, 2});
  CHECK(s.y == conv::Dims4{2, 4, 5, 5});
  const auto args = conv::conv_args(w, 2);
  REQUIRE(args);
  CHECK(args->pad_h == 1);
  CHECK(args->pad_w == 0);
  CHECK(args->stride_h == 2);
  CHECK(args->dilation_w == 2);
  CHECK(args->groups == 2);
  w.pad_w = std::int64_t{1} << 31;
  CHECK_FALSE(conv::conv_args(w, 2));
}

TEST_CASE("cuda conv plan: tensors past int32 elements are refused", "[cuda-plan]") {
  CHECK(conv::fits_cudnn({1, 1, 46340, 46340}));
  CHECK_FALSE(conv::fits_cudnn({2, 1, 46341, 46341}));
  CHECK_FALSE(conv::fits_cudnn({1, 1, 1, std::int64_t{1} << 31}));
  CHECK(conv::fits_cudnn({0, 3, 4, 5}));
}
