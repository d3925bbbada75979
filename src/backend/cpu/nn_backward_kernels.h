#pragma once
// Unchecked CPU kernels of the neural-network ops' gradients: the row-wise
// softmax and normalization backwards and the fused class-loss backwards.
// Rows are contiguous and f32 or f64 (callers pack and widen); sums over a
// row run in f64, and weight/bias gradients are summed per block of rows and
// the blocks in order, so results do not depend on the thread count.

#include <cstddef>
#include <cstdint>

#include "forge/dtype.h"
#include "forge/runtime.h"
#include "forge/tensor.h"

namespace forge::cpu {

// dx = y * (g - sum(g * y)) per row of n (softmax), or dx = g - exp(y) * sum(g)
// (log_softmax, y the log-probabilities).
void softmax_backward(Runtime& rt, DType dtype, std::int64_t rows, std::int64_t n, const std::byte* y,
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
void norm_backward(Runtime& rt, const NormBackward& p);

// The gradient of cross_entropy or nll_loss with respect to its [rows, classes]
// input (read through row stride rs and column stride cs), written packed
// into dx. Row i's output gradient is g[i * g_stride] (g_stride 0: one value
// for all rows), divided by the number of rows not ignored when `mean`.
// cross_entropy: (softmax(x_i) - q_i) * scale with q_i the target one-hot
// smoothed by label_smoothing; nll_loss: -scale at the target class.
struct ClassLossBackward {
  DType dtype = DType::f32;
  std::int64_t rows = 0, classes = 0, rs = 0, cs = 1;
  const std::byte* x = nullptr;  // unused by nll_loss
  const std::int64_t* targets = nullptr;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0;
  const std::byte* g = nullptr;
  std::int64_t g_stride = 0;
  bool mean = false;
  std::byte* dx = nullptr;
};
void cross_entropy_backward(Runtime& rt, const ClassLossBackward& p);
void nll_loss_backward(Runtime& rt, const ClassLossBackward& p);

}  // namespace forge::cpu

namespace forge::detail {

// x with dropout's mask for `seed` applied (kept elements scaled by
// 1 / (1 - p)): the forward and, given the gradient, the backward of dropout
// share it, so the backward replays the exact mask. Defined in ops/attention.cpp
// beside the forward's hash.
Tensor dropout_with_seed(const Tensor& x, double p, std::uint64_t seed);

}  // namespace forge::detail
