#pragma once
// The nn family of the kernel table (backend/kernels.h): softmax, the layer
// and RMS norms, the losses, and their gradients, with the device-neutral
// arguments they take. The forwards take every floating dtype (16-bit floats
// computed in f32); the gradients take packed (or ClassRows-described) rows
// of f32 or f64 (the rules widen 16-bit floats), sum over a row in f64, and
// sum weight and bias gradients per block of rows and the blocks in order, so
// results do not depend on the thread count.

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/kernels/copy.h"
#include "forge/dtype.h"
#include "forge/shape.h"

namespace forge::backend {

// The rows of a class loss's input [C], [N, C] or [N, C, d1, ..., dk]: every
// index but the class dim's, in row-major order (one row, N rows, or
// N * d1 * ... * dk rows, matching the target's elements), and where each
// starts. Row dims that are contiguous with each other are merged, so a
// packed [N, C] or a [B, V, T] view of [B, T, V] logits walks one row
// stride.
struct ClassRows {
  std::int64_t rows = 1, classes = 0, class_stride = 0;
  int rank = 0;  // row dims after merging
  std::int64_t size[kMaxRank] = {}, stride[kMaxRank] = {};

  ClassRows() = default;
  ClassRows(const Shape& shape, const Strides& strides) {
    const int class_dim = shape.rank() == 1 ? 0 : 1;
    classes = shape[class_dim];
    class_stride = strides[class_dim];
    for (int d = 0; d < shape.rank(); ++d) {
      if (d == class_dim) continue;
      rows *= shape[d];
      if (shape[d] == 1) continue;
      if (rank > 0 && stride[rank - 1] == strides[d] * shape[d]) {  // merges with the dim before
        size[rank - 1] *= shape[d];
        stride[rank - 1] = strides[d];
      } else {
        size[rank] = shape[d];
        stride[rank] = strides[d];
        ++rank;
      }
    }
  }
  // Element offset of row i's first class.
  std::int64_t offset(std::int64_t i) const noexcept {
    if (rank == 1) return i * stride[0];
    std::int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += i % size[d] * stride[d];
      i /= size[d];
    }
    return off;
  }
};

// The forward of cross_entropy or nll_loss over the rows of x (laid out as
// `rows`, of out's dtype): each row's loss, 0 where the target is
// ignore_index, either into `out` (reduce false: out has the targets' shape,
// out_shape, and takes the losses in its row-major order) or summed in row
// order (the same bits for any thread count) into 0-d `out`, divided by the
// number of rows not ignored when `mean` (0 / 0 = NaN when every row is).
// cross_entropy: logsumexp(x_i) - x_i[t], with label smoothing ls
// (1 - ls) * that + ls * (logsumexp(x_i) - mean(x_i)); nll_loss: -x_i[t].
// Targets are in [0, classes) or ignore_index.
struct ClassLoss {
  ClassRows rows;
  const std::byte* x = nullptr;
  const std::int64_t* targets = nullptr;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0;  // cross_entropy
  bool reduce = false, mean = false;
  Shape out_shape;
  Operand out;
};

// mse_loss: (a - b)^2 over `shape` (a and b broadcast to it, of out's
// floating dtype) into `out` of that shape (reduce false), or summed in f64
// over fixed blocks added in order (the same bits for any thread count) into
// 0-d `out`, divided by the element count when `mean`.
struct MseLoss {
  Shape shape;
  Operand a, b, out;
  bool reduce = false, mean = false;
};

// The gradients of layer_norm (rms = false) or rms_norm (rms = true) over
// packed rows of n, recomputing each row's mean and 1/std from x. w may be
// null (no weight); dw and db may be null (not wanted). dx may be null.
struct NormBackward {
  DType dtype = DType::f32;
  std::int64_t rows = 0, n = 0;
  double eps = 0;
  bool rms = false;
  const std::byte* x = nullptr;
  const std::byte* w = nullptr;
  const std::byte* g = nullptr;
  std::byte* dx = nullptr;
  std::byte* dw = nullptr;
  std::byte* db = nullptr;
};

// The gradient of cross_entropy or nll_loss with respect to its input (x,
// laid out as x_rows), written into dx (laid out as dx_rows). Row i's output
// gradient is g[i * g_stride] (g_stride 0: one value for all rows), divided
// by the number of rows not ignored when `mean`. cross_entropy: (softmax(x_i)
// - q_i) * scale with q_i the target one-hot smoothed by label_smoothing;
// nll_loss: -scale at the target class, zeros elsewhere (dx is dense: all of
// its dx_rows.rows * classes elements from dx on are its own).
struct ClassLossBackward {
  DType dtype = DType::f32;
  ClassRows x_rows, dx_rows;
  const std::byte* x = nullptr;  // unused by nll_loss
  const std::int64_t* targets = nullptr;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0;
  const std::byte* g = nullptr;
  std::int64_t g_stride = 0;
  bool mean = false;
  std::byte* dx = nullptr;
};

// softmax (or log_softmax) over the middle axis of a contiguous
// [outer, n, inner] block; out is contiguous of the same dtype.
using SoftmaxFn = void(detail::DeviceRuntime& dev, DType dtype, std::int64_t outer, std::int64_t n, std::int64_t inner,
                       const std::byte* in, std::byte* out, bool log);
// Normalizes each of `rows` contiguous rows of n elements; weight and bias
// are contiguous [n] of the same dtype, or null.
using LayerNormFn = void(detail::DeviceRuntime& dev, DType dtype, std::int64_t rows, std::int64_t n,
                         const std::byte* in, const std::byte* weight, const std::byte* bias, double eps,
                         std::byte* out);
using RmsNormFn = void(detail::DeviceRuntime& dev, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* in,
                       const std::byte* weight, double eps, std::byte* out);
using ClassLossFn = void(detail::DeviceRuntime& dev, const ClassLoss& p);
using MseLossFn = void(detail::DeviceRuntime& dev, const MseLoss& p);
// dx = y * (g - sum(g * y)) per packed row of n (softmax), or
// dx = g - exp(y) * sum(g) (log_softmax, y the log-probabilities).
using SoftmaxBackwardFn = void(detail::DeviceRuntime& dev, DType dtype, std::int64_t rows, std::int64_t n,
                               const std::byte* y, const std::byte* g, std::byte* dx, bool log);
using NormBackwardFn = void(detail::DeviceRuntime& dev, const NormBackward& p);
using ClassLossBackwardFn = void(detail::DeviceRuntime& dev, const ClassLossBackward& p);

struct NnKernels {
  Entry<SoftmaxFn> softmax;  // and log_softmax
  Entry<LayerNormFn> layer_norm;
  Entry<RmsNormFn> rms_norm;
  Entry<ClassLossFn> cross_entropy;
  Entry<ClassLossFn> nll_loss;
  Entry<MseLossFn> mse_loss;
  Entry<SoftmaxBackwardFn> softmax_backward;  // and log_softmax's
  Entry<NormBackwardFn> norm_backward;        // layer_norm's and rms_norm's
  Entry<ClassLossBackwardFn> cross_entropy_backward;
  Entry<ClassLossBackwardFn> nll_loss_backward;

  // Calls f(name, entry) for each entry, in order (tests walk the table).
  template <typename Self, typename F>
  static void visit(Self& k, F&& f) {
    f("softmax", k.softmax);
    f("layer_norm", k.layer_norm);
    f("rms_norm", k.rms_norm);
    f("cross_entropy", k.cross_entropy);
    f("nll_loss", k.nll_loss);
    f("mse_loss", k.mse_loss);
    f("softmax_backward", k.softmax_backward);
    f("norm_backward", k.norm_backward);
    f("cross_entropy_backward", k.cross_entropy_backward);
    f("nll_loss_backward", k.nll_loss_backward);
  }
};

}  // namespace forge::backend
