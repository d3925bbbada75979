// Autograd and training on cuda:0: an MLP's forward and backward on the
// device give the host's loss and gradients (within tolerance) and leave
// .grad on the device; a steady training loop takes no new device memory
// from the system after its first step.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend_ops.h"
#include "cuda_support.h"
#include "forge/forge.h"
#include "support.h"

namespace {

using forge::Device;
using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge_test::TestContext;
namespace bo = forge_test::backend_ops;

// A two-layer MLP's parameters and a batch, drawn on the host once, so that
// every context builds the same model from the same values.
struct MlpValues {
  static constexpr std::int64_t kBatch = 64, kIn = 32, kHidden = 128, kClasses = 10;
  std::vector<double> x, w1, b1, w2, b2;
  std::vector<std::int64_t> y;

  explicit MlpValues(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> gauss;
    const auto draw = [&](std::int64_t n, double scale) {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (double& e : v) e = gauss(rng) * scale;
      return v;
    };
    x = draw(kBatch * kIn, 1);
    w1 = draw(kHidden * kIn, 0.2);
    b1 = draw(kHidden, 0.1);
    w2 = draw(kClasses * kHidden, 0.1);
    b2 = draw(kClasses, 0.1);
    std::uniform_int_distribution<std::int64_t> cls(0, kClasses - 1);
    for (std::int64_t i = 0; i < kBatch; ++i) y.push_back(cls(rng));
  }
};

struct Mlp {
  std::vector<Tensor> params;  // w1, b1, w2, b2: leaves that require grad
  Tensor x, y;

  Mlp(forge::ExecContext& ctx, const MlpValues& v, DType dtype) {
    using V = MlpValues;
    const auto leaf = [&](const std::vector<double>& values, const Shape& shape) {
      Tensor t = bo::detail::put(ctx, values, shape, dtype);  // from_vector: uploaded on a device context
      t.requires_grad_();
      return t;
    };
    params = {leaf(v.w1, {V::kHidden, V::kIn}), leaf(v.b1, {V::kHidden}), leaf(v.w2, {V::kClasses, V::kHidden}),
              leaf(v.b2, {V::kClasses})};
    x = bo::detail::put(ctx, v.x, {V::kBatch, V::kIn}, dtype);
    y = ctx.from_vector(v.y);
  }
  Tensor loss() const {
    const Tensor h = forge::relu(forge::linear(x, params[0], params[1]));
    return forge::cross_entropy(forge::linear(h, params[2], params[3]), y);
  }
};

// Whether `got` is `want` within rtol, relative to each element's magnitude
// and, near zero, to the mean magnitude.
void check_close(const std::vector<double>& want, const std::vector<double>& got, double rtol) {
  REQUIRE(want.size() == got.size());
  double scale = 0;
  for (const double w : want) scale += std::abs(w);
  scale /= static_cast<double>(std::max<std::size_t>(want.size(), 1));
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::abs(want[i] - got[i]) <= rtol * (std::max(std::abs(want[i]), std::abs(got[i])) + scale)) continue;
    if (bad++ == 0) first = i;
  }
  INFO(bad << " of " << want.size() << " differ; first at " << first << ": " << want[first] << " vs " << got[first]);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("cuda: an MLP's loss and gradients on cuda:0 match the host's, and .grad stays on the device", "[cuda]") {
  const MlpValues values(11);
  for (const auto& [dtype, rtol] : {std::pair{DType::f32, 1e-4}, std::pair{DType::f64, 1e-11}}) {
    CAPTURE(forge::dtype_name(dtype));
    TestContext host(forge_test::context_options(1));
    TestContext dev(forge_test::cuda_options());
    const Mlp on_host(host, values, dtype), on_device(dev, values, dtype);

    const Tensor host_loss = on_host.loss(), device_loss = on_device.loss();
    CHECK(device_loss.device() == Device::cuda(0));
    CHECK(device_loss.requires_grad());
    check_close({host_loss.item<double>()}, {device_loss.item<double>()}, rtol);
    host_loss.backward();
    device_loss.backward();
    for (std::size_t k = 0; k < on_host.params.size(); ++k) {
      CAPTURE(k);
      const Tensor g = on_device.params[k].grad();
      REQUIRE(g.defined());
      CHECK(g.device() == Device::cuda(0));
      CHECK(g.dtype() == dtype);
      CHECK(g.shape() == on_device.params[k].shape());
      check_close(on_host.params[k].grad().to_vector<double>(), g.to_vector<double>(), rtol);
    }

    // A second backward accumulates into the device gradients.
    const std::vector<double> first = on_device.params[0].grad().to_vector<double>();
    on_device.loss().backward();
    std::vector<double> doubled = first;
    for (double& g : doubled) g *= 2;
    check_close(doubled, on_device.params[0].grad().to_vector<double>(), rtol);
    CHECK(on_device.params[0].grad().device() == Device::cuda(0));
  }
}

TEST_CASE("cuda: autograd::grad returns gradients on cuda:0 equal to the host's", "[cuda]") {
  const MlpValues values(12);
  TestContext host(forge_test::context_options(1));
  TestContext dev(forge_test::cuda_options());
  const Mlp on_host(host, values, DType::f64), on_device(dev, values, DType::f64);
  const std::vector<Tensor> want = forge::autograd::grad({on_host.loss()}, on_host.params);
  const std::vector<Tensor> got = forge::autograd::grad({on_device.loss()}, on_device.params);
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    CAPTURE(k);
    CHECK(got[k].device() == Device::cuda(0));
    check_close(want[k].to_vector<double>(), got[k].to_vector<double>(), 1e-11);
    CHECK_FALSE(on_device.params[k].grad().defined());  // returned, not accumulated
  }
}

TEST_CASE("cuda: a training loop on cuda:0 takes no new device memory from the system after step 1", "[cuda]") {
  TestContext ctx(forge_test::cuda_options());
  const MlpValues values(13);
  Mlp model(ctx, values, DType::f32);
  forge::optim::Adam adam(model.params, {.lr = 1e-2});
  // Four batches built on the host, uploaded at each step as a data loader's would be.
  std::vector<MlpValues> batches;
  for (std::uint64_t b = 0; b < 4; ++b) batches.emplace_back(100 + b);

  constexpr int kSteps = 40;
  std::vector<float> losses;
  forge::PoolStats after_step1;
  for (int step = 1; step <= kSteps; ++step) {
    {
      auto scope = ctx.open_exec_scope();
      const MlpValues& batch = batches[static_cast<std::size_t>(step % 4)];
      std::vector<float> x(batch.x.begin(), batch.x.end());
      model.x = ctx.from_vector(x, {MlpValues::kBatch, MlpValues::kIn});
      model.y = ctx.from_vector(batch.y);
      Tensor loss = model.loss();
      loss.backward();
      adam.step();
      adam.zero_grad();
      losses.push_back(loss.item<float>());
      model.x = Tensor();
      model.y = Tensor();
    }
    if (step == 1) after_step1 = ctx.stats(ctx.device());
    CAPTURE(step);
    CHECK(ctx.stats(ctx.device()).system_allocations == after_step1.system_allocations);
  }
  for (const Tensor& p : model.params) CHECK(p.device() == Device::cuda(0));
  // It learned: the labels are random, so it fits the four batches it sees.
  const auto mean = [](auto first, auto last) {
    return std::accumulate(first, last, 0.0) / static_cast<double>(last - first);
  };
  CHECK(mean(losses.end() - 4, losses.end()) < 0.5 * mean(losses.begin(), losses.begin() + 4));
  ctx.synchronize();
  const forge::PoolStats end = ctx.stats(ctx.device());
  CHECK(end.system_allocations == after_step1.system_allocations);
  CHECK(end.pending_blocks == 0);
}
