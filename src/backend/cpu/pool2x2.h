#pragma once
// AVX-512 rows of the 2x2, stride-2 max pool (the pool most CNNs use), f32,
// forward and gradient. conv_kernels.cpp's general loops decide the window
// per output and run at a few GB/s; these take 16 outputs per step. Without
// AVX-512 at compile time `pool2x2_available()` is false and nothing here is
// called. Unchecked: callers pass unit-strided rows.

#include <cstdint>

namespace forge::cpu {

bool pool2x2_available() noexcept;

// dst[ow] = max of r0[2ow], r0[2ow + 1], r1[2ow], r1[2ow + 1] for ow in
// [0, out_w); a NaN in a window wins (libtorch's rule).
void max_pool_2x2_row(std::int64_t out_w, const float* r0, const float* r1, float* dst) noexcept;

// The gradient of those outputs: g[ow] goes to the first of a window's four
// inputs equal to its max (row-major order), the other three get zero; d0
// and d1 are the gradient rows under r0 and r1 (2 * out_w values each).
// Returns false, having written nothing meaningful, when a window holds a
// NaN: the caller redoes the row with its scalar rule.
bool max_pool_2x2_grad_row(std::int64_t out_w, const float* r0, const float* r1, const float* g, float* d0,
                           float* d1) noexcept;

}  // namespace forge::cpu
