// The cuda backend's reduce family: every ReduceOp over any set of dims,
// arg reductions (argmax/argmin, max/min along a dim) and cumsum, every dtype
// (the ops check which ops take which).
//
// reduce: one block per output element (grid-stride over outputs), its
// threads walking the reduced elements; each thread folds its share, then the
// block combines the threads' accumulators in a fixed tree in shared memory.
// The reducers are reduce_kernels.cpp's (identity, map, combine, finish) with
// the same accumulator types and NaN rules: integer sums and products wrap in
// uint64 and give i64, max/min propagate NaN, var/std merge Welford moments
// (Chan), logsumexp keeps a running (max, sum). Float sums differ from the
// cpu's pairwise order by rounding only.
//
// arg_reduce and cumsum: one thread per line along the dim, walking it in
// order: the first extreme wins ties (NaN counts as the largest and the
// smallest), and running sums add in order (floats in f64).

#include "backend/cuda/common.cuh"
#include "backend/cuda/tables.h"

namespace forge::cuda {
namespace {

using backend::ArgReduceArgs;
using backend::ReduceArgs;
using backend::ReduceOp;

constexpr int kReduceThreads = 256;

// ---- reducers ----

template <typename V>
using int_acc_t = std::conditional_t<std::is_floating_point_v<V>, V, std::uint64_t>;

template <typename V, int Kind>  // Kind: 0 sum, 1 mean, 2 norm1, 3 norm2
struct SumR {
  using Acc = int_acc_t<V>;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc map(V v) const {
    if constexpr (Kind == 2)
      return m::abs(v);
    else if constexpr (Kind == 3)
      return v * v;
    else
      return static_cast<Acc>(v);
  }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ auto finish(Acc a, std::int64_t n) const {
    if constexpr (!std::is_floating_point_v<V>)
      return static_cast<std::int64_t>(a);
    else if constexpr (Kind == 1)
      return a / static_cast<V>(n);
    else if constexpr (Kind == 3)
      return m::sqrt(a);
    else
      return a;
  }
};

template <typename V>
struct ProdR {
  using Acc = int_acc_t<V>;
  __device__ Acc identity() const { return Acc(1); }
  __device__ Acc map(V v) const { return static_cast<Acc>(v); }
  __device__ Acc combine(Acc a, Acc b) const { return a * b; }
  __device__ auto finish(Acc a, std::int64_t) const {
    if constexpr (std::is_floating_point_v<V>)
      return a;
    else
      return static_cast<std::int64_t>(a);
  }
};

// NaN propagates: a NaN accumulator stays, a NaN element takes over.
template <typename V, bool kMax>
struct ExtremeR {
  using Acc = V;
  __device__ Acc identity() const {
    if constexpr (std::is_floating_point_v<V>)
      return kMax ? -INFINITY : INFINITY;
    else
      return kMax ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
  }
  __device__ Acc map(V v) const { return v; }
  __device__ Acc combine(Acc a, Acc b) const {
    if constexpr (kMax)
      return (a > b || a != a) ? a : b;
    else
      return (a < b || a != a) ? a : b;
  }
  __device__ V finish(Acc a, std::int64_t) const { return a; }
};

template <typename V, bool kAll>
struct LogicalR {
  using Acc = std::uint8_t;
  __device__ Acc identity() const { return kAll ? 1 : 0; }
  __device__ Acc map(V v) const { return v != V(0) ? 1 : 0; }
  __device__ Acc combine(Acc a, Acc b) const { return kAll ? (a & b) : (a | b); }
  __device__ bool finish(Acc a, std::int64_t) const { return a != 0; }
};

struct Moments {
  double n, mean, m2;
};

template <typename V, bool kStd>
struct VarR {
  using Acc = Moments;
  double correction;
  __device__ Acc identity() const { return {0, 0, 0}; }
  __device__ Acc map(V v) const { return {1, static_cast<double>(v), 0}; }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, d = b.mean - a.mean, f = b.n / n;
    return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
  }
  __device__ double finish(Acc a, std::int64_t) const {
    const double divisor = a.n > correction ? a.n - correction : 0.0;  // as libtorch: 0 gives NaN or inf
    const double v = a.m2 / divisor;
    return kStd ? m::sqrt(v) : v;
  }
};

template <typename V>
struct LseAcc {
  V m, s;
};
template <typename V>
struct LogSumExpR {
  using Acc = LseAcc<V>;
  __device__ Acc identity() const { return {static_cast<V>(-INFINITY), V(0)}; }
  __device__ Acc map(V v) const { return {v, V(1)}; }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.m != a.m) return a;
    if (b.m != b.m) return b;
    if (a.m == b.m) return {a.m, a.s + b.s};
    if (a.m < b.m) {
      const Acc t = a;
      a = b;
      b = t;
    }
    return {a.m, a.s + b.s * m::exp(b.m - a.m)};
  }
  __device__ V finish(Acc a, std::int64_t) const {
    if (a.m != a.m || a.m - a.m != 0) return a.m;  // NaN or infinite
    return a.m + m::log(a.s);
  }
};

// ---- geometry: kept dims (output) and reduced dims (one output's inputs) ----

struct ReduceGeometry {
  int nk = 0, nr = 0;
  std::int64_t ksize[kMaxRank] = {}, kin[kMaxRank] = {}, kout[kMaxRank] = {};
  std::int64_t rsize[kMaxRank] = {}, rin[kMaxRank] = {};
  std::int64_t n_out = 1, n_red = 1;

  explicit ReduceGeometry(const ReduceArgs& a) {
    for (int d = 0; d < a.shape.rank(); ++d) {
      const std::int64_t n = a.shape[d];
      if (a.reduced[d])
        n_red *= n;
      else
        n_out *= n;
      if (n == 1) continue;
      if (a.reduced[d]) {
        rsize[nr] = n;
        rin[nr++] = a.in_strides[d];
      } else {
        ksize[nk] = n;
        kin[nk] = a.in_strides[d];
        kout[nk++] = a.out_strides[d];
      }
    }
  }
  __device__ void kept_offsets(std::int64_t o, std::int64_t& in, std::int64_t& out) const {
    in = 0, out = 0;
    for (int d = nk - 1; d >= 0; --d) {
      const std::int64_t i = o % ksize[d];
      o /= ksize[d];
      in += i * kin[d];
      out += i * kout[d];
    }
  }
  __device__ std::int64_t reduced_offset(std::int64_t r) const {
    std::int64_t off = 0;
    for (int d = nr - 1; d >= 0; --d) {
      off += r % rsize[d] * rin[d];
      r /= rsize[d];
    }
    return off;
  }
};

template <typename R, typename V>
__global__ void reduce_kernel(R r, ReduceGeometry g, const std::byte* in, DType in_dtype, std::byte* out,
                              DType out_dtype) {
  using Acc = typename R::Acc;
  __shared__ Acc shared[kReduceThreads];
  for (std::int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
    std::int64_t base, at;
    g.kept_offsets(o, base, at);
    Acc acc = r.identity();
    for (std::int64_t k = threadIdx.x; k < g.n_red; k += blockDim.x)
      acc = r.combine(acc, r.map(load_as<V>(in, in_dtype, base + g.reduced_offset(k))));
    __syncthreads();  // the previous output's tree is read
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) shared[threadIdx.x] = r.combine(shared[threadIdx.x], shared[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x == 0) store_as(out, out_dtype, at, r.finish(shared[0], g.n_red));
  }
}

template <typename V, typename R>
void launch_reduce(detail::DeviceRuntime& dev, const R& r, const ReduceArgs& a) {
  const ReduceGeometry g(a);
  if (g.n_out <= 0) return;
  const unsigned blocks = static_cast<unsigned>(g.n_out < kMaxBlocks ? g.n_out : kMaxBlocks);
  reduce_kernel<R, V><<<blocks, kReduceThreads, 0, stream_of(dev)>>>(r, g, a.in, a.in_dtype, a.out, a.out_dtype);
  check_launch("reduce");
}

// Float ops: f64 computes in double, the other floats in float.
template <template <typename> class R, typename... Extra>
void run_float(detail::DeviceRuntime& dev, const ReduceArgs& a, Extra... extra) {
  if (a.in_dtype == DType::f64)
    launch_reduce<double>(dev, R<double>{extra...}, a);
  else
    launch_reduce<float>(dev, R<float>{extra...}, a);
}

template <typename V>
using SumOnly = SumR<V, 0>;
template <typename V>
using MeanR = SumR<V, 1>;
template <typename V>
using Norm1R = SumR<V, 2>;
template <typename V>
using Norm2R = SumR<V, 3>;
template <typename V>
using MaxR = ExtremeR<V, true>;
template <typename V>
using MinR = ExtremeR<V, false>;
template <typename V>
using AllR = LogicalR<V, true>;
template <typename V>
using AnyR = LogicalR<V, false>;
template <typename V>
using VR = VarR<V, false>;
template <typename V>
using SR = VarR<V, true>;

// sum and prod: floats keep their dtype; integers and bool give i64.
template <template <typename> class R>
void run_widening(detail::DeviceRuntime& dev, const ReduceArgs& a) {
  if (is_floating(a.in_dtype))
    run_float<R>(dev, a);
  else
    launch_reduce<std::int64_t>(dev, R<std::int64_t>{}, a);
}

// max, min, all, any: values compared exactly (f64 holds every float, i64 every integer).
template <template <typename> class R>
void run_same(detail::DeviceRuntime& dev, const ReduceArgs& a) {
  if (is_floating(a.in_dtype))
    launch_reduce<double>(dev, R<double>{}, a);
  else
    launch_reduce<std::int64_t>(dev, R<std::int64_t>{}, a);
}

void reduce(detail::DeviceRuntime& dev, ReduceOp op, const ReduceArgs& a) {
  switch (op) {
    case ReduceOp::sum:
      return run_widening<SumOnly>(dev, a);
    case ReduceOp::prod:
      return run_widening<ProdR>(dev, a);
    case ReduceOp::mean:
      return run_float<MeanR>(dev, a);
    case ReduceOp::norm1:
      return run_float<Norm1R>(dev, a);
    case ReduceOp::norm2:
      return run_float<Norm2R>(dev, a);
    case ReduceOp::logsumexp:
      return run_float<LogSumExpR>(dev, a);
    case ReduceOp::var:
      return run_float<VR>(dev, a, static_cast<double>(a.correction));
    case ReduceOp::std:
      return run_float<SR>(dev, a, static_cast<double>(a.correction));
    case ReduceOp::amax:
      return run_same<MaxR>(dev, a);
    case ReduceOp::amin:
      return run_same<MinR>(dev, a);
    case ReduceOp::all:
      return run_same<AllR>(dev, a);
    case ReduceOp::any:
      return run_same<AnyR>(dev, a);
  }
}

// ---- along one dim ----

// The lines along `dim` of a shape: offsets of each line's start in up to
// three operands.
struct Lines {
  StridedIndexer<3> start;  // over the shape with dim's extent 1
  std::int64_t count = 0, n = 0;
  std::int64_t step[3] = {};  // strides along dim
};

Lines lines_of(const Shape& shape, int dim, const Strides& s0, const Strides& s1, const Strides& s2) {
  Lines l;
  Shape outer = shape;
  outer[dim] = 1;
  const Strides* const strides[3] = {&s0, &s1, &s2};
  l.start = StridedIndexer<3>(outer, strides);
  l.count = outer.numel();
  l.n = shape[dim];
  l.step[0] = s0[dim], l.step[1] = s1[dim], l.step[2] = s2[dim];
  return l;
}

template <typename V, bool kMax>
__device__ bool better(V v, V best) {
  if constexpr (kMax)
    return v > best || (v != v && best == best);
  else
    return v < best || (v != v && best == best);
}

template <typename V, bool kMax>
__global__ void arg_reduce_kernel(Lines l, const std::byte* in, DType dtype, std::byte* values, std::int64_t* indices) {
  FORGE_GRID_LOOP(line, l.count) {
    std::int64_t off[3];
    l.start.offsets(line, off);
    V best = load_as<V>(in, dtype, off[0]);
    std::int64_t idx = 0;
    for (std::int64_t i = 1; i < l.n; ++i) {
      const V v = load_as<V>(in, dtype, off[0] + i * l.step[0]);
      if (better<V, kMax>(v, best)) best = v, idx = i;
    }
    if (values != nullptr) store_as<V>(values, dtype, off[1], best);
    indices[off[2]] = idx;
  }
}

void arg_reduce(detail::DeviceRuntime& dev, bool is_max, const ArgReduceArgs& a) {
  const Strides& vs = a.values ? a.values_strides : a.indices_strides;
  const Lines l = lines_of(a.shape, a.dim, a.in_strides, vs, a.indices_strides);
  if (l.count <= 0) return;
  cudaStream_t s = stream_of(dev);
  auto* idx = reinterpret_cast<std::int64_t*>(a.indices);
  const auto launch = [&](auto tag) {
    using V = decltype(tag);
    if (is_max)
      arg_reduce_kernel<V, true><<<grid_for(l.count), kThreads, 0, s>>>(l, a.in, a.dtype, a.values, idx);
    else
      arg_reduce_kernel<V, false><<<grid_for(l.count), kThreads, 0, s>>>(l, a.in, a.dtype, a.values, idx);
  };
  if (is_floating(a.dtype))
    launch(double{});
  else
    launch(std::int64_t{});
  check_launch(is_max ? "argmax" : "argmin");
}

template <typename Acc>
__global__ void cumsum_kernel(Lines l, const std::byte* in, DType in_dtype, std::byte* out, DType out_dtype) {
  FORGE_GRID_LOOP(line, l.count) {
    std::int64_t off[3];
    l.start.offsets(line, off);
    Acc acc = 0;
    for (std::int64_t i = 0; i < l.n; ++i) {
      acc += load_as<Acc>(in, in_dtype, off[0] + i * l.step[0]);
      if constexpr (std::is_floating_point_v<Acc>)
        store_as<Acc>(out, out_dtype, off[1] + i * l.step[1], acc);
      else
        store_as<std::int64_t>(out, out_dtype, off[1] + i * l.step[1], static_cast<std::int64_t>(acc));
    }
  }
}

void cumsum(detail::DeviceRuntime& dev, const Shape& shape, const Strides& in_strides, const Strides& out_strides,
            int dim, const std::byte* in, DType in_dtype, std::byte* out, DType out_dtype) {
  const Lines l = lines_of(shape, dim, in_strides, out_strides, out_strides);
  if (l.count <= 0 || l.n <= 0) return;
  cudaStream_t s = stream_of(dev);
  if (is_floating(in_dtype))
    cumsum_kernel<double><<<grid_for(l.count), kThreads, 0, s>>>(l, in, in_dtype, out, out_dtype);
  else  // integers wrap, as the cpu's i64
    cumsum_kernel<std::uint64_t><<<grid_for(l.count), kThreads, 0, s>>>(l, in, in_dtype, out, out_dtype);
  check_launch("cumsum");
}

}  // namespace

void fill_reduce_table(backend::ReduceKernels& k) {
  k.reduce = {reduce, backend::kAllDTypes};
  k.arg_reduce = {arg_reduce, backend::kAllDTypes};
  k.cumsum = {cumsum, backend::kAllDTypes};
}

}  // namespace forge::cuda
