#pragma once
// Unchecked CPU kernels of the neural-network ops' gradients: the row-wise
// softmax and normalization backwards and the fused class-loss backwards.
// Rows are contiguous and f32 or f64 (callers pack and widen); sums over a
// row run in f64, and weight/bias gradients are summed per block of rows and
// the blocks in order, so results do not depend on the thread count.

#include <cstddef>
#include <cstdint>

#include "backend/device_runtime.h"
#include "forge/dtype.h"
#include "forge/tensor.h"

namespace forge::cpu {

// dx = y * (g - sum(g * y)) per row of n (softmax), or dx = g - exp(y) * sum(g)
// (log_softmax, y the log-probabilities).
void softmax_backward(detail::DeviceRuntime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* y,
                      const std::byte* g, std::byte* dx, bool log);

// The gradients of layer_norm (rms = false) or rms_norm (rms = true) over
// rows of n, recomputing each row's mean and 1/std from x. w may be null (no
// weight); dw and db may be null (not wanted). dx may be null.
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
void norm_backward(detail::DeviceRuntime& rt, const NormBackward& p);

// The rows of a class loss's input [C], [N, C] or [N, C, d1, ..., dk]: every
// index but the class dim's, in row-major order (one row, N rows, or
// N * d1 * ... * dk rows, matching the target's elements), and where each
// starts. Row dims that are contiguous with each other are merged, so a
// packed [N, C] or a [B, V, T] view of [B, T, V] logits walks one row
// stride. Also the forward's (ops/loss.cpp) map of its input.
struct ClassRows {
  std::int64_t rows = 1, classes = 0, class_stride = 0;
  int rank = 0;  // row dims after merging
  std::int64_t size[kMaxRank] = {}, stride[kMaxRank] = {};

  ClassRows() = default;
  ClassRows(const Shape& shape, const Strides& strides);
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
void cross_entropy_backward(detail::DeviceRuntime& rt, const ClassLossBackward& p);
void nll_loss_backward(detail::DeviceRuntime& rt, const ClassLossBackward& p);

}  // namespace forge::cpu

namespace forge::detail {

// x with dropout's mask for `seed` applied (kept elements scaled by
// 1 / (1 - p)): the forward and, given the gradient, the backward of dropout
// share it, so the backward replays the exact mask. Defined in ops/attention.cpp
// beside the forward's hash.
Tensor dropout_with_seed(const Tensor& x, double p, std::uint64_t seed);

}  // namespace forge::detail
