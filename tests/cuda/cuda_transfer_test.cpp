// Transfers between the host and cuda:0 (Tensor::to, cpu, cuda): every dtype
// both ways, strided device views, non_blocking copies read after
// synchronize, and reading back (to_vector, item, printing) a device tensor.
// Values are compared as read_back() reads them (backend_ops.h): from memory,
// element by element.

#include <catch2/catch.hpp>
#include <cstdint>
#include <sstream>
#include <string>
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

// n values that `dtype` holds exactly and that differ from their neighbours,
// the extremes of the integer dtypes included.
std::vector<double> distinct_values(DType dtype, std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<double>(i);
    double x = 0;
    switch (dtype) {
      case DType::f32:
      case DType::f64:
      case DType::f16:
      case DType::bf16:
        x = static_cast<double>(i % 64) * 0.25 - 8;  // 7 significant bits
        break;
      case DType::i32:
        x = i == 0 ? -2147483648.0 : i == 1 ? 2147483647.0 : k * 7919 - 4e6;
        break;
      case DType::i64:
        x = i == 0 ? -9007199254740992.0 : k * 1000003 - 1099511627776.0;  // beyond 32 bits
        break;
      case DType::u8:
        x = static_cast<double>((i * 37) % 256);
        break;
      case DType::i8:
        x = static_cast<double>((i * 37) % 256 - 128);
        break;
      case DType::boolean:
        x = i % 3 == 0 ? 1 : 0;
        break;
    }
    v[static_cast<std::size_t>(i)] = x;
  }
  return v;
}

std::vector<double> values_of(const Tensor& t) { return bo::read_back("", t, false).values; }

// What printing shows of a tensor's values: all but the closing type line.
std::string printed_values(const Tensor& t) {
  std::ostringstream out;
  out << t;
  const std::string s = out.str();
  return s.substr(0, s.rfind("[ "));
}

}  // namespace

TEST_CASE("cuda: every dtype goes to the device and back unchanged, by to, cpu and cuda", "[cuda]") {
  TestContext ctx(forge_test::cuda_options());
  const Shape shape{37, 29};  // 1073 elements, an odd byte count for every dtype but f64 and i64
  for (const DType dtype : forge_test::kAllDTypes) {
    CAPTURE(forge::dtype_name(dtype));
    const std::vector<double> want = distinct_values(dtype, shape.numel());
    const Tensor d = bo::detail::put(ctx, want, shape, dtype);  // from_vector: an upload
    CHECK(d.device() == Device::cuda(0));
    CHECK(d.dtype() == dtype);
    CHECK(values_of(d) == want);

    const Tensor h = d.cpu();
    CHECK(h.device() == Device::cpu());
    CHECK(h.dtype() == dtype);
    CHECK(h.shape() == shape);
    CHECK(values_of(h) == want);

    const Tensor back = h.cuda();
    CHECK(back.device() == Device::cuda(0));
    CHECK(back.buffer() != d.buffer());
    CHECK(values_of(back.to(Device::cpu())) == want);
    CHECK(values_of(h.to(Device::cuda(0)).cpu()) == want);

    // Already there: the same tensor, no copy.
    CHECK(d.cuda(0).buffer() == d.buffer());
    CHECK(h.cpu().buffer() == h.buffer());
  }
}

TEST_CASE("cuda: strided device views come to the host packed, with their values", "[cuda]") {
  // A device context computes on its device only (views included), so the
  // expected values are the same views of the same values in a host context.
  TestContext ctx(forge_test::cuda_options());
  TestContext host(forge_test::context_options(1));
  for (const DType dtype : {DType::f32, DType::f16, DType::i64, DType::boolean}) {
    CAPTURE(forge::dtype_name(dtype));
    const std::vector<double> values = distinct_values(dtype, 6 * 40);
    const auto views = [](const Tensor& t) {
      return std::vector<Tensor>{
          t.transpose(0, 1),                            // [40, 6], strides (1, 40)
          t.slice(1, 3, 40, 4),                         // every 4th column from 3
          t.select(1, 7),                               // a column: stride 40
          t.narrow(0, 2, 3).slice(1, 5, 30),            // an offset block
          t.select(0, 1).select(0, 5),                  // 0-d
          t.select(0, 4).unsqueeze(0).expand({5, 40}),  // stride 0
          t.slice(0, 0, 0),                             // empty
      };
    };
    const std::vector<Tensor> on_device = views(bo::detail::put(ctx, values, {6, 40}, dtype));
    const std::vector<Tensor> on_host = views(bo::detail::put(host, values, {6, 40}, dtype));
    for (std::size_t k = 0; k < on_device.size(); ++k) {
      CAPTURE(k, on_host[k].shape().str());
      const std::vector<double> want = values_of(on_host[k]);
      CHECK(values_of(on_device[k]) == want);  // read where it lies, strides and all
      const Tensor down = on_device[k].cpu();
      CHECK(down.device() == Device::cpu());
      CHECK(down.shape() == on_host[k].shape());
      CHECK(down.is_contiguous());
      CHECK(values_of(down) == want);
      const Tensor up = down.cuda();
      CHECK(up.device() == Device::cuda(0));
      CHECK(values_of(up) == want);
      CHECK(on_device[k].to_vector<double>() == on_host[k].to_vector<double>());
    }
  }
}

TEST_CASE("cuda: non_blocking copies are read after synchronize, behind the work queued before them", "[cuda]") {
  TestContext ctx(forge_test::cuda_options());
  // Device to host: each copy is queued behind the kernels that compute its
  // source; the host tensors are read only after the stream is synchronized.
  std::vector<Tensor> results, hosts;
  for (int k = 0; k < 8; ++k) {
    Tensor x = ctx.arange(1 << 18);
    for (int i = 0; i < 10; ++i) x = x * 0.5 + static_cast<double>(k);
    results.push_back(x);
    hosts.push_back(x.to(Device::cpu(), /*non_blocking=*/true));
    CHECK(hosts.back().device() == Device::cpu());
  }
  ctx.stream().synchronize();
  for (int k = 0; k < 8; ++k) {
    CAPTURE(k);
    CHECK(values_of(hosts[static_cast<std::size_t>(k)]) == values_of(results[static_cast<std::size_t>(k)]));
    CHECK(hosts[static_cast<std::size_t>(k)].to_vector<float>() ==
          results[static_cast<std::size_t>(k)].to_vector<float>());
  }

  // Host to device: the source may change as soon as the call returns (the
  // upload staged its bytes).
  std::vector<float> source(1 << 16);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<float>(i);
  const std::vector<float> want = source;
  const Tensor uploaded = ctx.from_vector(source);
  for (float& x : source) x = -1;
  const Tensor up = results[0].cpu().to(Device::cuda(0), /*non_blocking=*/true);
  ctx.synchronize();
  CHECK(uploaded.to_vector<float>() == want);
  CHECK(values_of(up) == values_of(results[0]));
}

TEST_CASE("cuda: to_vector, item and printing read a device tensor back", "[cuda]") {
  TestContext ctx(forge_test::cuda_options());
  const Tensor d = ctx.from_vector<double>({1.5, -2.25, 3, 1e-3, 250, -7}, {2, 3});
  CHECK(d.to_vector<double>() == std::vector<double>{1.5, -2.25, 3, 1e-3, 250, -7});
  CHECK(d.to_vector<float>() == std::vector<float>{1.5f, -2.25f, 3.0f, 1e-3f, 250.0f, -7.0f});
  CHECK(d.transpose(0, 1).to_vector<double>() == std::vector<double>{1.5, 1e-3, -2.25, 250, 3, -7});
  CHECK(d.select(0, 1).select(0, 1).item<double>() == 250);
  CHECK(printed_values(d) == printed_values(d.cpu()));
  CHECK(printed_values(d.transpose(0, 1)) == printed_values(d.transpose(0, 1).cpu()));
  const Tensor b = ctx.from_vector<bool>({true, false, true});
  CHECK(printed_values(b) == printed_values(b.cpu()));
}
