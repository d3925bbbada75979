#pragma once
// The Fashion-MNIST CNN shared by train_fashion_mnist and infer_fashion_mnist:
//
//   conv 1->32 3x3 pad 1, ReLU, maxpool 2     [B, 32, 14, 14]
//   conv 32->64 3x3 pad 1, ReLU, maxpool 2    [B, 64, 7, 7]
//   flatten, linear 3136->128, ReLU, linear 128->10
//
// Parameters are plain tensors named as nn modules name them ("conv1.weight",
// "fc2.bias"), so state_dict() is what an nn::Module version of this model
// would save. Also the dataset helpers both programs use.

#include <forge/forge.h>
#include <forge/io/idx.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fashion_mnist {

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kClassNames[10] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                "Bag",         "Ankle boot"};

// u8 pixels [B, 28, 28] -> f32 [B, 1, 28, 28], standardized with the
// training set's pixel mean and standard deviation: the DataLoader's transform.
inline constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
inline forge::Tensor to_input(const forge::Tensor& pixels) {
  return (pixels.to(forge::DType::f32) * (1.0 / (255.0 * kPixelStd)) - kPixelMean / kPixelStd)
      .unsqueeze(1);
}

struct Split {
  forge::Tensor images;  // u8 [N, 28, 28]
  forge::Tensor labels;  // i64 [N]

  // The first n samples (views), or all of them when n is 0 or past the end.
  Split first(std::int64_t n) const {
    if (n <= 0 || n >= images.size(0)) return *this;
    return {images.narrow(0, 0, n), labels.narrow(0, 0, n)};
  }
};

// "train" or "t10k" from dir; the first `limit` samples when limit > 0.
inline Split load_split(forge::ExecContext& ctx, const std::string& dir, const std::string& split,
                        std::int64_t limit = 0) {
  const Split s{
      forge::io::load_idx(ctx, dir + "/" + split + "-images-idx3-ubyte.gz"),
      forge::io::load_idx(ctx, dir + "/" + split + "-labels-idx1-ubyte.gz").to(forge::DType::i64)};
  return s.first(limit);
}

class Cnn {
 public:
  // PyTorch's default initialization: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
  // weights and biases, drawn from ctx's seeded generator.
  explicit Cnn(forge::ExecContext& ctx)
      : conv1_w(parameter(ctx, {32, 1, 3, 3}, 9)),
        conv1_b(parameter(ctx, {32}, 9)),
        conv2_w(parameter(ctx, {64, 32, 3, 3}, 32 * 9)),
        conv2_b(parameter(ctx, {64}, 32 * 9)),
        fc1_w(parameter(ctx, {128, 3136}, 3136)),
        fc1_b(parameter(ctx, {128}, 3136)),
        fc2_w(parameter(ctx, {10, 128}, 128)),
        fc2_b(parameter(ctx, {10}, 128)) {}

  // x: f32 [B, 1, 28, 28] -> logits [B, 10].
  forge::Tensor forward(const forge::Tensor& x) const {
    const forge::Conv2dOptions same{.padding = {1, 1}};
    forge::Tensor h = forge::max_pool2d(forge::relu(forge::conv2d(x, conv1_w, conv1_b, same)));
    h = forge::max_pool2d(forge::relu(forge::conv2d(h, conv2_w, conv2_b, same)));
    h = forge::relu(forge::linear(h.flatten(1), fc1_w, fc1_b));
    return forge::linear(h, fc2_w, fc2_b);
  }

  std::vector<forge::Tensor> parameters() const {
    std::vector<forge::Tensor> out;
    for (const auto& [name, t] : named()) out.push_back(*t);
    return out;
  }

  forge::StateDict state_dict() const {
    forge::StateDict out;
    for (const auto& [name, t] : named()) out.emplace(name, t->detach());
    return out;
  }

  // Copies every tensor of `dict` into the parameter of the same name; names
  // and shapes must match exactly (strict, as nn::Module's default).
  void load_state_dict(const forge::StateDict& dict) {
    FORGE_CHECK(dict.size() == named().size(), invalid_argument, "load_state_dict", "expected ",
                named().size(), " tensors, got ", dict.size());
    forge::autograd::NoGradGuard no_grad;
    for (auto& [name, t] : named()) {
      const auto it = dict.find(name);
      FORGE_CHECK(it != dict.end(), invalid_argument, "load_state_dict", "missing tensor '", name,
                  "'");
      FORGE_CHECK(it->second.shape() == t->shape(), shape, "load_state_dict", "'", name,
                  "' has shape ", it->second.shape(), ", the model expects ", t->shape());
      t->copy_(it->second);
    }
  }

  forge::Tensor conv1_w, conv1_b, conv2_w, conv2_b, fc1_w, fc1_b, fc2_w, fc2_b;

 private:
  std::vector<std::pair<std::string, const forge::Tensor*>> named() const {
    return {{"conv1.weight", &conv1_w}, {"conv1.bias", &conv1_b}, {"conv2.weight", &conv2_w},
            {"conv2.bias", &conv2_b},   {"fc1.weight", &fc1_w},   {"fc1.bias", &fc1_b},
            {"fc2.weight", &fc2_w},     {"fc2.bias", &fc2_b}};
  }
  std::vector<std::pair<std::string, forge::Tensor*>> named() {
    return {{"conv1.weight", &conv1_w}, {"conv1.bias", &conv1_b}, {"conv2.weight", &conv2_w},
            {"conv2.bias", &conv2_b},   {"fc1.weight", &fc1_w},   {"fc1.bias", &fc1_b},
            {"fc2.weight", &fc2_w},     {"fc2.bias", &fc2_b}};
  }

  // A leaf in memory the model owns (DESIGN §1: weights never come from the
  // context's transient pool), filled with U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  static forge::Tensor parameter(forge::ExecContext& ctx, const forge::Shape& shape,
                                 std::int64_t fan_in) {
    auto storage = std::make_shared<std::vector<float>>(static_cast<std::size_t>(shape.numel()));
    forge::Tensor t = ctx.from_blob(storage->data(), shape, forge::DType::f32, [storage] {});
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    t.copy_(ctx.rand(shape) * (2 * bound) - bound);
    return t.requires_grad_();
  }
};

// ---- checkpoints: safetensors (forge/io/safetensors.h) ----
inline void save_checkpoint(const std::string& path, const forge::StateDict& dict) {
  forge::io::save_safetensors(path, dict, {{"model", "fashion_mnist_cnn"}});
}

// The tensors view the file's mapping (no copy); load_state_dict copies them
// into the model's own weights.
inline forge::StateDict load_checkpoint(forge::ExecContext& ctx, const std::string& path) {
  return forge::io::load_safetensors(ctx, path);
}

// Accuracy of `model` on a split, in batches, recording nothing (and with no
// exec scope, so each intermediate is released as soon as the next op ran).
inline double evaluate(const Cnn& model, const Split& split, std::int64_t batch_size = 500) {
  forge::autograd::NoGradGuard no_grad;
  std::int64_t correct = 0;
  const std::int64_t n = split.images.size(0);
  for (std::int64_t start = 0; start < n; start += batch_size) {
    const std::int64_t rows = std::min(batch_size, n - start);
    const forge::Tensor logits = model.forward(to_input(split.images.narrow(0, start, rows)));
    const forge::Tensor hits = forge::argmax(logits, 1) == split.labels.narrow(0, start, rows);
    correct += hits.to(forge::DType::i64).sum().item<std::int64_t>();
  }
  return n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
}

}  // namespace fashion_mnist
