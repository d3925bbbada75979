#pragma once
// The standard layers. Each checks its configuration when built and its
// input in forward (through the functional op it calls: forge::linear,
// forge::conv2d, ...). Weights are initialized as libtorch does, drawing from
// the context's seeded generator.

#include <array>
#include <cstdint>
#include <optional>

#include "forge/exec_context.h"
#include "forge/nn/module.h"
#include "forge/ops.h"

namespace forge::nn {

// A pair of extents (height, width); a single number means both.
struct Size2 {
  std::int64_t h = 0;
  std::int64_t w = 0;
  constexpr Size2(std::int64_t both) noexcept : h(both), w(both) {}  // NOLINT(google-explicit-constructor)
  constexpr Size2(std::int64_t height, std::int64_t width) noexcept : h(height), w(width) {}
  std::array<std::int64_t, 2> array() const noexcept { return {h, w}; }
};

// y = x W^T + b; W [out, in] kaiming_uniform(a = sqrt(5)), b uniform(±1 / sqrt(in)).
class Linear : public Module {
 public:
  Linear(ExecContext& ctx, std::int64_t in_features, std::int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Linear"; }
  const Tensor& weight() const { return parameter("weight"); }
  Tensor bias() const { return has_bias_ ? parameter("bias") : Tensor(); }
  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }

 private:
  std::int64_t in_, out_;
  bool has_bias_;
};

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  std::int64_t groups = 1;
  bool bias = true;
};

// NCHW convolution; W [out, in / groups, kH, kW] initialized as Linear with fan_in = in / groups * kH * kW.
class Conv2d : public Module {
 public:
  Conv2d(ExecContext& ctx, std::int64_t in_channels, std::int64_t out_channels, Size2 kernel,
         Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Conv2d"; }
  const Tensor& weight() const { return parameter("weight"); }
  Tensor bias() const { return options_.bias ? parameter("bias") : Tensor(); }
  const Conv2dOptions& options() const noexcept { return options_; }

 private:
  Conv2dOptions options_;
};

// A lookup table [num_embeddings, dim] initialized from N(0, 1); forward takes
// integer indices. As in libtorch, row padding_idx (negative counts from the
// end) starts at zeros and gets no gradient.
class Embedding : public Module {
 public:
  Embedding(ExecContext& ctx, std::int64_t num_embeddings, std::int64_t embedding_dim,
            std::optional<std::int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  const char* type_name() const override { return "Embedding"; }
  const Tensor& weight() const { return parameter("weight"); }
  // The padding row, in [0, num_embeddings), if any.
  std::optional<std::int64_t> padding_idx() const { return padding_idx_; }

 private:
  std::optional<std::int64_t> padding_idx_;
};

// Normalizes over the trailing normalized_shape; weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  LayerNorm(ExecContext& ctx, const Shape& normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  LayerNorm(ExecContext& ctx, std::int64_t dim, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNorm(ctx, Shape{dim}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "LayerNorm"; }
  Tensor weight() const { return affine_ ? parameter("weight") : Tensor(); }
  Tensor bias() const { return affine_ ? parameter("bias") : Tensor(); }

 private:
  Shape shape_;
  double eps_;
  bool affine_;
};

// x / sqrt(mean(x^2) + eps) * weight; weight ones; eps defaults to the dtype's epsilon.
class RMSNorm : public Module {
 public:
  RMSNorm(ExecContext& ctx, const Shape& normalized_shape, std::optional<double> eps = std::nullopt,
          bool elementwise_affine = true);
  RMSNorm(ExecContext& ctx, std::int64_t dim, std::optional<double> eps = std::nullopt, bool elementwise_affine = true)
      : RMSNorm(ctx, Shape{dim}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "RMSNorm"; }
  Tensor weight() const { return affine_ ? parameter("weight") : Tensor(); }

 private:
  Shape shape_;
  std::optional<double> eps_;
  bool affine_;
};

// Zeroes elements with probability p while training (scaling the rest by 1 / (1 - p)); the identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  const char* type_name() const override { return "Dropout"; }
  double p() const noexcept { return p_; }

 private:
  double p_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  const char* type_name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::none) : approximate_(approximate) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate_); }
  const char* type_name() const override { return "GELU"; }

 private:
  GeluApproximation approximate_;
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  const char* type_name() const override { return "SiLU"; }
};

// Flattens dims start_dim..end_dim (by default everything after the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(std::int64_t start_dim = 1, std::int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  const char* type_name() const override { return "Flatten"; }

 private:
  std::int64_t start_, end_;
};

// Max over kernel windows of NCHW input; stride 0 means the kernel size.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel, Size2 stride = 0, Size2 padding = 0);
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options_); }
  const char* type_name() const override { return "MaxPool2d"; }

 private:
  Pool2dOptions options_;
};

}  // namespace forge::nn
