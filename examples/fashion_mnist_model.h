#pragma once
// The Fashion-MNIST CNN shared by train_fashion_mnist and infer_fashion_mnist:
//
//   conv 1->32 3x3 pad 1, ReLU, maxpool 2     [B, 32, 14, 14]
//   conv 32->64 3x3 pad 1, ReLU, maxpool 2    [B, 64, 7, 7]
//   flatten, linear 3136->128, ReLU, linear 128->10
//
// Also the dataset, checkpoint and device helpers both programs use.

#include <forge/forge.h>
#include <forge/io/idx.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fashion_mnist {

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kClassNames[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// u8 pixels [B, 28, 28] -> f32 [B, 1, 28, 28], standardized with the
// training set's pixel mean and standard deviation: the DataLoader's transform.
inline constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
inline forge::Tensor to_input(const forge::Tensor& pixels) {
  return (pixels.to(forge::DType::f32) * (1.0 / (255.0 * kPixelStd)) - kPixelMean / kPixelStd).unsqueeze(1);
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

// "cpu", "cuda" or "cuda:N" (--device); nullopt for anything else.
inline std::optional<forge::Device> parse_device(const std::string& name) {
  if (name == "cpu") return forge::Device::cpu();
  if (name == "cuda") return forge::Device::cuda(0);
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.find_first_not_of("0123456789", 5) == std::string::npos)
    return forge::Device::cuda(std::stoi(name.substr(5)));
  return std::nullopt;
}

// Whether `device` can hold a context here; if not, says why on stderr.
inline bool device_available(forge::Device device) {
  if (device.is_cpu() || device.index < forge::cuda_device_count()) return true;
  std::fprintf(stderr, "--device %s: %s\n", device.str().c_str(),
               forge::cuda_built() ? (std::to_string(forge::cuda_device_count()) + " CUDA device(s) visible").c_str()
                                   : "this build of forge has no CUDA backend (configure with FORGE_CUDA=ON)");
  return false;
}

// A host tensor of another context as a tensor of `ctx`, on ctx's device:
// files are read into host memory, in a host context, and a tensor changes
// device only within its own context (Tensor::to), so it crosses as values,
// which from_vector uploads. Takes what these programs read: f32, i64, u8.
inline forge::Tensor upload(forge::ExecContext& ctx, const forge::Tensor& t) {
  switch (t.dtype()) {
    case forge::DType::i64:
      return ctx.from_vector(t.to_vector<std::int64_t>(), t.shape());
    case forge::DType::u8:
      return ctx.from_vector(t.to_vector<std::uint8_t>(), t.shape());
    default:
      return ctx.from_vector(t.to_vector<float>(), t.shape());
  }
}

// "train" or "t10k" from dir; the first `limit` samples when limit > 0. On
// ctx's device: a context on a GPU gets them uploaded (the DataLoader then
// gathers each batch on the host and moves it to the device).
inline Split load_split(forge::ExecContext& ctx, const std::string& dir, const std::string& split,
                        std::int64_t limit = 0) {
  if (!ctx.device().is_cpu()) {
    forge::ExecContext host({.threads = 1});
    const Split s = load_split(host, dir, split, limit);
    return {upload(ctx, s.images), upload(ctx, s.labels)};
  }
  const Split s{forge::io::load_idx(ctx, dir + "/" + split + "-images-idx3-ubyte.gz"),
                forge::io::load_idx(ctx, dir + "/" + split + "-labels-idx1-ubyte.gz").to(forge::DType::i64)};
  return s.first(limit);
}

// An nn::Module with four named children, so its state_dict() names are
// "conv1.weight", "conv1.bias", ..., "fc2.bias". Conv2d and Linear initialize
// as PyTorch does: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases,
// drawn from ctx's seeded generator; the weights live in memory the modules
// own, never in the context's transient pool.
class Cnn : public forge::nn::Module {
 public:
  explicit Cnn(forge::ExecContext& ctx)
      : conv1(register_module(
            "conv1", std::make_shared<forge::nn::Conv2d>(ctx, 1, 32, 3, forge::nn::Conv2dOptions{.padding = 1}))),
        conv2(register_module(
            "conv2", std::make_shared<forge::nn::Conv2d>(ctx, 32, 64, 3, forge::nn::Conv2dOptions{.padding = 1}))),
        fc1(register_module("fc1", std::make_shared<forge::nn::Linear>(ctx, 64 * 7 * 7, 128))),
        fc2(register_module("fc2", std::make_shared<forge::nn::Linear>(ctx, 128, 10))) {}

  // x: f32 [B, 1, 28, 28] -> logits [B, 10].
  forge::Tensor forward(const forge::Tensor& x) override {
    forge::Tensor h = forge::max_pool2d(forge::relu(conv1->forward(x)));
    h = forge::max_pool2d(forge::relu(conv2->forward(h)));
    h = forge::relu(fc1->forward(h.flatten(1)));
    return fc2->forward(h);
  }
  const char* type_name() const override { return "Cnn"; }

  std::shared_ptr<forge::nn::Conv2d> conv1, conv2;
  std::shared_ptr<forge::nn::Linear> fc1, fc2;
};

// ---- checkpoints: safetensors (forge/io/safetensors.h) ----
// Files hold host memory: the weights of a model on a GPU are read back first.
inline void save_checkpoint(const std::string& path, const forge::StateDict& dict) {
  forge::StateDict on_host;
  for (const auto& [name, t] : dict) on_host.emplace(name, t.cpu());
  forge::io::save_safetensors(path, on_host, {{"model", "fashion_mnist_cnn"}});
}

// On the host the tensors view the file's mapping (no copy); a context on a
// GPU gets them read in a host context and uploaded. Module::load_state_dict
// copies them into the model's own weights.
inline forge::StateDict load_checkpoint(forge::ExecContext& ctx, const std::string& path) {
  if (ctx.device().is_cpu()) return forge::io::load_safetensors(ctx, path);
  forge::ExecContext host({.threads = 1});
  forge::StateDict on_device;
  for (const auto& [name, t] : forge::io::load_safetensors(host, path)) on_device.emplace(name, upload(ctx, t));
  return on_device;
}

// Accuracy of `model` on a split, in batches, recording nothing (and with no
// exec scope, so each intermediate is released as soon as the next op ran).
inline double evaluate(Cnn& model, const Split& split, std::int64_t batch_size = 500) {
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
