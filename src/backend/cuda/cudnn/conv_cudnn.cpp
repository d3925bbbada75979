// conv2d and its backward through cuDNN 9's convolution API (built when
// CMake finds cuDNN: cmake/forge_cuda.cmake; else no_cudnn.cpp):
//   - descriptors from conv_plan.h: dense NCHW/NHWC views described in
//     place, other views packed into contiguous scratch, an output that is
//     not dense computed into scratch and copied out;
//   - algorithms from the cudnnGet*_v7 heuristics (no timing runs), the
//     first that succeeds within kMaxWorkspaceBytes, else the leanest;
//     workspace from the device pool (stream-ordered: released after
//     queuing);
//   - f32 runs without TF32 unless gemm_options.h allows it; f16/bf16 (the
//     ops widen them today) use tensor cores with f32 accumulation;
//   - one cuDNN handle per thread and device, set to the current stream at
//     each call (a handle must not be used by two threads at once).

#include "backend/cuda/conv_cudnn.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <unordered_map>

#include "backend/cuda/conv_plan.h"
#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/gemm_copy.h"
#include "backend/cuda/gemm_options.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

constexpr std::size_t kMaxWorkspaceBytes = std::size_t{1} << 30;
constexpr int kAlgoCandidates = 8;

void check_cudnn(cudnnStatus_t status, const char* op, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) [[likely]]
    return;
  if (status == CUDNN_STATUS_ALLOC_FAILED) FORGE_FAIL(out_of_memory, op, what, ": ", cudnnGetErrorString(status));
  FORGE_FAIL(device, op, what, ": ", cudnnGetErrorString(status));
}

// The calling thread's handle for the current device, bound to `stream`.
cudnnHandle_t handle_for(detail::DeviceRuntime& dev, cudaStream_t stream, const char* op) {
  struct Handles {
    std::unordered_map<int, cudnnHandle_t> by_device;
    ~Handles() {
      for (auto& [device, h] : by_device) cudnnDestroy(h);
    }
  };
  thread_local Handles handles;
  cudnnHandle_t& h = handles.by_device[runtime_of(dev).ordinal()];
  if (!h) check_cudnn(cudnnCreate(&h), op, "cudnnCreate");
  check_cudnn(cudnnSetStream(h, stream), op, "cudnnSetStream");
  return h;
}

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
struct Desc {
  T h = nullptr;
  explicit Desc(const char* op) { check_cudnn(Create(&h), op, "creating a cuDNN descriptor"); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() { Destroy(h); }
};
using TensorDesc = Desc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Desc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Desc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

// alpha = 1 and beta = 0 or 1 in the scaling type cuDNN wants for `dtype`.
struct Scalars {
  float f[2] = {1, 0};
  double d[2] = {1, 0};
  bool wide;
  explicit Scalars(DType dtype) : wide(dtype == DType::f64) {}
  const void* one() const { return wide ? static_cast<const void*>(&d[0]) : &f[0]; }
  const void* zero() const { return wide ? static_cast<const void*>(&d[1]) : &f[1]; }
};

void set_tensor(TensorDesc& d, DType dtype, const conv::Dims4& dims, const conv::Dims4& strides, const char* op) {
  const std::array<int, 4> n{int(dims[0]), int(dims[1]), int(dims[2]), int(dims[3])};
  const std::array<int, 4> s{int(strides[0]), int(strides[1]), int(strides[2]), int(strides[3])};
  check_cudnn(cudnnSetTensorNdDescriptor(d.h, data_type(dtype), 4, n.data(), s.data()), op, "a tensor descriptor");
}

void set_filter(FilterDesc& d, DType dtype, const conv::Dims4& dims, const char* op) {
  check_cudnn(cudnnSetFilter4dDescriptor(d.h, data_type(dtype), CUDNN_TENSOR_NCHW, int(dims[0]), int(dims[1]),
                                         int(dims[2]), int(dims[3])),
              op, "the filter descriptor");
}

bool plain_f32(DType dtype) { return dtype == DType::f32 && !allow_tf32(); }

void set_conv(ConvDesc& d, DType dtype, const conv::ConvArgs& a, const char* op) {
  check_cudnn(cudnnSetConvolution2dDescriptor(d.h, a.pad_h, a.pad_w, a.stride_h, a.stride_w, a.dilation_h, a.dilation_w,
                                              CUDNN_CROSS_CORRELATION,
                                              dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
              op, "the convolution descriptor");
  check_cudnn(cudnnSetConvolutionGroupCount(d.h, a.groups), op, "the group count");
  const cudnnMathType_t math = dtype == DType::f64 ? CUDNN_DEFAULT_MATH
                               : plain_f32(dtype)  ? CUDNN_FMA_MATH
                                                   : CUDNN_TENSOR_OP_MATH;
  check_cudnn(cudnnSetConvolutionMathType(d.h, math), op, "the math type");
}

// The heuristics' pick: the first candidate that succeeds within the
// workspace cap, else the successful one needing the least workspace.
template <typename Perf>
const Perf& pick(const Perf* perf, int count, const char* op) {
  const Perf* best = nullptr;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].memory <= kMaxWorkspaceBytes) return perf[i];
    if (!best || perf[i].memory < best->memory) best = &perf[i];
  }
  if (!best) FORGE_FAIL(device, op, "cuDNN has no algorithm for this convolution");
  return *best;
}

// The chosen algorithm's math type, except that plain f32 stays off TF32.
void use_math(ConvDesc& d, DType dtype, cudnnMathType_t math, const char* op) {
  if (plain_f32(dtype)) math = CUDNN_FMA_MATH;
  check_cudnn(cudnnSetConvolutionMathType(d.h, math), op, "the math type");
}

Ref<Buffer> workspace(detail::DeviceRuntime& dev, std::size_t bytes, const char* op) {
  return bytes ? dev.pool().acquire(bytes, op) : Ref<Buffer>{};
}
void* data_or_null(const Ref<Buffer>& b) { return b ? b->data() : nullptr; }

// An NCHW tensor as cuDNN will read it: in place, or packed into `holder`.
struct Described {
  const std::byte* data;
  conv::Dims4 strides;
};

StridedBlock nchw_block(const std::byte* data, const conv::Dims4& strides) {
  return StridedBlock{const_cast<std::byte*>(data), Strides{strides[0], strides[1]}, strides[2], strides[3]};
}

Described readable(detail::DeviceRuntime& dev, DType dtype, const conv::Dims4& dims, const std::byte* data,
                   const Strides& strides, Ref<Buffer>& holder, const char* op) {
  const conv::Dims4 s = conv::dims_of(strides);
  if (conv::layout_of(dims, s) != conv::Layout::pack) return {data, conv::descriptor_strides(dims, s)};
  const conv::Dims4 packed = conv::contiguous_strides(dims);
  holder = dev.pool().acquire(static_cast<std::size_t>(dims[0] * dims[1] * dims[2] * dims[3]) * dtype_size(dtype), op);
  copy_block(dev, dtype, Shape{dims[0], dims[1]}, dims[2], dims[3], nchw_block(holder->data(), packed),
             nchw_block(data, s), op);
  return {holder->data(), packed};
}

// The weight as contiguous NCHW (the filter descriptor has no strides):
// in place, or packed into `holder`.
const std::byte* dense_filter(detail::DeviceRuntime& dev, DType dtype, const conv::Dims4& dims, const std::byte* data,
                              const Strides& strides, Ref<Buffer>& holder, const char* op) {
  const conv::Dims4 s = conv::dims_of(strides);
  if (conv::layout_of(dims, s) == conv::Layout::nchw) return data;
  const conv::Dims4 packed = conv::contiguous_strides(dims);
  holder = dev.pool().acquire(static_cast<std::size_t>(dims[0] * dims[1] * dims[2] * dims[3]) * dtype_size(dtype), op);
  copy_block(dev, dtype, Shape{dims[0], dims[1]}, dims[2], dims[3], nchw_block(holder->data(), packed),
             nchw_block(data, s), op);
  return holder->data();
}

bool empty(const conv::Dims4& d) { return d[0] == 0 || d[1] == 0 || d[2] == 0 || d[3] == 0; }

void check_sizes(const conv::ConvShapes& s, const char* op) {
  FORGE_CHECK(conv::fits_cudnn(s.x) && conv::fits_cudnn(s.weight) && conv::fits_cudnn(s.y), device, op,
              "a tensor of this convolution passes cuDNN's int32 extents or 2^31 elements (input [", s.x[0], ", ",
              s.x[1], ", ", s.x[2], ", ", s.x[3], "])");
}

conv::ConvArgs args_of(const backend::Window2d& w, std::int64_t groups, const char* op) {
  const auto args = conv::conv_args(w, groups);
  FORGE_CHECK(args.has_value(), device, op, "padding, stride, dilation or groups pass cuDNN's int32 fields");
  return *args;
}

void conv2d(detail::DeviceRuntime& dev, const backend::Conv2dProblem& p) {
  const char* op = "conv2d";
  const conv::ConvShapes s = conv::shapes_of(p.win, p.out_channels, p.groups);
  if (empty(s.y)) return;
  const conv::Dims4 ys = conv::dims_of(p.out_strides);
  if (empty(s.x) || empty(s.weight)) {  // no products: y = bias, or zeros
    const StridedBlock bias{const_cast<std::byte*>(p.bias), Strides{0, p.bias_stride}, 0, 0};
    scale_block(dev, p.dtype, Shape{s.y[0], s.y[1]}, s.y[2], s.y[3], nchw_block(p.out, ys),
                p.bias ? bias : StridedBlock{}, 1.0, op);
    return;
  }
  check_sizes(s, op);
  const conv::ConvArgs args = args_of(p.win, p.groups, op);
  const cudaStream_t stream = stream_of(dev);
  const cudnnHandle_t h = handle_for(dev, stream, op);

  Ref<Buffer> x_pack, w_pack, y_stage, bias_pack;
  const Described x = readable(dev, p.dtype, s.x, p.x, p.x_strides, x_pack, op);
  const std::byte* w_data = dense_filter(dev, p.dtype, s.weight, p.weight, p.weight_strides, w_pack, op);
  const bool stage = conv::layout_of(s.y, ys) == conv::Layout::pack;
  const conv::Dims4 y_strides = stage ? conv::contiguous_strides(s.y) : conv::descriptor_strides(s.y, ys);
  if (stage)
    y_stage = dev.pool().acquire(static_cast<std::size_t>(s.y[0] * s.y[1] * s.y[2] * s.y[3]) * dtype_size(p.dtype), op);
  std::byte* y = stage ? y_stage->data() : p.out;

  TensorDesc xd(op), yd(op);
  FilterDesc wd(op);
  ConvDesc cd(op);
  set_tensor(xd, p.dtype, s.x, x.strides, op);
  set_tensor(yd, p.dtype, s.y, y_strides, op);
  set_filter(wd, p.dtype, s.weight, op);
  set_conv(cd, p.dtype, args, op);

  cudnnConvolutionFwdAlgoPerf_t perf[kAlgoCandidates];
  int found = 0;
  check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(h, xd.h, wd.h, cd.h, yd.h, kAlgoCandidates, &found, perf), op,
              "cudnnGetConvolutionForwardAlgorithm_v7");
  const cudnnConvolutionFwdAlgoPerf_t& algo = pick(perf, found, op);
  use_math(cd, p.dtype, algo.mathType, op);
  std::size_t ws_bytes = 0;
  check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(h, xd.h, wd.h, cd.h, yd.h, algo.algo, &ws_bytes), op,
              "cudnnGetConvolutionForwardWorkspaceSize");
  const Ref<Buffer> ws = workspace(dev, ws_bytes, op);
  const Scalars k(p.dtype);
  check_cudnn(cudnnConvolutionForward(h, k.one(), xd.h, x.data, wd.h, w_data, cd.h, algo.algo, data_or_null(ws),
                                      ws_bytes, k.zero(), yd.h, y),
              op, "cudnnConvolutionForward");

  if (p.bias) {
    const std::byte* bias = p.bias;
    if (p.bias_stride != 1) {
      bias_pack = dev.pool().acquire(static_cast<std::size_t>(s.y[1]) * dtype_size(p.dtype), op);
      copy_block(dev, p.dtype, Shape{}, 1, s.y[1], StridedBlock{bias_pack->data(), {}, 0, 1},
                 StridedBlock{const_cast<std::byte*>(p.bias), {}, 0, p.bias_stride}, op);
      bias = bias_pack->data();
    }
    TensorDesc bd(op);
    set_tensor(bd, p.dtype, {1, s.y[1], 1, 1}, {s.y[1], 1, 1, 1}, op);
    check_cudnn(cudnnAddTensor(h, k.one(), bd.h, bias, k.one(), yd.h, y), op, "cudnnAddTensor (bias)");
  }
  if (stage)
    copy_block(dev, p.dtype, Shape{s.y[0], s.y[1]}, s.y[2], s.y[3], nchw_block(p.out, ys), nchw_block(y, y_strides),
               op);
}

void zero_contiguous(detail::DeviceRuntime& dev, DType dtype, std::byte* data, const conv::Dims4& dims,
                     const char* op) {
  if (!data || empty(dims)) return;
  check(cudaMemsetAsync(data, 0, static_cast<std::size_t>(dims[0] * dims[1] * dims[2] * dims[3]) * dtype_size(dtype),
                        stream_of(dev)),
        op, "cudaMemsetAsync");
}

void conv2d_backward(detail::DeviceRuntime& dev, const backend::Conv2dBackwardProblem& p) {
  const char* op = "conv2d_backward";
  const conv::ConvShapes s = conv::shapes_of(p.win, p.out_channels, p.groups);
  if (empty(s.x) || empty(s.weight) || empty(s.y)) {  // nothing flows: the gradients are zero
    zero_contiguous(dev, p.dtype, p.grad_x, s.x, op);
    zero_contiguous(dev, p.dtype, p.grad_weight, s.weight, op);
    return;
  }
  check_sizes(s, op);
  const conv::ConvArgs args = args_of(p.win, p.groups, op);
  const cudaStream_t stream = stream_of(dev);
  const cudnnHandle_t h = handle_for(dev, stream, op);
  const Scalars k(p.dtype);

  Ref<Buffer> dy_pack;
  const Described dy = readable(dev, p.dtype, s.y, p.grad_out, p.grad_out_strides, dy_pack, op);
  TensorDesc dyd(op);
  set_tensor(dyd, p.dtype, s.y, dy.strides, op);
  FilterDesc wd(op);
  set_filter(wd, p.dtype, s.weight, op);
  const conv::Dims4 dense_x = conv::contiguous_strides(s.x);

  if (p.grad_x) {
    Ref<Buffer> w_pack;
    const std::byte* w_data = dense_filter(dev, p.dtype, s.weight, p.weight, p.weight_strides, w_pack, op);
    TensorDesc dxd(op);
    set_tensor(dxd, p.dtype, s.x, dense_x, op);
    ConvDesc cd(op);
    set_conv(cd, p.dtype, args, op);
    cudnnConvolutionBwdDataAlgoPerf_t perf[kAlgoCandidates];
    int found = 0;
    check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd.h, dyd.h, cd.h, dxd.h, kAlgoCandidates, &found, perf),
                op, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    const cudnnConvolutionBwdDataAlgoPerf_t& algo = pick(perf, found, op);
    use_math(cd, p.dtype, algo.mathType, op);
    std::size_t ws_bytes = 0;
    check_cudnn(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd.h, dyd.h, cd.h, dxd.h, algo.algo, &ws_bytes), op,
                "cudnnGetConvolutionBackwardDataWorkspaceSize");
    const Ref<Buffer> ws = workspace(dev, ws_bytes, op);
    check_cudnn(cudnnConvolutionBackwardData(h, k.one(), wd.h, w_data, dyd.h, dy.data, cd.h, algo.algo,
                                             data_or_null(ws), ws_bytes, k.zero(), dxd.h, p.grad_x),
                op, "cudnnConvolutionBackwardData");
  }

  if (p.grad_weight) {
    Ref<Buffer> x_pack;
    const Described x = readable(dev, p.dtype, s.x, p.x, p.x_strides, x_pack, op);
    TensorDesc xd(op);
    set_tensor(xd, p.dtype, s.x, x.strides, op);
    ConvDesc cd(op);
    set_conv(cd, p.dtype, args, op);
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kAlgoCandidates];
    int found = 0;
    check_cudnn(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd.h, dyd.h, cd.h, wd.h, kAlgoCandidates, &found, perf), op,
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    const cudnnConvolutionBwdFilterAlgoPerf_t& algo = pick(perf, found, op);
    use_math(cd, p.dtype, algo.mathType, op);
    std::size_t ws_bytes = 0;
    check_cudnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd.h, dyd.h, cd.h, wd.h, algo.algo, &ws_bytes), op,
                "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    const Ref<Buffer> ws = workspace(dev, ws_bytes, op);
    check_cudnn(cudnnConvolutionBackwardFilter(h, k.one(), xd.h, x.data, dyd.h, dy.data, cd.h, algo.algo,
                                               data_or_null(ws), ws_bytes, k.zero(), wd.h, p.grad_weight),
                op, "cudnnConvolutionBackwardFilter");
  }
}

}  // namespace

void fill_cudnn_conv(backend::ConvKernels& k) {
  k.conv2d = {conv2d, backend::kFloatDTypes};
  k.conv2d_backward = {conv2d_backward, backend::kFloatDTypes};
}

}  // namespace forge::cuda
