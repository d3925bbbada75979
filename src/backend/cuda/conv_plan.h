#pragma once
// How the conv family's problems (backend/kernels/conv.h) become cuDNN
// descriptors. Plain C++ (no cuDNN header), so the mapping is tested on the
// host (tests/cuda_gemm_plan_test.cpp, "[cuda-plan]"); cudnn/conv_cudnn.cpp
// runs it.
//
//   - Tensors are NCHW with any strides; cuDNN takes a 4-d tensor
//     descriptor with explicit strides, but only dense layouts (NCHW or
//     NHWC, the channels-last one) are safe across its engines. Any other
//     view (a slice with gaps, an expanded dimension) is copied into a
//     contiguous NCHW scratch tensor first. A stride of an extent-1
//     dimension is never followed, so it does not decide.
//   - The filter descriptor has no strides: a weight that is not
//     contiguous NCHW is packed.
//   - cuDNN's descriptor fields are int: a problem whose extents, padding,
//     strides or dilations pass int32, or whose tensors pass 2^31 elements,
//     is refused with ErrorCode::device.

#include <array>
#include <cstdint>
#include <optional>

#include "backend/kernels/conv.h"

namespace forge::cuda::conv {

using Dims4 = std::array<std::int64_t, 4>;

// The output extent of one axis of a window sweep (libtorch's formula, no
// ceil mode): floor((size + 2 pad - dilation (kernel - 1) - 1) / stride) + 1.
inline std::int64_t out_extent(std::int64_t size, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                               std::int64_t dilation) noexcept {
  return (size + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

inline Dims4 contiguous_strides(const Dims4& dims) noexcept {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

// Channels-last (NHWC in memory) strides of an NCHW-indexed tensor.
inline Dims4 channels_last_strides(const Dims4& dims) noexcept {
  return {dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]};
}

// Whether `strides` equal `expected` on every dimension of extent > 1.
inline bool same_layout(const Dims4& dims, const Dims4& strides, const Dims4& expected) noexcept {
  for (int d = 0; d < 4; ++d)
    if (dims[d] > 1 && strides[d] != expected[d]) return false;
  return true;
}

enum class Layout : std::uint8_t { nchw, nhwc, pack };

// How cuDNN reads an NCHW-indexed tensor with these strides.
inline Layout layout_of(const Dims4& dims, const Dims4& strides) noexcept {
  if (same_layout(dims, strides, contiguous_strides(dims))) return Layout::nchw;
  if (same_layout(dims, strides, channels_last_strides(dims))) return Layout::nhwc;
  return Layout::pack;
}

// The strides to describe the tensor to cuDNN with: its own (extent-1
// dimensions given the dense layout's, which cuDNN checks) or, for `pack`,
// the contiguous scratch copy's.
inline Dims4 descriptor_strides(const Dims4& dims, const Dims4& strides) noexcept {
  switch (layout_of(dims, strides)) {
    case Layout::nhwc:
      return channels_last_strides(dims);
    default:
      return contiguous_strides(dims);
  }
}

inline Dims4 dims_of(const Strides& s) noexcept { return {s[0], s[1], s[2], s[3]}; }

// The three tensors of a convolution, as NCHW extents.
struct ConvShapes {
  Dims4 x, weight, y;
};

inline ConvShapes shapes_of(const backend::Window2d& w, std::int64_t out_channels, std::int64_t groups) noexcept {
  return {{w.n, w.c, w.h, w.w},
          {out_channels, w.c / groups, w.kernel_h, w.kernel_w},
          {w.n, out_channels, w.out_h, w.out_w}};
}

// cuDNN's convolution descriptor fields (cudnnSetConvolution2dDescriptor's
// order), or nullopt when one passes int.
struct ConvArgs {
  int pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, groups;
};

inline bool fits_int(std::int64_t v) noexcept { return v >= 0 && v <= 2147483647; }

inline std::optional<ConvArgs> conv_args(const backend::Window2d& w, std::int64_t groups) noexcept {
  for (const std::int64_t v : {w.pad_h, w.pad_w, w.stride_h, w.stride_w, w.dilation_h, w.dilation_w, groups})
    if (!fits_int(v)) return std::nullopt;
  return ConvArgs{int(w.pad_h),      int(w.pad_w),      int(w.stride_h), int(w.stride_w),
                  int(w.dilation_h), int(w.dilation_w), int(groups)};
}

// Whether cuDNN can describe a tensor of these extents (int fields, fewer
// than 2^31 elements).
inline bool fits_cudnn(const Dims4& dims) noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : dims) {
    if (!fits_int(d)) return false;
    if (d != 0 && n > 2147483647 / d) return false;
    n *= d;
  }
  return true;
}

}  // namespace forge::cuda::conv
