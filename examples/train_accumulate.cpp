// Gradient accumulation: a batch too large for one step's memory is split
// into micro-batches whose gradients add up in .grad() before one optimizer
// step. With a mean loss, each micro-batch's loss is scaled by its share of
// the batch (micro / batch), so the accumulated gradient equals the full
// batch's. Two copies of one MLP train side by side, one on full batches and
// one on 4 micro-batches per step; the example prints the largest difference
// between their gradients and their parameters (float rounding only).
//
//   build/release/examples/train_accumulate [steps]

#include <forge/forge.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace {

std::shared_ptr<forge::nn::Sequential> make_mlp(forge::ExecContext& ctx) {
  auto mlp = std::make_shared<forge::nn::Sequential>();
  mlp->push_back(std::make_shared<forge::nn::Linear>(ctx, 8, 32));
  mlp->push_back(std::make_shared<forge::nn::GELU>());
  mlp->push_back(std::make_shared<forge::nn::Linear>(ctx, 32, 4));
  return mlp;
}

double max_abs_diff(const forge::Tensor& a, const forge::Tensor& b) {
  return (a.to(forge::DType::f64) - b.to(forge::DType::f64)).abs().max().item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  constexpr std::int64_t kBatch = 64, kMicro = 16;
  forge::ExecContext ctx({.threads = 1, .seed = 1});

  auto full = make_mlp(ctx);
  auto accumulated = make_mlp(ctx);
  accumulated->load_state_dict(full->state_dict());  // the same starting weights
  forge::optim::AdamW full_opt(full->parameters(), {.lr = 1e-2});
  forge::optim::AdamW acc_opt(accumulated->parameters(), {.lr = 1e-2});

  // A fixed random problem: 4 classes from the sign pattern of two features.
  const forge::Tensor x = ctx.randn({kBatch * 4, 8});
  const forge::Tensor y = (x.narrow(1, 0, 1) > 0).to(forge::DType::i64).squeeze(1) * 2 +
                          (x.narrow(1, 1, 1) > 0).to(forge::DType::i64).squeeze(1);

  double worst_grad = 0, worst_param = 0;
  for (int step = 0; step < steps; ++step) {
    const std::int64_t start = (step % 4) * kBatch;
    const forge::Tensor xb = x.narrow(0, start, kBatch), yb = y.narrow(0, start, kBatch);

    // One step on the full batch.
    full_opt.zero_grad();
    const forge::Tensor loss = forge::cross_entropy(full->forward(xb), yb);
    loss.backward();

    // The same step as 4 micro-batches: backward adds each one's gradient into .grad().
    acc_opt.zero_grad();
    for (std::int64_t m = 0; m < kBatch; m += kMicro) {
      auto scope = ctx.open_exec_scope();  // a micro-batch's intermediates go when it is done
      const forge::Tensor part =
          forge::cross_entropy(accumulated->forward(xb.narrow(0, m, kMicro)), yb.narrow(0, m, kMicro));
      (part * (static_cast<double>(kMicro) / kBatch)).backward();
    }

    const auto pf = full->parameters(), pa = accumulated->parameters();
    for (std::size_t i = 0; i < pf.size(); ++i)
      worst_grad = std::max(worst_grad, max_abs_diff(pf[i].grad(), pa[i].grad()));
    full_opt.step();
    acc_opt.step();
    for (std::size_t i = 0; i < pf.size(); ++i) worst_param = std::max(worst_param, max_abs_diff(pf[i], pa[i]));
    if (step % 5 == 0 || step == steps - 1) std::printf("step %3d  loss %.4f\n", step, loss.item<float>());
  }
  std::printf("%d steps of batch %lld, accumulated over micro-batches of %lld:\n", steps,
              static_cast<long long>(kBatch), static_cast<long long>(kMicro));
  std::printf("  max |grad difference|  %.3g\n  max |param difference| %.3g\n", worst_grad, worst_param);
  // Float rounding only: the sums run in another order.
  return worst_grad < 1e-5 && worst_param < 1e-4 ? 0 : 1;
}
