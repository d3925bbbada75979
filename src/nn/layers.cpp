#include "forge/nn/layers.h"

#include <cmath>

#include "forge/nn/init.h"
#include "nn/owned.h"

namespace forge::nn {
namespace {

// A weight of the module's own, initialized as libtorch's Linear and Conv2d:
// kaiming_uniform(a = sqrt(5)) is uniform(±1 / sqrt(fan_in)) too.
Tensor default_weight(ExecContext& ctx, const Shape& shape, const char* op) {
  Tensor w = detail::owned_empty(ctx, shape, DType::f32, op);
  init::kaiming_uniform_(w, std::sqrt(5.0));
  return w;
}

Tensor default_bias(ExecContext& ctx, std::int64_t n, std::int64_t fan_in, const char* op) {
  Tensor b = detail::owned_empty(ctx, Shape{n}, DType::f32, op);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  init::uniform_(b, -bound, bound);
  return b;
}

Tensor filled(ExecContext& ctx, const Shape& shape, double value, const char* op) {
  Tensor t = detail::owned_empty(ctx, shape, DType::f32, op);
  init::constant_(t, value);
  return t;
}

void check_normalized_shape(const Shape& shape, const char* op) {
  FORGE_CHECK(shape.rank() >= 1, invalid_argument, op, "normalized_shape must have at least one dim");
  for (std::int64_t d : shape)
    FORGE_CHECK(d > 0, invalid_argument, op, "normalized_shape ", shape, " must have positive extents");
}

}  // namespace

Linear::Linear(ExecContext& ctx, std::int64_t in_features, std::int64_t out_features, bool bias) try
    : in_(in_features), out_(out_features), has_bias_(bias) {
  const char* op = "nn.Linear";
  FORGE_CHECK(in_features > 0 && out_features > 0, invalid_argument, op, "features (in ", in_features, ", out ",
              out_features, ") must be positive");
  register_parameter("weight", default_weight(ctx, Shape{out_features, in_features}, op));
  if (bias) register_parameter("bias", default_bias(ctx, out_features, in_features, op));
}
FORGE_CATCH_OOM("nn.Linear")

Tensor Linear::forward(const Tensor& x) { return linear(x, weight(), bias()); }

Conv2d::Conv2d(ExecContext& ctx, std::int64_t in_channels, std::int64_t out_channels, Size2 kernel,
               Conv2dOptions options) try
    : options_(options) {
  const char* op = "nn.Conv2d";
  FORGE_CHECK(in_channels > 0 && out_channels > 0, invalid_argument, op, "channels (in ", in_channels, ", out ",
              out_channels, ") must be positive");
  FORGE_CHECK(kernel.h > 0 && kernel.w > 0, invalid_argument, op, "kernel (", kernel.h, ", ", kernel.w,
              ") must be positive");
  FORGE_CHECK(options.groups > 0 && in_channels % options.groups == 0 && out_channels % options.groups == 0,
              invalid_argument, op, "groups ", options.groups, " must divide in_channels ", in_channels,
              " and out_channels ", out_channels);
  FORGE_CHECK(options.stride.h > 0 && options.stride.w > 0 && options.dilation.h > 0 && options.dilation.w > 0 &&
                  options.padding.h >= 0 && options.padding.w >= 0,
              invalid_argument, op, "stride and dilation must be positive and padding non-negative");
  const std::int64_t per_group = in_channels / options.groups;
  register_parameter("weight", default_weight(ctx, Shape{out_channels, per_group, kernel.h, kernel.w}, op));
  if (options.bias) register_parameter("bias", default_bias(ctx, out_channels, per_group * kernel.h * kernel.w, op));
}
FORGE_CATCH_OOM("nn.Conv2d")

Tensor Conv2d::forward(const Tensor& x) try {
  const forge::Conv2dOptions o{.stride = options_.stride.array(),
                               .padding = options_.padding.array(),
                               .dilation = options_.dilation.array(),
                               .groups = options_.groups};
  return conv2d(x, weight(), bias(), o);
}
FORGE_CATCH_OOM("nn.Conv2d")

Embedding::Embedding(ExecContext& ctx, std::int64_t num_embeddings, std::int64_t embedding_dim,
                     std::optional<std::int64_t> padding_idx) try {
  const char* op = "nn.Embedding";
  FORGE_CHECK(num_embeddings > 0 && embedding_dim > 0, invalid_argument, op, "sizes (", num_embeddings, ", ",
              embedding_dim, ") must be positive");
  if (padding_idx) {
    const std::int64_t p = *padding_idx;
    FORGE_CHECK(p >= -num_embeddings && p < num_embeddings, out_of_range, op, "padding_idx ", p,
                " is out of range for ", num_embeddings, " embeddings");
    padding_idx_ = p < 0 ? p + num_embeddings : p;
  }
  Tensor w = detail::owned_empty(ctx, Shape{num_embeddings, embedding_dim}, DType::f32, op);
  init::normal_(w);
  if (padding_idx_) w.select(0, *padding_idx_).zero_();
  register_parameter("weight", w);
}
FORGE_CATCH_OOM("nn.Embedding")

Tensor Embedding::forward(const Tensor& indices) try { return embedding(weight(), indices, padding_idx_); }
FORGE_CATCH_OOM("nn.Embedding")

LayerNorm::LayerNorm(ExecContext& ctx, const Shape& normalized_shape, double eps, bool elementwise_affine) try
    : shape_(normalized_shape), eps_(eps), affine_(elementwise_affine) {
  const char* op = "nn.LayerNorm";
  check_normalized_shape(normalized_shape, op);
  FORGE_CHECK(eps >= 0, invalid_argument, op, "eps ", eps, " is negative");
  if (!affine_) return;
  register_parameter("weight", filled(ctx, normalized_shape, 1.0, op));
  register_parameter("bias", filled(ctx, normalized_shape, 0.0, op));
}
FORGE_CATCH_OOM("nn.LayerNorm")

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, shape_, weight(), bias(), eps_); }

RMSNorm::RMSNorm(ExecContext& ctx, const Shape& normalized_shape, std::optional<double> eps,
                 bool elementwise_affine) try
    : shape_(normalized_shape), eps_(eps), affine_(elementwise_affine) {
  const char* op = "nn.RMSNorm";
  check_normalized_shape(normalized_shape, op);
  FORGE_CHECK(!eps || *eps >= 0, invalid_argument, op, "eps ", eps.value_or(0), " is negative");
  if (affine_) register_parameter("weight", filled(ctx, normalized_shape, 1.0, op));
}
FORGE_CATCH_OOM("nn.RMSNorm")

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, shape_, weight(), eps_); }

Dropout::Dropout(double p) : p_(p) {
  FORGE_CHECK(p >= 0 && p <= 1, invalid_argument, "nn.Dropout", "probability ", p, " is outside [0, 1]");
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training()); }

MaxPool2d::MaxPool2d(Size2 kernel, Size2 stride, Size2 padding)
    : options_{.kernel = kernel.array(), .stride = stride.array(), .padding = padding.array()} {
  FORGE_CHECK(kernel.h > 0 && kernel.w > 0 && stride.h >= 0 && stride.w >= 0 && padding.h >= 0 && padding.w >= 0,
              invalid_argument, "nn.MaxPool2d", "kernel (", kernel.h, ", ", kernel.w,
              ") must be positive, stride and padding non-negative");
}

}  // namespace forge::nn
