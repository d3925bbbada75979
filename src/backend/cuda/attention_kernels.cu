// The cuda backend's attention forward and dropout, every floating dtype.
//
// attention: one block per row of q (grid-stride over rows), as the cpu's
// fused loop: the row's scores (scaled, masked; attention_score) into the
// block's slice of pool scratch, their max and the sum of exp(s - max) by
// block reductions, then one thread per output column summing p_j v[j, e]
// over the keys in order. f32 accumulation for 16-bit inputs, f64 for f64.
// Correctness over speed: each score is one thread's dot product over E.
//
// dropout: one thread per element, the cpu's mask (linalg_math.h).

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/linalg_math.h"
#include "forge/buffer_pool.h"

namespace forge::cuda {
namespace {

using backend::AttentionProblem;
using backend::Operand;

// Rows in flight at once: each holds S scores of scratch.
constexpr std::int64_t kAttentionBlocks = 2048;

template <typename T>
struct MaxOp {  // std::max's: a NaN score does not win (the cpu's rule)
  __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};

struct AttentionArgs {
  std::int64_t rows = 0, L = 0, S = 0, E = 0, Ev = 0;
  bool causal = false, masked = false;
  std::int64_t causal_offset = 0;  // key j > i + causal_offset is masked
  StridedIndexer<5> outer;         // out, q, k, v, mask over the batch
  std::int64_t qr, qe, kr, ke, vr, ve, orow, oe, mr, mc;
};

template <typename T, typename M, typename A>
__global__ void attention_kernel(AttentionArgs a, A scale, const T* q, const T* k, const T* v, const M* mask, T* out,
                                 A* scratch) {
  A* scores = scratch + static_cast<std::int64_t>(blockIdx.x) * a.S;
  for (std::int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const std::int64_t b = r / a.L, i = r % a.L;
    std::int64_t off[5];
    a.outer.offsets(b, off);
    const T* qp = q + off[1] + i * a.qr;
    A local_max = -std::numeric_limits<A>::infinity();
    for (std::int64_t j = threadIdx.x; j < a.S; j += blockDim.x) {
      bool keep = !(a.causal && j > i + a.causal_offset);
      A add = 0;
      if (keep && a.masked) {
        const M mv = mask[off[4] + i * a.mr + j * a.mc];
        if constexpr (std::is_same_v<M, std::uint8_t>)
          keep = mv != 0;
        else
          add = static_cast<A>(widen(mv));
      }
      A dot = 0;
      if (keep) {
        const T* kp = k + off[2] + j * a.kr;
        for (std::int64_t e = 0; e < a.E; ++e)
          dot += static_cast<A>(widen(qp[e * a.qe])) * static_cast<A>(widen(kp[e * a.ke]));
      }
      const A s = attention_score<A>(dot, scale, keep, add);
      scores[j] = s;
      local_max = local_max < s ? s : local_max;
    }
    const A top = block_reduce(local_max, MaxOp<A>{});
    A local_sum = 0;
    for (std::int64_t j = threadIdx.x; j < a.S; j += blockDim.x) {
      const A e = m::exp(scores[j] - top);
      scores[j] = e;
      local_sum += e;
    }
    const A inv = A{1} / block_reduce(local_sum, SumOp<A>{});  // its __syncthreads publishes scores
    for (std::int64_t e = threadIdx.x; e < a.Ev; e += blockDim.x) {
      A acc = 0;
      const T* vp = v + off[3] + e * a.ve;
      for (std::int64_t j = 0; j < a.S; ++j) acc += scores[j] * inv * static_cast<A>(widen(vp[j * a.vr]));
      out[off[0] + i * a.orow + e * a.oe] = convert<T>(acc);
    }
    __syncthreads();  // the next row overwrites scores
  }
}

// An operand's batch strides, or zeros for an absent one.
Strides batch_strides_or_zero(const backend::MatrixOperand& m, int rank) {
  return m.data != nullptr ? m.batch_strides : Strides::filled(rank, 0);
}

template <typename T>
void attention_typed(detail::DeviceRuntime& dev, const AttentionProblem& p) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  AttentionArgs a;
  a.rows = p.batch.numel() * p.L;
  a.L = p.L;
  a.S = p.S;
  a.E = p.E;
  a.Ev = p.Ev;
  a.causal = p.is_causal;
  a.causal_offset = p.causal_offset;
  a.masked = p.mask.data != nullptr;
  const Strides mask_batch = batch_strides_or_zero(p.mask, p.batch.rank());
  const Strides* const strides[5] = {&p.out.batch_strides, &p.q.batch_strides, &p.k.batch_strides, &p.v.batch_strides,
                                     &mask_batch};
  a.outer = StridedIndexer<5>(p.batch, strides);
  a.qr = p.q.rs, a.qe = p.q.cs, a.kr = p.k.rs, a.ke = p.k.cs, a.vr = p.v.rs, a.ve = p.v.cs;
  a.orow = p.out.rs, a.oe = p.out.cs, a.mr = p.mask.rs, a.mc = p.mask.cs;
  const auto blocks = static_cast<unsigned>(a.rows < kAttentionBlocks ? a.rows : kAttentionBlocks);
  Ref<Buffer> scratch =
      dev.pool().acquire(static_cast<std::size_t>(blocks) * static_cast<std::size_t>(p.S > 0 ? p.S : 1) * sizeof(A),
                         "scaled_dot_product_attention");
  const int threads = row_split(1, p.S > p.Ev ? p.S : p.Ev).threads;
  const auto* q = reinterpret_cast<const T*>(p.q.data);
  const auto* k = reinterpret_cast<const T*>(p.k.data);
  const auto* v = reinterpret_cast<const T*>(p.v.data);
  auto* out = reinterpret_cast<T*>(p.out.data);
  auto* s = reinterpret_cast<A*>(scratch->data());
  const A scale = static_cast<A>(p.scale);
  cudaStream_t stream = stream_of(dev);
  if (a.masked && p.mask_dtype == DType::boolean)
    attention_kernel<T, std::uint8_t, A>
        <<<blocks, threads, 0, stream>>>(a, scale, q, k, v, reinterpret_cast<const std::uint8_t*>(p.mask.data), out, s);
  else
    attention_kernel<T, T, A>
        <<<blocks, threads, 0, stream>>>(a, scale, q, k, v, reinterpret_cast<const T*>(p.mask.data), out, s);
  check_launch("scaled_dot_product_attention");
}

template <typename T>
__global__ void dropout_kernel(std::int64_t n, StridedIndexer<2> ix, T* out, const T* x, std::uint64_t seed,
                               std::uint64_t threshold, compute_t<T> scale) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[2];
    ix.offsets(i, off);
    const bool keep = dropout_keeps(seed, static_cast<std::uint64_t>(i), threshold);
    out[off[0]] = keep ? convert<T>(widen(x[off[1]]) * scale) : T{};
  }
}

}  // namespace

void attention(detail::DeviceRuntime& dev, const AttentionProblem& p) {
  if (p.batch.numel() * p.L * p.Ev == 0) return;
  dispatch_floating(p.dtype, [&](auto tag) { attention_typed<decltype(tag)>(dev, p); });
}

void dropout(detail::DeviceRuntime& dev, const Shape& shape, const Operand& out, const Operand& x, double p,
             std::uint64_t seed) {
  const std::int64_t n = shape.numel();
  if (n <= 0) return;
  const Strides* const strides[2] = {&out.strides, &x.strides};
  const StridedIndexer<2> ix(shape, strides);
  const std::uint64_t threshold = dropout_threshold(p);
  cudaStream_t s = stream_of(dev);
  dispatch_floating(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    dropout_kernel<T><<<grid_for(n), kThreads, 0, s>>>(n, ix, reinterpret_cast<T*>(out.data),
                                                       reinterpret_cast<const T*>(x.data), seed, threshold,
                                                       static_cast<C>(1.0 / (1.0 - p)));
  });
  check_launch("dropout");
}

}  // namespace forge::cuda
