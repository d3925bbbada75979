// Loss forward kernels: cross_entropy, nll_loss, mse_loss.
// - A class loss reads each row through the class stride wherever it lies
//   (ClassRows). cross_entropy is fused per row: max, then sum(exp(x - max))
//   and sum(x), in f32 (f64 for f64 input); no log_softmax is materialized.
//   loss = (1 - ls) * (lse - x[t]) + ls * (lse - mean(x)), libtorch 1.13's
//   label smoothing for class-index targets.
// - Row losses land in an array of doubles (on the stack for small batches,
//   else pool scratch) and are summed in row order, and mse_loss sums fixed
//   blocks in f64 and the blocks in order, so a reduction does not depend on
//   the thread count.

#include "backend/cpu/loss_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/eigen.h"
#include "backend/cpu/kernels.h"
#include "core/convert.h"
#include "forge/buffer_pool.h"

namespace forge::cpu {
namespace {

// Per-row losses into `losses` (0 for ignored rows), computed by
// row_fn(row pointer, column stride, classes, target) -> double.
template <typename RowFn>
void for_each_row(DeviceRuntime& rt, const ClassLoss& p, double* losses, RowFn&& row_fn) {
  const ClassRows& rows = p.rows;
  const std::int64_t classes = rows.classes, cs = rows.class_stride;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(classes, 1));
  dispatch_dtype(p.out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) {
      const T* base = reinterpret_cast<const T*>(p.x);
      rt.parallel_for(rows.rows, grain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          const std::int64_t t = p.targets[i];
          losses[i] = t == p.ignore_index ? 0.0 : row_fn(base + rows.offset(i), cs, classes, t);
        }
      });
    }
  });
}

// The fused cross entropy of one row: f32 and f64 rows go through Eigen's
// vectorized max, exp and sums; 16-bit rows are widened to f32 as they are read.
template <typename T>
double cross_entropy_row(const T* x, std::int64_t cs, std::int64_t n, std::int64_t t, double smoothing) {
  double m, s, sx;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
    auto stats = [&](const auto& row) {
      const T mt = row.maxCoeff();
      m = static_cast<double>(mt);
      s = static_cast<double>((row - mt).exp().sum());
      sx = smoothing == 0.0 ? 0.0 : static_cast<double>(row.sum());
    };
    if (cs == 1)
      stats(Eigen::Map<const Row>(x, n));
    else
      stats(Eigen::Map<const Row, 0, Eigen::InnerStride<>>(x, n, Eigen::InnerStride<>(cs)));
  } else {
    float mf = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < n; ++j) mf = std::max(mf, static_cast<float>(x[j * cs]));
    float sf = 0, sxf = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      const float v = static_cast<float>(x[j * cs]);
      sf += std::exp(v - mf);
      sxf += v;
    }
    m = mf;
    s = sf;
    sx = sxf;
  }
  const double lse = m + std::log(s);
  const double nll = lse - static_cast<double>(widen(x[t * cs]));
  if (smoothing == 0.0) return nll;
  return (1.0 - smoothing) * nll + smoothing * (lse - sx / static_cast<double>(n));
}

// value, converted to out's dtype, into 0-d out.
void store_scalar(const Operand& out, double value) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    *reinterpret_cast<T*>(out.data) = from_double<T>(value);
  });
}

// Writes the row losses (reduction none) or their sum / mean into out.
void finish(DeviceRuntime& rt, const ClassLoss& p, const double* losses) {
  if (!p.reduce) {  // out has the targets' shape; losses are in its row-major order
    const Operand src{reinterpret_cast<std::byte*>(const_cast<double*>(losses)), DType::f64,
                      contiguous_strides(p.out_shape)};
    copy_cast(rt, p.out_shape, p.out, src);
    return;
  }
  double total = 0;
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < p.rows.rows; ++i) {
    total += losses[i];
    counted += p.targets[i] != p.ignore_index;
  }
  store_scalar(p.out, p.mean ? total / static_cast<double>(counted) : total);
}

template <typename RowFn>
void class_loss(DeviceRuntime& rt, const ClassLoss& p, RowFn&& row_fn) {
  const std::int64_t rows = p.rows.rows;
  // Small batches keep their row losses on the stack: no pool round trip.
  constexpr std::int64_t kStackRows = 64;
  double stack[kStackRows];
  ScratchLease<double> lease;
  double* losses = stack;
  if (rows > kStackRows) {
    lease = rt.pool().scratch<double>(static_cast<std::size_t>(rows));
    losses = lease.data();
  }
  for_each_row(rt, p, losses, row_fn);
  finish(rt, p, losses);
}

template <typename T>
void mse_typed(DeviceRuntime& rt, const MseLoss& p) {
  using C = compute_t<T>;
  const Operand &oa = p.a, &ob = p.b;
  if (!p.reduce) {
    const Operand& oo = p.out;
    const Strides* const strides[3] = {&oo.strides, &oa.strides, &ob.strides};
    const StridedLoop<3> loop(p.shape, strides);
    const std::int64_t so = loop.strides[0].back(), sa = loop.strides[1].back(), sb = loop.strides[2].back();
    for_each_run(rt, loop, [&](const std::int64_t(&off)[3], std::int64_t count) {
      T* o = reinterpret_cast<T*>(oo.data) + off[0];
      const T* x = reinterpret_cast<const T*>(oa.data) + off[1];
      const T* y = reinterpret_cast<const T*>(ob.data) + off[2];
      for (std::int64_t k = 0; k < count; ++k) {
        const C d = widen(x[k * sa]) - widen(y[k * sb]);
        o[k * so] = convert<T>(d * d);
      }
    });
    return;
  }
  // Fixed blocks, each summed in f64, then the block sums in order: the
  // result does not depend on how the blocks were spread over threads.
  const std::int64_t n = p.shape.numel();
  const Strides* const strides[2] = {&oa.strides, &ob.strides};
  const StridedLoop<2> loop(p.shape, strides);
  const std::int64_t sa = loop.strides[0].back(), sb = loop.strides[1].back();
  const std::int64_t block = kGrainElements, blocks = (n + block - 1) / block;
  ScratchLease<double> partial = rt.pool().scratch<double>(static_cast<std::size_t>(std::max<std::int64_t>(blocks, 1)));
  rt.parallel_for(blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t k = begin; k < end; ++k) {
      double acc = 0;
      for_each_run_in(loop, k * block, std::min(n, (k + 1) * block),
                      [&](const std::int64_t(&off)[2], std::int64_t count, std::int64_t) {
                        const T* x = reinterpret_cast<const T*>(oa.data) + off[0];
                        const T* y = reinterpret_cast<const T*>(ob.data) + off[1];
                        for (std::int64_t j = 0; j < count; ++j) {
                          const double d =
                              static_cast<double>(widen(x[j * sa])) - static_cast<double>(widen(y[j * sb]));
                          acc += d * d;
                        }
                      });
      partial[static_cast<std::size_t>(k)] = acc;
    }
  });
  double total = 0;
  for (std::int64_t k = 0; k < blocks; ++k) total += partial[static_cast<std::size_t>(k)];
  store_scalar(p.out, p.mean ? total / static_cast<double>(n) : total);
}

}  // namespace

void cross_entropy(DeviceRuntime& rt, const ClassLoss& p) {
  const double ls = p.label_smoothing;
  class_loss(rt, p, [ls](const auto* x, std::int64_t cs, std::int64_t n, std::int64_t t) {
    return cross_entropy_row(x, cs, n, t, ls);
  });
}

void nll_loss(DeviceRuntime& rt, const ClassLoss& p) {
  class_loss(rt, p, [](const auto* x, std::int64_t cs, std::int64_t, std::int64_t t) {
    return -static_cast<double>(widen(x[t * cs]));
  });
}

void mse_loss(DeviceRuntime& rt, const MseLoss& p) {
  dispatch_dtype(p.out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || is_half_v<T>) mse_typed<T>(rt, p);
  });
}

}  // namespace forge::cpu
