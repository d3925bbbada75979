// Batched GEMM through cuBLASLt, after gemm_plan.h's mapping:
//   - one cublasLtMatmul per host-loop entry of the plan (usually one), the
//     algorithm from cublasLtMatmulAlgoGetHeuristic with the operands' real
//     alignment (a view need not be 256-byte aligned, the heuristic's
//     default assumption) and the runtime's Lt workspace;
//   - cuBLAS's gemmStridedBatchedEx_64 when Lt has no algorithm for the
//     layouts or an extent passes int32;
//   - compute: f32 (TF32 when allowed), f64, f32 for f16/bf16 inputs;
//   - packed operands and a staged output live in the device pool, released
//     after queuing (the pool is stream-ordered).
// Nothing is cached across calls: a heuristic query costs microseconds, and
// a cache keyed by pointers would go stale as the pool reuses addresses.

#include "backend/cuda/gemm_cublas.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/gemm_copy.h"
#include "backend/cuda/gemm_options.h"
#include "backend/cuda/gemm_plan.h"

namespace forge::cuda {
namespace {

std::atomic<bool> tf32_allowed{false};

cudaDataType data_type(DType t) {
  switch (t) {
    case DType::f64:
      return CUDA_R_64F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

struct Types {
  cudaDataType in, out, scale;
  cublasComputeType_t compute;
  std::size_t in_bytes, out_bytes;
};

Types types_of(DType in, DType out) {
  Types t{data_type(in), data_type(out), CUDA_R_32F, CUBLAS_COMPUTE_32F, dtype_size(in), dtype_size(out)};
  if (in == DType::f64) {
    t.scale = CUDA_R_64F;
    t.compute = CUBLAS_COMPUTE_64F;
  } else if (in == DType::f32 && tf32_allowed.load(std::memory_order_relaxed)) {
    t.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return t;
}

// alpha and beta in the scale type, for the host pointer mode.
struct Scalars {
  float f[2];
  double d[2];
  bool wide;
  Scalars(double alpha, double beta, bool wide_) : f{float(alpha), float(beta)}, d{alpha, beta}, wide(wide_) {}
  const void* alpha() const { return wide ? static_cast<const void*>(&d[0]) : &f[0]; }
  const void* beta() const { return wide ? static_cast<const void*>(&d[1]) : &f[1]; }
};

template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtObject {
  T h = nullptr;
  LtObject() = default;
  LtObject(const LtObject&) = delete;
  LtObject& operator=(const LtObject&) = delete;
  ~LtObject() {
    if (h) Destroy(h);
  }
};
using MatmulDesc = LtObject<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = LtObject<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = LtObject<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

cublasOperation_t op_of(gemm::Op op) { return op == gemm::Op::n ? CUBLAS_OP_N : CUBLAS_OP_T; }

struct Pointers {
  const std::byte* first;
  const std::byte* second;
  std::byte* out;
};

// The operands of entry o of the plan's host loop.
Pointers entry(const Pointers& base, const gemm::BatchPlan& bp, const Types& t, std::int64_t o) {
  const auto in = static_cast<std::int64_t>(t.in_bytes), out = static_cast<std::int64_t>(t.out_bytes);
  return {base.first + gemm::batch_offset(bp.outer, bp.outer_first, o) * in,
          base.second + gemm::batch_offset(bp.outer, bp.outer_second, o) * in,
          base.out + gemm::batch_offset(bp.outer, bp.outer_out, o) * out};
}

// The alignment every outer-loop offset keeps.
std::uint32_t outer_alignment(const Strides& strides, int rank, std::size_t element_bytes) {
  std::uint32_t a = 256;
  for (int d = 0; d < rank; ++d) a = std::min(a, gemm::alignment_bytes(0, element_bytes, strides[d], 0));
  return a;
}

bool make_layout(Layout& l, cudaDataType type, const gemm::Side& s, std::int64_t count, std::int64_t stride) {
  if (cublasLtMatrixLayoutCreate(&l.h, type, static_cast<std::uint64_t>(s.rows), static_cast<std::uint64_t>(s.cols),
                                 s.ld) != CUBLAS_STATUS_SUCCESS)
    return false;
  if (count == 1) return true;
  const auto count32 = static_cast<std::int32_t>(count);
  return cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count32, sizeof count32) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride) ==
             CUBLAS_STATUS_SUCCESS;
}

template <typename V>
bool set_pref(Preference& p, cublasLtMatmulPreferenceAttributes_t attr, V value) {
  return cublasLtMatmulPreferenceSetAttribute(p.h, attr, &value, sizeof value) == CUBLAS_STATUS_SUCCESS;
}

// Runs the plan through cuBLASLt; false (nothing queued) when Lt cannot.
bool run_lt(CudaRuntime& rt, cudaStream_t stream, const gemm::GemmPlan& g, const Types& t, const Pointers& ptr,
            const Scalars& s, const char* op) {
  if (!g.fits_int32) return false;
  const gemm::BatchPlan& bp = g.batch;
  MatmulDesc desc;
  if (cublasLtMatmulDescCreate(&desc.h, t.compute, t.scale) != CUBLAS_STATUS_SUCCESS) return false;
  const cublasOperation_t ta = op_of(g.first.op), tb = op_of(g.second.op);
  if (cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) != CUBLAS_STATUS_SUCCESS)
    return false;
  Layout la, lb, lc;
  if (!make_layout(la, t.in, g.first, bp.count, bp.first_stride) ||
      !make_layout(lb, t.in, g.second, bp.count, bp.second_stride) ||
      !make_layout(lc, t.out, g.out, bp.count, bp.out_stride))
    return false;

  void* workspace = rt.lt_workspace();
  const std::uint64_t workspace_bytes = workspace ? CudaRuntime::kLtWorkspaceBytes : 0;
  const int outer_rank = bp.outer.rank();
  const auto align = [&](const void* p, std::size_t es, std::int64_t ld, std::int64_t stride, const Strides& outer) {
    return std::min(gemm::alignment_bytes(reinterpret_cast<std::uintptr_t>(p), es, ld, stride),
                    outer_alignment(outer, outer_rank, es));
  };
  const std::uint32_t align_out = align(ptr.out, t.out_bytes, g.out.ld, bp.out_stride, bp.outer_out);
  Preference pref;
  if (cublasLtMatmulPreferenceCreate(&pref.h) != CUBLAS_STATUS_SUCCESS ||
      !set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes) ||
      !set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                align(ptr.first, t.in_bytes, g.first.ld, bp.first_stride, bp.outer_first)) ||
      !set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                align(ptr.second, t.in_bytes, g.second.ld, bp.second_stride, bp.outer_second)) ||
      !set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_out) ||
      !set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_out))
    return false;

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasLtHandle_t lt = rt.cublas_lt();
  if (cublasLtMatmulAlgoGetHeuristic(lt, desc.h, la.h, lb.h, lc.h, lc.h, pref.h, 1, &result, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found == 0)
    return false;

  const std::int64_t outer = bp.outer.numel();
  for (std::int64_t o = 0; o < outer; ++o) {
    const Pointers at = entry(ptr, bp, t, o);
    check_cublas(cublasLtMatmul(lt, desc.h, s.alpha(), at.first, la.h, at.second, lb.h, s.beta(), at.out, lc.h, at.out,
                                lc.h, &result.algo, workspace, workspace_bytes, stream),
                 op, "cublasLtMatmul");
  }
  return true;
}

void run_cublas(CudaRuntime& rt, const gemm::GemmPlan& g, const Types& t, const Pointers& ptr, const Scalars& s,
                const char* op) {
  const gemm::BatchPlan& bp = g.batch;
  const cublasHandle_t h = rt.cublas();
  const std::int64_t outer = bp.outer.numel();
  for (std::int64_t o = 0; o < outer; ++o) {
    const Pointers at = entry(ptr, bp, t, o);
    check_cublas(cublasGemmStridedBatchedEx_64(h, op_of(g.first.op), op_of(g.second.op), g.m, g.n, g.k, s.alpha(),
                                               at.first, t.in, g.first.ld, bp.first_stride, at.second, t.in,
                                               g.second.ld, bp.second_stride, s.beta(), at.out, t.out, g.out.ld,
                                               bp.out_stride, bp.count, t.compute, CUBLAS_GEMM_DEFAULT),
                 op, "cublasGemmStridedBatchedEx");
  }
}

StridedBlock block_of(const backend::MatrixOperand& x) { return StridedBlock{x.data, x.batch_strides, x.rs, x.cs}; }

// A contiguous row-major [batch..., rows, cols] block of `es`-byte elements
// from the pool.
StridedBlock pooled_block(detail::DeviceRuntime& dev, Ref<Buffer>& holder, const Shape& batch, std::int64_t rows,
                          std::int64_t cols, std::size_t es, const char* op) {
  holder = dev.pool().acquire(static_cast<std::size_t>(batch.numel() * rows * cols) * es, op);
  return StridedBlock{holder->data(), gemm::detail::contiguous_batch(batch, rows * cols), cols, 1};
}

void run(detail::DeviceRuntime& dev, const backend::MatmulProblem& problem, DType out_dtype, const char* op) {
  if (problem.batch.numel() == 0 || problem.m == 0 || problem.n == 0) return;
  if (problem.k == 0) {  // nothing to multiply: c = beta * bias, or zeros
    const bool bias = problem.bias.data != nullptr && problem.beta != 0;
    scale_block(dev, out_dtype, problem.batch, problem.m, problem.n, block_of(problem.c),
                bias ? block_of(problem.bias) : StridedBlock{}, problem.beta, op);
    return;
  }
  CudaRuntime& rt = runtime_of(dev);
  const cudaStream_t stream = stream_of(dev);
  const gemm::GemmPlan g = gemm::plan(problem);
  const backend::MatmulProblem& p = g.problem;
  const Types t = types_of(p.dtype, out_dtype);

  Ref<Buffer> a_pack, b_pack, c_stage;
  const std::byte* a = p.a.data;
  const std::byte* b = p.b.data;
  if (g.pack_a) {
    const StridedBlock packed = pooled_block(dev, a_pack, p.batch, p.m, p.k, t.in_bytes, op);
    copy_block(dev, p.dtype, p.batch, p.m, p.k, packed, block_of(p.a), op);
    a = packed.data;
  }
  if (g.pack_b) {
    const StridedBlock packed = pooled_block(dev, b_pack, p.batch, p.k, p.n, t.in_bytes, op);
    copy_block(dev, p.dtype, p.batch, p.k, p.n, packed, block_of(p.b), op);
    b = packed.data;
  }
  const StridedBlock c = g.stage_c ? pooled_block(dev, c_stage, p.batch, p.m, p.n, t.out_bytes, op) : block_of(p.c);
  double beta = 0;
  if (p.bias.data) {  // the GEMM scales what the bias left in c
    copy_block(dev, out_dtype, p.batch, p.m, p.n, c, block_of(p.bias), op);
    beta = p.beta;
  }

  const Scalars s(p.alpha, beta, p.dtype == DType::f64);
  const Pointers ptr{g.swap ? b : a, g.swap ? a : b, c.data};
  if (!run_lt(rt, stream, g, t, ptr, s, op)) run_cublas(rt, g, t, ptr, s, op);
  if (g.stage_c) copy_block(dev, out_dtype, p.batch, p.m, p.n, block_of(p.c), c, op);
}

}  // namespace

void set_allow_tf32(bool allow) noexcept { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool allow_tf32() noexcept { return tf32_allowed.load(std::memory_order_relaxed); }

void matmul(detail::DeviceRuntime& dev, const backend::MatmulProblem& p) { run(dev, p, p.dtype, "matmul"); }

void matmul_mixed(detail::DeviceRuntime& dev, const backend::MatmulProblem& p, DType out) {
  backend::MatmulProblem q = p;
  q.bias.data = nullptr;
  run(dev, q, out, "attention");
}

}  // namespace forge::cuda
