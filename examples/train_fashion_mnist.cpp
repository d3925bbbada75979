// Trains a small CNN on Fashion-MNIST with forge: IDX files read by
// io::load_idx, batches from data::DataLoader (shuffled per epoch, the next
// batch gathered in the background), autograd, Adam with a cosine learning
// rate, one exec scope per step.
// Prints a progress bar per epoch and the test accuracy after it, saves a
// checkpoint, reloads it into a fresh model for a final evaluation, writes the
// loss and accuracy curves as an SVG, and ends with the pool's stats.
// --device cuda trains on the GPU: the model, its gradients, the optimizer's
// state and the activations live there; the DataLoader gathers each batch on
// the host and moves it to the device; the pool reported is the device's.
// --distributed trains data-parallel across the processes mpirun started
// (docs/DISTRIBUTED.md): --batch-size is the global batch, split evenly over
// the ranks; each rank reads its shard of every epoch (DistributedSampler);
// dist::DataParallel averages the gradients during backward; rank 0 alone
// prints, evaluates and writes the checkpoint, which every rank reloads.
// With --device cuda each rank takes the GPU of its rank on the machine, and
// the gradients go through NCCL.
//
//   build/release/examples/train_fashion_mnist [--epochs 3] [--batch-size 64]
//       [--lr 1e-3] [--threads 0] [--data DIR] [--out DIR] [--limit N] [--seed S]
//       [--device cpu|cuda] [--distributed]
//   mpirun -np 2 build/release/examples/train_fashion_mnist --distributed

#include <forge/data/dataloader.h>
#include <forge/distributed.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fashion_mnist_model.h"
#include "progress.h"

namespace {

struct Flags {
  std::int64_t epochs = 3;
  std::int64_t batch_size = 64;
  double lr = 1e-3;
  int threads = 0;
  std::string data = fashion_mnist::kDefaultDataDir;
  std::string out = ".";
  std::int64_t limit = 0;
  std::uint64_t seed = 1;
  forge::Device device = forge::Device::cpu();
  bool distributed = false;
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "%s\nusage: train_fashion_mnist [--epochs N] [--batch-size N] [--lr X] [--threads N]\n"
               "                           [--data DIR] [--out DIR] [--limit N] [--seed N]\n"
               "                           [--device cpu|cuda] [--distributed]\n",
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
    if (flag == "--help" || flag == "-h") usage("Trains a CNN on Fashion-MNIST.");
    if (flag == "--distributed") {
      f.distributed = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--epochs")
      f.epochs = std::stoll(value);
    else if (flag == "--batch-size")
      f.batch_size = std::stoll(value);
    else if (flag == "--lr")
      f.lr = std::stod(value);
    else if (flag == "--threads")
      f.threads = std::stoi(value);
    else if (flag == "--data")
      f.data = value;
    else if (flag == "--out")
      f.out = value;
    else if (flag == "--limit")
      f.limit = std::stoll(value);
    else if (flag == "--seed")
      f.seed = std::stoull(value);
    else if (flag == "--device")
      f.device = device_flag(value);
    else
      usage(("unknown flag " + flag).c_str());
  }
  if (f.epochs < 1 || f.batch_size < 1 || !(f.lr > 0) || f.threads < 0 || f.limit < 0)
    usage("epochs, batch size and lr must be positive; threads and limit non-negative");
  return f;
}

// One line, redrawn in place: epoch, bar, step/total, loss, samples/s, ETA.
void draw_progress(std::int64_t epoch, std::int64_t epochs, std::int64_t step, std::int64_t steps, double loss,
                   double samples_per_s, double eta_s) {
  std::printf("\repoch %lld/%lld [%s] %lld/%lld  loss %.4f  %.0f samples/s  ETA %s   ", static_cast<long long>(epoch),
              static_cast<long long>(epochs), progress::bar(step, steps).c_str(), static_cast<long long>(step),
              static_cast<long long>(steps), loss, samples_per_s, progress::clock_time(eta_s).c_str());
  std::fflush(stdout);
}

// ---- the curves as a hand-written SVG: two panels, polylines on axes ----

struct Panel {
  double x0, y0, width, height;  // plot area in pixels
  double xmin, xmax, ymin, ymax;
  double px(double x) const { return x0 + (x - xmin) / (xmax - xmin) * width; }
  double py(double y) const { return y0 + height - (y - ymin) / (ymax - ymin) * height; }
};

void axes(std::ostream& svg, const Panel& p, const std::string& title, const std::string& xlabel, int xticks,
          int yticks, const char* yformat) {
  svg << "<rect x='" << p.x0 << "' y='" << p.y0 << "' width='" << p.width << "' height='" << p.height
      << "' fill='white' stroke='#444'/>\n";
  svg << "<text x='" << p.x0 + p.width / 2 << "' y='" << p.y0 - 10 << "' text-anchor='middle' font-size='15'>" << title
      << "</text>\n";
  svg << "<text x='" << p.x0 + p.width / 2 << "' y='" << p.y0 + p.height + 38
      << "' text-anchor='middle' font-size='12'>" << xlabel << "</text>\n";
  char label[32];
  for (int i = 0; i <= xticks; ++i) {
    const double x = p.xmin + (p.xmax - p.xmin) * i / xticks, X = p.px(x);
    std::snprintf(label, sizeof label, "%.0f", x);
    svg << "<line x1='" << X << "' y1='" << p.y0 + p.height << "' x2='" << X << "' y2='" << p.y0 + p.height + 5
        << "' stroke='#444'/><text x='" << X << "' y='" << p.y0 + p.height + 18
        << "' text-anchor='middle' font-size='11'>" << label << "</text>\n";
  }
  for (int i = 0; i <= yticks; ++i) {
    const double y = p.ymin + (p.ymax - p.ymin) * i / yticks, Y = p.py(y);
    std::snprintf(label, sizeof label, yformat, y);
    svg << "<line x1='" << p.x0 << "' y1='" << Y << "' x2='" << p.x0 + p.width << "' y2='" << Y
        << "' stroke='#eee'/><text x='" << p.x0 - 6 << "' y='" << Y + 4 << "' text-anchor='end' font-size='11'>"
        << label << "</text>\n";
  }
}

void polyline(std::ostream& svg, const Panel& p, const std::vector<double>& xs, const std::vector<double>& ys,
              const char* color, double width) {
  svg << "<polyline fill='none' stroke='" << color << "' stroke-width='" << width << "' points='";
  for (std::size_t i = 0; i < xs.size(); ++i)
    svg << p.px(xs[i]) << ',' << p.py(std::clamp(ys[i], p.ymin, p.ymax)) << ' ';
  svg << "'/>\n";
}

void write_curves(const std::string& path, const std::vector<double>& step_loss,
                  const std::vector<double>& epoch_accuracy) {
  std::ofstream svg(path);
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='960' height='400' "
         "font-family='sans-serif'>\n"
      << "<rect width='960' height='400' fill='#fafafa'/>\n";

  // Loss per step (light) and its moving average over 50 steps (dark).
  const double steps = static_cast<double>(step_loss.size());
  std::vector<double> xs, smooth;
  double window_sum = 0;
  for (std::size_t i = 0; i < step_loss.size(); ++i) {
    xs.push_back(static_cast<double>(i + 1));
    window_sum += step_loss[i] - (i >= 50 ? step_loss[i - 50] : 0.0);
    smooth.push_back(window_sum / static_cast<double>(std::min<std::size_t>(i + 1, 50)));
  }
  const double top = std::ceil(std::max(1.0, *std::max_element(smooth.begin(), smooth.end())) * 2) / 2;
  const Panel loss{70, 40, 380, 300, 0, std::max(steps, 1.0), 0, top};
  axes(svg, loss, "training loss", "step", 5, 5, "%.2f");
  polyline(svg, loss, xs, step_loss, "#9ecae1", 0.7);
  polyline(svg, loss, xs, smooth, "#08519c", 2);

  svg << "<text x='" << loss.px(0) + 8 << "' y='" << loss.py(top) + 16
      << "' font-size='11' fill='#08519c'>mean of the last 50 steps</text>\n";

  // Test accuracy (percent) after each epoch, on a range of whole multiples of 5.
  std::vector<double> epochs, percent;
  for (std::size_t e = 0; e < epoch_accuracy.size(); ++e) {
    epochs.push_back(static_cast<double>(e + 1));
    percent.push_back(100 * epoch_accuracy[e]);
  }
  const auto [lo, hi] = std::minmax_element(percent.begin(), percent.end());
  const double count = static_cast<double>(percent.size());
  const Panel acc{
      560, 40, 380, 300, 0, count, std::floor((*lo - 1) / 5) * 5, std::min(100.0, std::ceil((*hi + 1) / 5) * 5)};
  axes(svg, acc, "test accuracy (%)", "epoch", static_cast<int>(std::min(count, 10.0)), 5, "%.0f");
  polyline(svg, acc, epochs, percent, "#a50f15", 2);
  for (std::size_t e = 0; e < epochs.size(); ++e)
    svg << "<circle cx='" << acc.px(epochs[e]) << "' cy='" << acc.py(percent[e]) << "' r='3.5' fill='#a50f15'/>\n";
  svg << "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  const Flags flags = parse(argc, argv);
  namespace fm = fashion_mnist;
  if (!fm::device_available(flags.device)) return 1;
  // Distributed on one machine: the cores are shared by the ranks there.
  int threads = flags.threads;
  if (flags.distributed && threads == 0) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_here);
  }
  // Distributed on CUDA: one GPU per rank, by its rank on this machine (NCCL
  // refuses two ranks on one device).
  forge::Device device = flags.device;
  if (flags.distributed && device.is_cuda()) {
    const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int gpus = std::max(1, forge::cuda_device_count());
    device = forge::Device::cuda((device.index + (local_rank ? std::atoi(local_rank) : 0)) % gpus);
  }
  forge::ExecContext ctx({.device = device, .threads = threads, .seed = flags.seed});
  std::optional<forge::dist::ProcessGroup> group;
  if (flags.distributed) group.emplace(ctx);
  const int rank = group ? group->rank() : 0, ranks = group ? group->size() : 1;
  const bool main_rank = rank == 0;
  if (flags.batch_size % ranks != 0) {
    if (main_rank)
      std::fprintf(stderr, "--batch-size %lld does not split over %d ranks\n", static_cast<long long>(flags.batch_size),
                   ranks);
    return 2;
  }
  const std::int64_t rank_batch = flags.batch_size / ranks;

  fm::Split train, test;
  try {
    train = fm::load_split(ctx, flags.data, "train", flags.limit);
    test = fm::load_split(ctx, flags.data, "t10k");
  } catch (const forge::Error& e) {
    std::fprintf(stderr, "%s\n(scripts/setup installs the dataset into %s)\n", e.what(), fm::kDefaultDataDir);
    return 1;
  }
  if (main_rank && group)
    std::printf("distributed: %d ranks (%s), %lld images per rank per step, %d threads each\n", ranks,
                forge::dist::to_string(group->backend()), static_cast<long long>(rank_batch), ctx.threads());
  if (main_rank)
    std::printf(
        "Fashion-MNIST: %lld training and %lld test images; on %s, %d threads, batch %lld, Adam lr %g "
        "(cosine)\n",
        static_cast<long long>(train.images.size(0)), static_cast<long long>(test.images.size(0)),
        ctx.device().str().c_str(), ctx.threads(), static_cast<long long>(flags.batch_size), flags.lr);

  auto net = std::make_shared<fm::Cnn>(ctx);
  fm::Cnn& model = *net;
  // Distributed: rank 0's initial weights on every rank, gradients averaged in backward.
  std::optional<forge::dist::DataParallel> ddp;
  if (group) ddp.emplace(net, *group);
  forge::optim::Adam adam(model.parameters(), {.lr = flags.lr});
  // drop_last keeps every step's shapes the same, so the pool serves each step from its cache.
  // Distributed: each rank its shard of the epoch's order (the same seed everywhere).
  std::shared_ptr<const forge::data::Sampler> sampler;
  if (group)
    sampler = std::make_shared<forge::data::DistributedSampler>(
        train.images.size(0), forge::data::DistributedSamplerOptions{
                                  .world_size = ranks, .rank = rank, .seed = flags.seed, .drop_last = true});
  forge::data::DataLoader loader(
      ctx, train.images, train.labels,
      {.batch_size = rank_batch, .drop_last = true, .seed = flags.seed, .transform = fm::to_input, .sampler = sampler});
  // The learning rate follows a cosine from --lr down to 0 over the whole run.
  const double total_steps = static_cast<double>(loader.size() * flags.epochs);
  auto lr_at = [&](std::int64_t step) {
    return flags.lr * 0.5 * (1 + std::cos(M_PI * static_cast<double>(step) / total_steps));
  };

  std::vector<double> step_loss, accuracy;
  std::uint64_t allocations_after_step1 = 0;
  std::vector<std::int64_t> allocating_steps;  // steps after the first that took memory from the system
  std::int64_t global_step = 0;
  for (std::int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
    const auto start = Clock::now();
    double loss_sum = 0;
    std::int64_t samples = 0;
    auto last_draw = start;
    // System allocations of the model's pool (the device's for --device
    // cuda) are counted from the end of one step to the end of the next
    // (gathering the batch included, the evaluation between epochs not).
    std::uint64_t allocations_mark = ctx.stats(ctx.device()).system_allocations;
    for (const forge::data::Batch& batch : loader.epoch(epoch - 1)) {
      adam.set_lr(lr_at(global_step));
      {
        auto scope = ctx.open_exec_scope();  // the step's activations and tape, released together
        forge::Tensor loss = forge::cross_entropy(ddp ? (*ddp)(batch.input) : model.forward(batch.input), batch.target);
        loss.backward();
        adam.step();
        adam.zero_grad();
        step_loss.push_back(loss.item<float>());
      }
      const std::uint64_t allocations = ctx.stats(ctx.device()).system_allocations;
      if (++global_step > 1 && allocations != allocations_mark) {
        allocations_after_step1 += allocations - allocations_mark;
        allocating_steps.push_back(global_step);
      }
      allocations_mark = allocations;
      loss_sum += step_loss.back();
      samples += batch.input.size(0) * ranks;

      const auto now = Clock::now();
      const std::int64_t step = batch.index + 1;
      if (main_rank && (now - last_draw > std::chrono::milliseconds(100) || step == loader.size())) {
        const double seconds = std::chrono::duration<double>(now - start).count();
        draw_progress(epoch, flags.epochs, step, loader.size(), loss_sum / static_cast<double>(step),
                      static_cast<double>(samples) / seconds,
                      seconds / static_cast<double>(step) * static_cast<double>(loader.size() - step));
        last_draw = now;
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // Every rank holds the same weights; rank 0 evaluates, the others wait at the next step.
    accuracy.push_back(main_rank ? fm::evaluate(model, test) : 0.0);
    if (main_rank)
      std::printf("\nepoch %lld: %.1f s, %.0f samples/s, mean loss %.4f, test accuracy %.2f%%\n",
                  static_cast<long long>(epoch), seconds, static_cast<double>(samples) / seconds,
                  loss_sum / static_cast<double>(std::max<std::int64_t>(loader.size(), 1)), 100 * accuracy.back());
  }

  std::filesystem::create_directories(flags.out);
  // The checkpoint: saved as safetensors (by rank 0), reloaded into a fresh model (by every rank), evaluated.
  const std::string checkpoint = flags.out + "/fashion_mnist.safetensors";
  if (group)
    forge::dist::save_checkpoint(*group, checkpoint, {.model = &model});
  else
    fm::save_checkpoint(checkpoint, model.state_dict());
  fm::Cnn reloaded(ctx);
  if (group)
    forge::dist::load_checkpoint(*group, checkpoint, {.model = &reloaded});
  else
    reloaded.load_state_dict(fm::load_checkpoint(ctx, checkpoint));
  if (!main_rank) return 0;
  const double reloaded_accuracy = fm::evaluate(reloaded, test);
  std::printf("checkpoint %s reloaded: test accuracy %.2f%% (%s)\n", checkpoint.c_str(), 100 * reloaded_accuracy,
              reloaded_accuracy == accuracy.back() ? "identical" : "DIFFERS");

  const std::string curves = flags.out + "/fashion_mnist_curves.svg";
  write_curves(curves, step_loss, accuracy);
  std::printf("curves: %s\n", curves.c_str());

  const forge::PoolStats s = ctx.stats(ctx.device());
  std::printf(
      "pool (%s): %llu acquires, %.2f%% hits, %llu system allocations in all, %llu in the %lld steps "
      "after "
      "step 1; peak live %.1f MiB, cached %.1f MiB\n",
      ctx.device().str().c_str(), static_cast<unsigned long long>(s.acquires),
      s.acquires ? 100.0 * static_cast<double>(s.hits) / static_cast<double>(s.acquires) : 0.0,
      static_cast<unsigned long long>(s.system_allocations), static_cast<unsigned long long>(allocations_after_step1),
      static_cast<long long>(global_step - 1), static_cast<double>(s.peak_live_bytes) / (1 << 20),
      static_cast<double>(s.cached_bytes) / (1 << 20));
  if (!allocating_steps.empty()) {
    std::printf("steps that allocated:");
    for (std::int64_t step : allocating_steps) std::printf(" %lld", static_cast<long long>(step));
    std::printf("\n");
  }
  return reloaded_accuracy == accuracy.back() ? 0 : 1;
}
