// The cuda backend's nn family: softmax and log_softmax, layer_norm and
// rms_norm, the class losses and mse_loss, and their gradients, in the cpu
// backend's dtypes (forwards: every floating dtype, 16-bit computed in f32;
// gradients: f32 and f64).
//
// Row kernels run one block per row (grid-stride over rows), the block
// reducing with warp shuffles (common.cuh). Statistics are summed in f64;
// layer_norm and rms_norm take the cpu's rescaled f64 path for rows whose
// plain sums overflow (Note [Statistics of huge rows] in
// backend/cpu/row_moments.h). Reductions over rows (loss sums, weight and
// bias gradients) add in row order in one thread per output, so their bits
// do not depend on the launch. The element formulas are device_math.h's.

#include "backend/cuda/common.cuh"
#include "backend/cuda/tables.h"
#include "forge/buffer_pool.h"

namespace forge::cuda {
namespace {

using backend::ClassLoss;
using backend::ClassLossBackward;
using backend::ClassRows;
using backend::MseLoss;
using backend::NormBackward;

// Rows a block walks: blockIdx.x, blockIdx.x + gridDim.x, ...
#define FORGE_ROW_LOOP(r, rows) for (std::int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

// Element offset of row i's first class (ClassRows::offset, on the device).
__device__ std::int64_t row_offset(const ClassRows& rows, std::int64_t i) {
  if (rows.rank == 1) return i * rows.stride[0];
  std::int64_t off = 0;
  for (int d = rows.rank - 1; d >= 0; --d) {
    off += i % rows.size[d] * rows.stride[d];
    i /= rows.size[d];
  }
  return off;
}

// ---- softmax ----

// Rows of the [outer, n, inner] block: (o, k) for o < outer, k < inner, the
// row's elements `inner` apart.
template <typename C>
__global__ void softmax_kernel(DType dtype, std::int64_t outer, std::int64_t n, std::int64_t inner, const std::byte* in,
                               std::byte* out, bool log) {
  FORGE_ROW_LOOP(r, outer * inner) {
    const std::int64_t base = (r / inner) * n * inner + r % inner;
    C mx = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      mx = MaxNanOp<C>{}(mx, load_as<C>(in, dtype, base + j * inner));
    mx = block_reduce(mx, MaxNanOp<C>{});
    double sum = 0;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      sum += static_cast<double>(m::exp(load_as<C>(in, dtype, base + j * inner) - mx));
    sum = block_reduce(sum, SumOp<double>{});
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const std::int64_t at = base + j * inner;
      store_as<C>(out, dtype, at, softmax_value<C>(load_as<C>(in, dtype, at), mx, sum, log));
    }
  }
}

void softmax(detail::DeviceRuntime& dev, DType dtype, std::int64_t outer, std::int64_t n, std::int64_t inner,
             const std::byte* in, std::byte* out, bool log) {
  if (outer <= 0 || n <= 0 || inner <= 0) return;
  const RowSplit split = row_split(outer * inner, n);
  cudaStream_t s = stream_of(dev);
  dispatch_float(dtype, [&](auto tag) {
    softmax_kernel<decltype(tag)><<<split.blocks, split.threads, 0, s>>>(dtype, outer, n, inner, in, out, log);
  });
  check_launch("softmax");
}

// ---- layer_norm, rms_norm ----

// Moments of x * scale in f64 over one row: the mean (0 unless centred) and
// the mean squared deviation (row_moments.h's row_moments).
template <typename C>
__device__ void row_moments(DType dtype, const std::byte* x, std::int64_t base, std::int64_t n, bool centred,
                            double scale, double& mean, double& var) {
  mean = 0;
  if (centred) {
    double s = 0;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      s += static_cast<double>(load_as<C>(x, dtype, base + j)) * scale;
    mean = block_reduce(s, SumOp<double>{}) / static_cast<double>(n);
  }
  double v = 0;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const double d = static_cast<double>(load_as<C>(x, dtype, base + j)) * scale - mean;
    v += d * d;
  }
  var = block_reduce(v, SumOp<double>{}) / static_cast<double>(n);
}

// safe_row_moments: rescaled by the power of two of the row's largest
// magnitude when the plain sums overflow. Returns the scale.
template <typename C>
__device__ double safe_row_moments(DType dtype, const std::byte* x, std::int64_t base, std::int64_t n, bool centred,
                                   double& mean, double& var) {
  row_moments<C>(dtype, x, base, n, centred, 1.0, mean, var);
  if (finite(mean) && finite(var)) return 1.0;
  double big = 0;  // inf when any element is not finite: scale 1, NaN statistics as before
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const double a = m::abs(static_cast<double>(load_as<C>(x, dtype, base + j)));
    big = finite(a) ? (a > big ? a : big) : INFINITY;
  }
  big = block_reduce(big, MaxNanOp<double>{});
  const double scale = finite(big) ? magnitude_scale(big) : 1.0;
  row_moments<C>(dtype, x, base, n, centred, scale, mean, var);
  return scale;
}

template <typename C>
__global__ void norm_kernel(DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in, const std::byte* w,
                            const std::byte* b, double eps, std::byte* out, bool centred) {
  FORGE_ROW_LOOP(r, rows) {
    const std::int64_t base = r * n;
    // The fast statistics (norm_kernels.cpp): the mean in C, deviations squared in C, sums in f64.
    double s = 0;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C v = load_as<C>(in, dtype, base + j);
      s += centred ? static_cast<double>(v) : static_cast<double>(v * v);
    }
    s = block_reduce(s, SumOp<double>{});
    C mean = 0;
    double var = s / static_cast<double>(n);
    bool ok = finite(s);
    if (centred && ok) {
      mean = static_cast<C>(s / static_cast<double>(n));
      double q = 0;
      for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const C d = load_as<C>(in, dtype, base + j) - mean;
        q += static_cast<double>(d * d);
      }
      var = block_reduce(q, SumOp<double>{}) / static_cast<double>(n);
      ok = finite(var);
    }
    if (ok) {
      const C rstd = static_cast<C>(norm_rstd(var, eps));
      for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        C y = (load_as<C>(in, dtype, base + j) - mean) * rstd;
        if (w != nullptr) y = y * load_as<C>(w, dtype, j);
        if (b != nullptr) y = y + load_as<C>(b, dtype, j);
        store_as<C>(out, dtype, base + j, y);
      }
    } else {  // the f64 rescaled path (norm_row_f64)
      double mean64, var64;
      const double scale = safe_row_moments<C>(dtype, in, base, n, centred, mean64, var64);
      const double rstd = 1.0 / m::sqrt(var64 + eps * scale * scale);
      for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        double y = (static_cast<double>(load_as<C>(in, dtype, base + j)) * scale - mean64) * rstd;
        if (w != nullptr) y *= static_cast<double>(load_as<C>(w, dtype, j));
        if (b != nullptr) y += static_cast<double>(load_as<C>(b, dtype, j));
        store_as<C>(out, dtype, base + j, static_cast<C>(y));
      }
    }
  }
}

void launch_norm(detail::DeviceRuntime& dev, const char* op, DType dtype, std::int64_t rows, std::int64_t n,
                 const std::byte* in, const std::byte* w, const std::byte* b, double eps, std::byte* out,
                 bool centred) {
  if (rows <= 0 || n <= 0) return;
  const RowSplit split = row_split(rows, n);
  cudaStream_t s = stream_of(dev);
  dispatch_float(dtype, [&](auto tag) {
    norm_kernel<decltype(tag)><<<split.blocks, split.threads, 0, s>>>(dtype, rows, n, in, w, b, eps, out, centred);
  });
  check_launch(op);
}

void layer_norm(detail::DeviceRuntime& dev, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
                const std::byte* weight, const std::byte* bias, double eps, std::byte* out) {
  launch_norm(dev, "layer_norm", dtype, rows, n, in, weight, bias, eps, out, true);
}

void rms_norm(detail::DeviceRuntime& dev, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
              const std::byte* weight, double eps, std::byte* out) {
  launch_norm(dev, "rms_norm", dtype, rows, n, in, weight, nullptr, eps, out, false);
}

// ---- class losses ----

// What a class-loss kernel needs of ClassLoss (which holds a Shape the
// kernel does not read).
struct LossArgs {
  ClassRows rows;
  const std::byte* x;
  DType dtype;
  const std::int64_t* targets;
  std::int64_t ignore_index;
  double label_smoothing;
  bool reduce;
  StridedIndexer<1> out_index;  // row i's place in out (reduce false)
  std::byte* out;
  DType out_dtype;
  double* losses;  // reduce true: the row losses
};

// Row i's loss to its place.
__device__ void put_loss(const LossArgs& a, std::int64_t i, double loss) {
  if (a.reduce) {
    a.losses[i] = loss;
  } else {
    std::int64_t off[1];
    a.out_index.offsets(i, off);
    store_as<double>(a.out, a.out_dtype, off[0], loss);
  }
}

template <typename C>
__global__ void cross_entropy_kernel(LossArgs a) {
  const std::int64_t classes = a.rows.classes, cs = a.rows.class_stride;
  FORGE_ROW_LOOP(i, a.rows.rows) {
    const std::int64_t t = a.targets[i];
    if (t == a.ignore_index) {  // the same branch for the whole block
      if (threadIdx.x == 0) put_loss(a, i, 0.0);
      continue;
    }
    const std::int64_t base = row_offset(a.rows, i);
    C mx = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x)
      mx = MaxNanOp<C>{}(mx, load_as<C>(a.x, a.dtype, base + j * cs));
    mx = block_reduce(mx, MaxNanOp<C>{});
    double s = 0, sx = 0;
    for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      const C v = load_as<C>(a.x, a.dtype, base + j * cs);
      s += static_cast<double>(m::exp(v - mx));
      sx += static_cast<double>(v);
    }
    s = block_reduce(s, SumOp<double>{});
    sx = block_reduce(sx, SumOp<double>{});
    if (threadIdx.x == 0) {
      const double lse = static_cast<double>(mx) + m::log(s);
      const double xt = static_cast<double>(load_as<C>(a.x, a.dtype, base + t * cs));
      put_loss(a, i, cross_entropy_loss(lse, xt, sx / static_cast<double>(classes), a.label_smoothing));
    }
  }
}

__global__ void nll_kernel(LossArgs a) {
  FORGE_GRID_LOOP(i, a.rows.rows) {
    const std::int64_t t = a.targets[i];
    const double loss =
        t == a.ignore_index ? 0.0 : -load_as<double>(a.x, a.dtype, row_offset(a.rows, i) + t * a.rows.class_stride);
    put_loss(a, i, loss);
  }
}

// The sum (or mean over the rows not ignored) of the row losses, in row order.
__global__ void loss_total_kernel(std::int64_t rows, const double* losses, const std::int64_t* targets,
                                  std::int64_t ignore_index, bool mean, std::byte* out, DType out_dtype) {
  double total = 0;
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    total += losses[i];
    counted += targets[i] != ignore_index;
  }
  store_as<double>(out, out_dtype, 0, mean ? total / static_cast<double>(counted) : total);
}

void class_loss(detail::DeviceRuntime& dev, const ClassLoss& p, bool cross_entropy) {
  const char* op = cross_entropy ? "cross_entropy" : "nll_loss";
  cudaStream_t s = stream_of(dev);
  const std::int64_t rows = p.rows.rows;
  LossArgs a{p.rows,   p.x, p.out.dtype, p.targets,   p.ignore_index, p.label_smoothing,
             p.reduce, {},  p.out.data,  p.out.dtype, nullptr};
  Ref<Buffer> scratch;
  if (p.reduce) {
    scratch = dev.pool().acquire(static_cast<std::size_t>(rows > 0 ? rows : 1) * sizeof(double), op);
    a.losses = reinterpret_cast<double*>(scratch->data());
  } else {
    const Strides* const strides[1] = {&p.out.strides};
    a.out_index = StridedIndexer<1>(p.out_shape, strides);
  }
  if (rows > 0) {
    if (cross_entropy) {
      const RowSplit split = row_split(rows, p.rows.classes);
      dispatch_float(a.dtype,
                     [&](auto tag) { cross_entropy_kernel<decltype(tag)><<<split.blocks, split.threads, 0, s>>>(a); });
    } else {
      nll_kernel<<<grid_for(rows), kThreads, 0, s>>>(a);
    }
    check_launch(op);
  }
  if (p.reduce) {
    loss_total_kernel<<<1, 1, 0, s>>>(rows, a.losses, p.targets, p.ignore_index, p.mean, p.out.data, p.out.dtype);
    check_launch(op);
  }
}

void cross_entropy(detail::DeviceRuntime& dev, const ClassLoss& p) { class_loss(dev, p, true); }
void nll_loss(detail::DeviceRuntime& dev, const ClassLoss& p) { class_loss(dev, p, false); }

// ---- mse_loss ----

template <typename C>
__global__ void mse_kernel(std::int64_t n, StridedIndexer<3> ix, backend::Operand out, backend::Operand a,
                           backend::Operand b) {
  FORGE_GRID_LOOP(i, n) {
    std::int64_t off[3];
    ix.offsets(i, off);
    const C d = load_as<C>(a.data, a.dtype, off[1]) - load_as<C>(b.data, b.dtype, off[2]);
    store_as<C>(out.data, out.dtype, off[0], d * d);
  }
}

constexpr std::int64_t kChunk = 32768;  // the cpu's fixed blocks (kGrainElements)

__global__ void mse_chunks_kernel(std::int64_t n, StridedIndexer<2> ix, backend::Operand a, backend::Operand b,
                                  double* partial) {
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kChunk;
  const std::int64_t end = begin + kChunk < n ? begin + kChunk : n;
  double acc = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    std::int64_t off[2];
    ix.offsets(i, off);
    const double d = load_as<double>(a.data, a.dtype, off[0]) - load_as<double>(b.data, b.dtype, off[1]);
    acc += d * d;
  }
  acc = block_reduce(acc, SumOp<double>{});
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void chunk_total_kernel(std::int64_t chunks, const double* partial, double divisor, std::byte* out,
                                   DType out_dtype) {
  double total = 0;
  for (std::int64_t k = 0; k < chunks; ++k) total += partial[k];
  store_as<double>(out, out_dtype, 0, total / divisor);
}

void mse_loss(detail::DeviceRuntime& dev, const MseLoss& p) {
  cudaStream_t s = stream_of(dev);
  const std::int64_t n = p.shape.numel();
  if (!p.reduce) {
    if (n <= 0) return;
    const Strides* const strides[3] = {&p.out.strides, &p.a.strides, &p.b.strides};
    const StridedIndexer<3> ix(p.shape, strides);
    dispatch_float(p.out.dtype, [&](auto tag) {
      mse_kernel<decltype(tag)><<<grid_for(n), kThreads, 0, s>>>(n, ix, p.out, p.a, p.b);
    });
    check_launch("mse_loss");
    return;
  }
  const BlockChunks chunks = block_chunks(n, kChunk);
  Ref<Buffer> scratch =
      dev.pool().acquire(static_cast<std::size_t>(chunks.count > 0 ? chunks.count : 1) * sizeof(double), "mse_loss");
  auto* partial = reinterpret_cast<double*>(scratch->data());
  if (chunks.count > 0) {
    const Strides* const strides[2] = {&p.a.strides, &p.b.strides};
    const StridedIndexer<2> ix(p.shape, strides);
    mse_chunks_kernel<<<static_cast<unsigned>(chunks.count), kThreads, 0, s>>>(n, ix, p.a, p.b, partial);
    check_launch("mse_loss");
  }
  chunk_total_kernel<<<1, 1, 0, s>>>(chunks.count, partial, p.mean ? static_cast<double>(n) : 1.0, p.out.data,
                                     p.out.dtype);
  check_launch("mse_loss");
}

// ---- gradients ----

template <typename T>
__global__ void softmax_backward_kernel(std::int64_t rows, std::int64_t n, const T* y, const T* g, T* dx, bool log) {
  FORGE_ROW_LOOP(r, rows) {
    const std::int64_t base = r * n;
    double s = 0;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      s += log ? static_cast<double>(g[base + j]) : static_cast<double>(g[base + j]) * y[base + j];
    s = block_reduce(s, SumOp<double>{});
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dx[base + j] = softmax_backward_value<T>(y[base + j], g[base + j], static_cast<double>(static_cast<T>(s)), log);
  }
}

void softmax_backward(detail::DeviceRuntime& dev, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* y,
                      const std::byte* g, std::byte* dx, bool log) {
  if (rows <= 0 || n <= 0) return;
  const RowSplit split = row_split(rows, n);
  cudaStream_t s = stream_of(dev);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<split.blocks, split.threads, 0, s>>>(
        rows, n, reinterpret_cast<const T*>(y), reinterpret_cast<const T*>(g), reinterpret_cast<T*>(dx), log);
  });
  check_launch("softmax_backward");
}

// Per row: its statistics (scale, mean, rstd) for the column pass, and dx.
template <typename T>
__global__ void norm_backward_rows_kernel(NormBackward p, double* stats) {
  const std::int64_t n = p.n;
  const T* w = reinterpret_cast<const T*>(p.w);
  FORGE_ROW_LOOP(r, p.rows) {
    const T* x = reinterpret_cast<const T*>(p.x) + r * n;
    const T* g = reinterpret_cast<const T*>(p.g) + r * n;
    double mean, var;
    const double scale = safe_row_moments<T>(p.dtype, p.x, r * n, n, !p.rms, mean, var);
    const double rstd = 1.0 / m::sqrt(var + p.eps * scale * scale);
    if (threadIdx.x == 0) {
      stats[3 * r] = scale;
      stats[3 * r + 1] = mean;
      stats[3 * r + 2] = rstd;
    }
    if (p.dx == nullptr) continue;
    double sum_gy = 0, sum_gyx = 0;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double xhat = (x[j] * scale - mean) * rstd;
      const double gy = w ? static_cast<double>(g[j]) * w[j] : static_cast<double>(g[j]);
      sum_gy += gy;
      sum_gyx += gy * xhat;
    }
    sum_gy = block_reduce(sum_gy, SumOp<double>{});
    sum_gyx = block_reduce(sum_gyx, SumOp<double>{});
    const double a = p.rms ? 0.0 : sum_gy / static_cast<double>(n), b = sum_gyx / static_cast<double>(n);
    T* dx = reinterpret_cast<T*>(p.dx) + r * n;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double xhat = (x[j] * scale - mean) * rstd;
      const double gy = w ? static_cast<double>(g[j]) * w[j] : static_cast<double>(g[j]);
      dx[j] = static_cast<T>(scale * rstd * (gy - a - xhat * b));
    }
  }
}

// dw and db: one thread per column, rows added in order.
template <typename T>
__global__ void norm_backward_columns_kernel(NormBackward p, const double* stats) {
  const T* x = reinterpret_cast<const T*>(p.x);
  const T* g = reinterpret_cast<const T*>(p.g);
  FORGE_GRID_LOOP(j, p.n) {
    double dw = 0, db = 0;
    for (std::int64_t r = 0; r < p.rows; ++r) {
      const double* st = stats + 3 * r;
      const double gv = g[r * p.n + j];
      dw += gv * ((x[r * p.n + j] * st[0] - st[1]) * st[2]);
      db += gv;
    }
    if (p.dw) reinterpret_cast<T*>(p.dw)[j] = static_cast<T>(dw);
    if (p.db) reinterpret_cast<T*>(p.db)[j] = static_cast<T>(db);
  }
}

void norm_backward(detail::DeviceRuntime& dev, const NormBackward& p) {
  if (p.n <= 0) return;
  cudaStream_t s = stream_of(dev);
  Ref<Buffer> scratch =
      dev.pool().acquire(static_cast<std::size_t>(p.rows > 0 ? p.rows : 1) * 3 * sizeof(double), "norm_backward");
  auto* stats = reinterpret_cast<double*>(scratch->data());
  dispatch_float(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (p.rows > 0) {
      const RowSplit split = row_split(p.rows, p.n);
      norm_backward_rows_kernel<T><<<split.blocks, split.threads, 0, s>>>(p, stats);
      check_launch("norm_backward");
    }
    if (p.dw || p.db) {
      norm_backward_columns_kernel<T><<<grid_for(p.n), kThreads, 0, s>>>(p, stats);
      check_launch("norm_backward");
    }
  });
}

// 1 / (rows not ignored) into *inv (1 when not a mean).
__global__ void inverse_count_kernel(std::int64_t rows, const std::int64_t* targets, std::int64_t ignore_index,
                                     bool mean, double* inv) {
  double counted = 0;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) counted += targets[i] != ignore_index;
  counted = block_reduce(counted, SumOp<double>{});
  if (threadIdx.x == 0) *inv = mean ? 1.0 / counted : 1.0;  // none counted: inf, as the forward's 0 / 0
}

template <typename T>
__global__ void cross_entropy_backward_kernel(ClassLossBackward p, const double* inv) {
  const std::int64_t classes = p.dx_rows.classes, xs = p.x_rows.class_stride, ds = p.dx_rows.class_stride;
  FORGE_ROW_LOOP(i, p.dx_rows.rows) {
    T* d = reinterpret_cast<T*>(p.dx) + row_offset(p.dx_rows, i);
    const std::int64_t t = p.targets[i];
    if (t == p.ignore_index) {
      for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) d[j * ds] = T{0};
      continue;
    }
    const T* x = reinterpret_cast<const T*>(p.x) + row_offset(p.x_rows, i);
    T mx = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) mx = MaxNanOp<T>{}(mx, x[j * xs]);
    mx = block_reduce(mx, MaxNanOp<T>{});
    double s = 0;
    for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += static_cast<double>(m::exp(x[j * xs] - mx));
    s = block_reduce(s, SumOp<double>{});
    const double scale = static_cast<double>(reinterpret_cast<const T*>(p.g)[i * p.g_stride]) * *inv;
    const double ls = p.label_smoothing;
    const T a = static_cast<T>(scale / s), b = static_cast<T>(scale * ls / static_cast<double>(classes));
    for (std::int64_t j = threadIdx.x; j < classes; j += blockDim.x)
      d[j * ds] = cross_entropy_grad<T>(m::exp(x[j * xs] - mx), a, b, j == t, scale, ls);
  }
}

template <typename T>
__global__ void nll_backward_kernel(ClassLossBackward p, const double* inv) {
  FORGE_GRID_LOOP(i, p.dx_rows.rows) {
    const std::int64_t t = p.targets[i];
    if (t == p.ignore_index) continue;
    const double scale = static_cast<double>(reinterpret_cast<const T*>(p.g)[i * p.g_stride]) * *inv;
    reinterpret_cast<T*>(p.dx)[row_offset(p.dx_rows, i) + t * p.dx_rows.class_stride] = static_cast<T>(-scale);
  }
}

void class_loss_backward(detail::DeviceRuntime& dev, const ClassLossBackward& p, bool cross_entropy) {
  const char* op = cross_entropy ? "cross_entropy_backward" : "nll_loss_backward";
  cudaStream_t s = stream_of(dev);
  const std::int64_t rows = p.dx_rows.rows, classes = p.dx_rows.classes;
  if (!cross_entropy && rows * classes > 0)  // dx is dense: zeros, then the targets' entries
    check(cudaMemsetAsync(p.dx, 0, static_cast<std::size_t>(rows * classes) * dtype_size(p.dtype), s), op, "memset");
  if (rows <= 0 || classes <= 0) return;
  Ref<Buffer> scratch = dev.pool().acquire(sizeof(double), op);
  auto* inv = reinterpret_cast<double*>(scratch->data());
  inverse_count_kernel<<<1, 1024, 0, s>>>(rows, p.targets, p.ignore_index, p.mean, inv);
  check_launch(op);
  dispatch_float(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (cross_entropy) {
      const RowSplit split = row_split(rows, classes);
      cross_entropy_backward_kernel<T><<<split.blocks, split.threads, 0, s>>>(p, inv);
    } else {
      nll_backward_kernel<T><<<grid_for(rows), kThreads, 0, s>>>(p, inv);
    }
  });
  check_launch(op);
}

void cross_entropy_backward(detail::DeviceRuntime& dev, const ClassLossBackward& p) {
  class_loss_backward(dev, p, true);
}
void nll_loss_backward(detail::DeviceRuntime& dev, const ClassLossBackward& p) { class_loss_backward(dev, p, false); }

constexpr backend::DTypeMask kF32F64 = backend::mask_of(DType::f32, DType::f64);

}  // namespace

void fill_nn_table(backend::NnKernels& k) {
  k.softmax = {softmax, backend::kFloatDTypes};
  k.layer_norm = {layer_norm, backend::kFloatDTypes};
  k.rms_norm = {rms_norm, backend::kFloatDTypes};
  k.cross_entropy = {cross_entropy, backend::kFloatDTypes};
  k.nll_loss = {nll_loss, backend::kFloatDTypes};
  k.mse_loss = {mse_loss, backend::kFloatDTypes};
  k.softmax_backward = {softmax_backward, kF32F64};
  k.norm_backward = {norm_backward, kF32F64};
  k.cross_entropy_backward = {cross_entropy_backward, kF32F64};
  k.nll_loss_backward = {nll_loss_backward, kF32F64};
}

}  // namespace forge::cuda
