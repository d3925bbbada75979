#pragma once
// Parameter initializers, as torch.nn.init. Each writes its tensor in place
// (any floating dtype, any layout), without recording, drawing from the
// seeded generator of the tensor's context, so ctx.manual_seed(s) replays
// them. Each returns the tensor it wrote.

#include <cstdint>
#include <utility>

#include "forge/tensor.h"

namespace forge::nn::init {

enum class FanMode { fan_in, fan_out };
enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu, selu };

// The recommended gain for a nonlinearity (param: leaky_relu's negative slope).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
// (fan_in, fan_out) of a weight of rank >= 2: [out, in, *receptive field].
std::pair<std::int64_t, std::int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor uniform_(const Tensor& t, double a = 0.0, double b = 1.0);
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);

// He et al.: bound = gain * sqrt(3 / fan), std = gain / sqrt(fan), gain from
// the nonlinearity with a as leaky_relu's slope.
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                       Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
// Glorot & Bengio: bound = gain * sqrt(6 / (fan_in + fan_out)), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0);
Tensor xavier_normal_(const Tensor& t, double gain = 1.0);

}  // namespace forge::nn::init
