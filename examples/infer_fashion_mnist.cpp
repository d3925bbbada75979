// Classifies Fashion-MNIST test images with the CNN that train_fashion_mnist
// saved: loads the checkpoint into the model, runs the test set in batches
// with no autograd recording, and prints the accuracy, images/s and a few
// predictions. --device cuda runs the model on the GPU (the checkpoint and
// the test images are read on the host and uploaded).
//
//   build/release/examples/infer_fashion_mnist [--checkpoint FILE] [--data DIR]
//       [--batch-size 500] [--threads 0] [--limit N] [--device cpu|cuda]

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include "fashion_mnist_model.h"

namespace {

struct Flags {
  std::string checkpoint = "fashion_mnist.safetensors";
  std::string data = fashion_mnist::kDefaultDataDir;
  std::int64_t batch_size = 500;
  int threads = 0;
  std::int64_t limit = 0;
  forge::Device device = forge::Device::cpu();
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "%s\nusage: infer_fashion_mnist [--checkpoint FILE] [--data DIR] [--batch-size N] "
               "[--threads N]"
               " [--limit N] [--device cpu|cuda]\n",
               message);
  std::exit(2);
}

forge::Device device_flag(const std::string& value) {
  const std::optional<forge::Device> device = fashion_mnist::parse_device(value);
  if (!device) usage("--device takes cpu, cuda or cuda:N");
  return *device;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("Classifies Fashion-MNIST test images with a trained CNN.");
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--checkpoint")
      f.checkpoint = value;
    else if (flag == "--data")
      f.data = value;
    else if (flag == "--batch-size")
      f.batch_size = std::stoll(value);
    else if (flag == "--threads")
      f.threads = std::stoi(value);
    else if (flag == "--limit")
      f.limit = std::stoll(value);
    else if (flag == "--device")
      f.device = device_flag(value);
    else
      usage(("unknown flag " + flag).c_str());
  }
  if (f.batch_size < 1 || f.threads < 0 || f.limit < 0) usage("batch size must be positive");
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fm = fashion_mnist;
  const Flags flags = parse(argc, argv);
  if (!fm::device_available(flags.device)) return 1;
  forge::ExecContext ctx({.device = flags.device, .threads = flags.threads});

  fm::Cnn model(ctx);
  fm::Split test;
  try {
    model.load_state_dict(fm::load_checkpoint(ctx, flags.checkpoint));
    test = fm::load_split(ctx, flags.data, "t10k", flags.limit);
  } catch (const forge::Error& e) {
    std::fprintf(stderr,
                 "%s\n(train_fashion_mnist --out DIR writes the checkpoint; scripts/setup installs "
                 "the data)\n",
                 e.what());
    return 1;
  }

  fm::evaluate(model, test.first(flags.batch_size),
               flags.batch_size);  // warms the pool for the timed pass
  const auto start = std::chrono::steady_clock::now();
  const double accuracy = fm::evaluate(model, test, flags.batch_size);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto n = test.images.size(0);
  std::printf("%s: %lld test images, accuracy %.2f%%, %.0f images/s (batch %lld, on %s, %d threads)\n",
              flags.checkpoint.c_str(), static_cast<long long>(n), 100 * accuracy, static_cast<double>(n) / seconds,
              static_cast<long long>(flags.batch_size), ctx.device().str().c_str(), ctx.threads());

  forge::autograd::NoGradGuard no_grad;
  const std::int64_t shown = std::min<std::int64_t>(8, n);
  const std::vector<std::int64_t> predicted =
      forge::argmax(model.forward(fm::to_input(test.images.narrow(0, 0, shown))), 1).to_vector<std::int64_t>();
  const std::vector<std::int64_t> truth = test.labels.narrow(0, 0, shown).to_vector<std::int64_t>();
  for (std::int64_t i = 0; i < shown; ++i)
    std::printf("  image %lld: %-11s (label %s)\n", static_cast<long long>(i), fm::kClassNames[predicted[i]],
                fm::kClassNames[truth[i]]);
  return 0;
}
