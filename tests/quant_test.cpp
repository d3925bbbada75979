// forge::infer weight formats: ggml's q8_0 / q4_0 block layouts checked byte
// by byte on rows quantized by hand, round-trip error bounds per format,
// linear against f64 products (of the rounded operands: tight; of the
// originals: a bound derived from each rounding), the native kernels against
// the portable one, every refusal, and packed checkpoints (quantize, then
// read_packed zero-copy over the mapping; damaged metadata refused).

#include "forge/infer/quant.h"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/host_executor.h"
#include "backend/device_runtime.h"
#include "forge/forge.h"
#include "infer/quant_internal.h"
#include "infer/quant_kernels.h"
#include "memory/emulated_device.h"
#include "support.h"

using forge::DType;
using forge::Shape;
using forge::Tensor;
using forge::infer::PackedMatrix;
using forge::infer::WeightFormat;
using forge_test::TestContext;
namespace fs = std::filesystem;
namespace qd = forge::infer::detail;

namespace {

constexpr WeightFormat kFormats[] = {WeightFormat::f32, WeightFormat::bf16, WeightFormat::q8_0, WeightFormat::q4_0};

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
  return {p, p + t.nbytes()};
}

float half(std::uint16_t bits) { return forge::Half::to_float(bits); }

// What x[m, :] becomes before the product (Note [Activation rounding]).
std::vector<double> rounded_activations(const std::vector<float>& x, std::int64_t k, WeightFormat format) {
  std::vector<double> out(x.size());
  if (format == WeightFormat::f32) {
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i];
  } else if (format == WeightFormat::bf16) {
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(forge::BFloat16(x[i]));
  } else {
    REQUIRE(k % 32 == 0);
    std::int8_t q[32];
    for (std::size_t b = 0; b < x.size() / 32; ++b) {
      const float d = qd::quantize_activation_block(x.data() + 32 * b, q);
      for (int j = 0; j < 32; ++j) {
        out[32 * b + j] = static_cast<double>(q[j]) * d;
        REQUIRE(std::abs(out[32 * b + j] - x[32 * b + j]) <= d / 2 * (1 + 1e-5));  // round to nearest
      }
    }
  }
  return out;
}

// Every output's f64 value and the sum of |terms| (a scale for f32 error).
struct Product {
  std::vector<double> value, magnitude;
};
Product reference(const std::vector<double>& x, const std::vector<double>& w, std::int64_t m, std::int64_t n,
                  std::int64_t k) {
  Product p{std::vector<double>(static_cast<std::size_t>(m * n)), std::vector<double>(static_cast<std::size_t>(m * n))};
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t l = 0; l < k; ++l) {
        const double t = x[static_cast<std::size_t>(i * k + l)] * w[static_cast<std::size_t>(j * k + l)];
        p.value[static_cast<std::size_t>(i * n + j)] += t;
        p.magnitude[static_cast<std::size_t>(i * n + j)] += std::abs(t);
      }
  return p;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// A fresh directory under /tmp, removed with everything in it when the case ends.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("forge_quant_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Whether `p` lies inside a mapping of `path` (Linux lists them in /proc/self/maps).
bool inside_mapping_of(const void* p, const fs::path& path) {
  std::ifstream maps("/proc/self/maps");
  const std::string file = fs::canonical(path).string();
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    if (line.find(file) == std::string::npos) continue;
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream in(line);
    in >> std::hex >> lo >> dash >> hi;
    if (addr >= lo && addr < hi) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("quant: format names round-trip and an unknown name lists the choices", "[infer][quant]") {
  for (WeightFormat f : kFormats) CHECK(forge::infer::parse_weight_format(forge::infer::format_name(f)) == f);
  const std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "parse_weight_format",
                                              forge::infer::parse_weight_format("q5_1"));
  CHECK_THAT(msg, Catch::Contains("q5_1") && Catch::Contains("f32, bf16, q8_0 and q4_0"));
  CHECK(forge::infer::packed_row_bytes(WeightFormat::q8_0, 64) == 68);
  CHECK(forge::infer::packed_row_bytes(WeightFormat::q4_0, 64) == 36);
  CHECK(forge::infer::packed_row_bytes(WeightFormat::bf16, 5) == 10);
}

TEST_CASE("quant: q8_0 blocks of a hand-quantized row hold ggml's bytes", "[infer][quant]") {
  TestContext ctx;
  // Block 0: integers with amax 127, so d = 1 and q = x. Block 1: halves with
  // amax 63.5, so d = 0.5 and q = 2x. Block 2: zeros, d = 0.
  std::vector<float> row(96, 0.0f);
  for (int j = 0; j < 32; ++j) row[j] = static_cast<float>((j * 37) % 255 - 127);
  row[5] = -127.0f;
  for (int j = 0; j < 32; ++j) row[32 + j] = static_cast<float>((j * 11) % 127 - 63) / 2;
  row[40] = 63.5f;
  const PackedMatrix m = PackedMatrix::pack(ctx.from_vector(row, {1, 96}), WeightFormat::q8_0);
  REQUIRE(m.storage().dtype() == DType::u8);
  REQUIRE(m.storage().shape() == Shape{1, 3 * 34});
  const std::vector<std::uint8_t> b = bytes_of(m.storage());
  auto scale = [&](int block) { return static_cast<std::uint16_t>(b[34 * block] | (b[34 * block + 1] << 8)); };
  CHECK(scale(0) == 0x3c00);  // f16 1.0
  CHECK(scale(1) == 0x3800);  // f16 0.5
  CHECK(scale(2) == 0x0000);
  for (int j = 0; j < 32; ++j) {
    CHECK(static_cast<std::int8_t>(b[2 + j]) == static_cast<int>(row[j]));
    CHECK(static_cast<std::int8_t>(b[34 + 2 + j]) == static_cast<int>(2 * row[32 + j]));
    CHECK(b[68 + 2 + j] == 0);
  }
  // Dequantized, these rows are exact.
  CHECK(m.dequantize().to_vector<float>() == row);
}

TEST_CASE("quant: q4_0 blocks of a hand-quantized row hold ggml's bytes and nibble order", "[infer][quant]") {
  TestContext ctx;
  // Block 0: integers in [-8, 7] led by -8, so d = -8 / -8 = 1 and q = x + 8.
  // Block 1: led by +16, so d = 16 / -8 = -2 and q = floor(x / -2 + 8.5),
  // clamped to 15: 16 -> 0, -14 -> 15, -16 -> 16 -> 15, 1 -> 8 (half up), 3 -> 7.
  std::vector<float> row(64, 0.0f);
  for (int j = 0; j < 32; ++j) row[j] = static_cast<float>((j * 5) % 16 - 8);
  row[0] = -8.0f;
  row[32] = 16.0f;
  row[33] = -14.0f;
  row[34] = -16.0f;
  row[35] = 1.0f;
  row[48] = 3.0f;
  const PackedMatrix m = PackedMatrix::pack(ctx.from_vector(row, {1, 64}), WeightFormat::q4_0);
  REQUIRE(m.storage().shape() == Shape{1, 2 * 18});
  const std::vector<std::uint8_t> b = bytes_of(m.storage());
  CHECK((b[0] | (b[1] << 8)) == 0x3c00);   // f16 1.0
  CHECK((b[18] | (b[19] << 8)) == 0xc000);  // f16 -2.0
  for (int j = 0; j < 16; ++j) {
    const int lo = static_cast<int>(row[j]) + 8, hi = static_cast<int>(row[j + 16]) + 8;
    CHECK(b[2 + j] == (lo | (hi << 4)));
  }
  const std::uint8_t* blk = b.data() + 18 + 2;
  CHECK((blk[0] & 0x0f) == 0);   // 16
  CHECK((blk[1] & 0x0f) == 15);  // -14
  CHECK((blk[2] & 0x0f) == 15);  // -16, clamped
  CHECK((blk[3] & 0x0f) == 8);   // 1
  CHECK((blk[0] >> 4) == 7);     // value 16 of the block: 3
  CHECK((blk[4] & 0x0f) == 8);   // 0
  const std::vector<float> deq = m.dequantize().to_vector<float>();
  for (int j = 0; j < 32; ++j) CHECK(deq[j] == row[j]);
  CHECK(deq[32] == 16.0f);
  CHECK(deq[33] == -14.0f);
  CHECK(deq[34] == -14.0f);  // the clamp: one step (|d|) short
  CHECK(deq[35] == 0.0f);
  CHECK(deq[48] == 2.0f);
}

TEST_CASE("quant: each format's round trip stays within its rounding bound", "[infer][quant]") {
  TestContext ctx;
  const std::int64_t rows = 7, cols = 256;
  // Blocks at several magnitudes (and one all zero) in every row.
  std::vector<float> w = gaussian(static_cast<std::size_t>(rows * cols), 11);
  for (std::int64_t i = 0; i < rows * cols; ++i) w[i] *= std::pow(10.0f, static_cast<float>((i / 32) % 5) - 1.0f);
  for (int j = 64; j < 96; ++j) w[j] = 0.0f;
  const Tensor weight = ctx.from_vector(w, {rows, cols});
  constexpr double kF16 = 1.0 / 2048;  // relative rounding of the f16 scale
  for (WeightFormat f : kFormats) {
    CAPTURE(forge::infer::format_name(f));
    const PackedMatrix m = PackedMatrix::pack(weight, f);
    CHECK(m.rows() == rows);
    CHECK(m.cols() == cols);
    CHECK(m.bytes() == static_cast<std::size_t>(rows) * forge::infer::packed_row_bytes(f, cols));
    const std::vector<float> deq = m.dequantize().to_vector<float>();
    const auto* raw = static_cast<const std::uint8_t*>(m.storage().raw_data());
    const std::size_t row_bytes = forge::infer::packed_row_bytes(f, cols);
    for (std::int64_t i = 0; i < rows * cols; ++i) {
      const double x = w[i], err = std::abs(x - deq[i]);
      const std::int64_t r = i / cols, blk = (i % cols) / 32;
      if (f == WeightFormat::f32) {
        CHECK(err == 0);
      } else if (f == WeightFormat::bf16) {
        CHECK(err <= std::abs(x) / 256);
      } else if (f == WeightFormat::q8_0) {
        const std::uint8_t* s = raw + r * row_bytes + blk * 34;
        const double d = std::abs(half(static_cast<std::uint16_t>(s[0] | (s[1] << 8))));
        CHECK(err <= d * (0.5 + 127 * kF16) + 1e-7);
      } else {
        const std::uint8_t* s = raw + r * row_bytes + blk * 18;
        const double d = half(static_cast<std::uint16_t>(s[0] | (s[1] << 8)));
        // d/2 where x / d <= 7.5; values past it clamp to q = 15, one step short.
        const bool clamped = d != 0 && x / d > 7.5;
        CHECK(err <= std::abs(d) * ((clamped ? 1.0 : 0.5) + 8 * kF16) + 1e-7);
      }
    }
  }
  // A weight in another dtype or layout packs to the same bytes.
  const PackedMatrix a = PackedMatrix::pack(weight, WeightFormat::q4_0);
  const PackedMatrix t = PackedMatrix::pack(weight.t().contiguous().t(), WeightFormat::q4_0);
  const PackedMatrix d = PackedMatrix::pack(weight.to(DType::f64), WeightFormat::q4_0);
  CHECK(bytes_of(a.storage()) == bytes_of(t.storage()));
  CHECK(bytes_of(a.storage()) == bytes_of(d.storage()));
}

TEST_CASE("quant: linear equals the f64 product of its rounded operands, and the exact one within their rounding",
          "[infer][quant]") {
  TestContext ctx;
  const std::int64_t n = 37, k = 160;
  const std::vector<float> w = gaussian(static_cast<std::size_t>(n * k), 3, 0.2f);
  const std::vector<float> bias = gaussian(static_cast<std::size_t>(n), 4);
  const Tensor weight = ctx.from_vector(w, {n, k});
  // The relative Frobenius error each format stays under on Gaussian data (docs/INFERENCE.md).
  const double stated[] = {1e-6, 1e-2, 2e-2, 0.15};
  for (WeightFormat f : kFormats) {
    const PackedMatrix packed = PackedMatrix::pack(weight, f);
    const std::vector<double> deq = as_double(packed.dequantize().to_vector<float>());
    for (std::int64_t m : {1, 4, 16}) {
      CAPTURE(forge::infer::format_name(f), m);
      const std::vector<float> x = gaussian(static_cast<std::size_t>(m * k), static_cast<std::uint32_t>(m));
      const Tensor y = forge::infer::linear(ctx.from_vector(x, {m, k}), packed, ctx.from_vector(bias));
      REQUIRE(y.shape() == Shape{m, n});
      const std::vector<float> got = y.to_vector<float>();
      const std::vector<double> xr = rounded_activations(x, k, f);
      const Product tight = reference(xr, deq, m, n, k);
      const Product exact = reference(as_double(x), as_double(w), m, n, k);
      double err2 = 0, ref2 = 0;
      for (std::int64_t i = 0; i < m * n; ++i) {
        const double b = bias[static_cast<std::size_t>(i % n)];
        const double yi = got[static_cast<std::size_t>(i)];
        CHECK(std::abs(yi - (tight.value[i] + b)) <= 1e-5 * (tight.magnitude[i] + std::abs(b)) + 1e-6);
        // x w - x~ w~ = x (w - w~) + (x - x~) w~, term by term.
        double bound = 0;
        for (std::int64_t l = 0; l < k; ++l) {
          const std::size_t xi = static_cast<std::size_t>((i / n) * k + l), wi = static_cast<std::size_t>((i % n) * k + l);
          bound += std::abs(x[xi]) * std::abs(w[wi] - deq[wi]) + std::abs(x[xi] - xr[xi]) * std::abs(deq[wi]);
        }
        CHECK(std::abs(yi - (exact.value[i] + b)) <= bound + 1e-5 * (exact.magnitude[i] + std::abs(b)) + 1e-6);
        err2 += (yi - b - exact.value[i]) * (yi - b - exact.value[i]);
        ref2 += exact.value[i] * exact.value[i];
      }
      CHECK(std::sqrt(err2 / ref2) < stated[static_cast<int>(f)]);
    }
  }
}

TEST_CASE("quant: linear takes batched and strided x, an empty batch, and writes through linear_into",
          "[infer][quant]") {
  TestContext ctx;
  const std::int64_t n = 21, k = 64;
  const Tensor weight = ctx.from_vector(gaussian(static_cast<std::size_t>(n * k), 8), {n, k});
  const Tensor x = ctx.from_vector(gaussian(static_cast<std::size_t>(6 * k), 9), {2, 3, k});
  for (WeightFormat f : kFormats) {
    CAPTURE(forge::infer::format_name(f));
    const PackedMatrix w = PackedMatrix::pack(weight, f);
    const Tensor flat = forge::infer::linear(x.reshape({6, k}), w);
    const Tensor batched = forge::infer::linear(x, w);
    CHECK(batched.shape() == Shape{2, 3, n});
    CHECK(batched.reshape({6, n}).to_vector<float>() == flat.to_vector<float>());
    // A strided x (every other row) reads the same rows.
    const Tensor stepped = forge::infer::linear(x.reshape({6, k}).slice(0, 0, 6, 2), w);
    const std::vector<float> all = flat.to_vector<float>(), some = stepped.to_vector<float>();
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < n; ++c) CHECK(some[r * n + c] == all[2 * r * n + c]);
    // 1-D x, and an empty batch.
    CHECK(forge::infer::linear(x.reshape({6, k}).select(0, 2), w).to_vector<float>() ==
          std::vector<float>(all.begin() + 2 * n, all.begin() + 3 * n));
    CHECK(forge::infer::linear(ctx.zeros({0, k}), w).shape() == Shape{0, n});
    // linear_into: a packed out, and a transposed view.
    Tensor out = ctx.zeros({6, n});
    forge::infer::linear_into(out, x.reshape({6, k}), w);
    CHECK(out.to_vector<float>() == all);
    Tensor outt = ctx.zeros({n, 6});
    Tensor view = outt.t();
    forge::infer::linear_into(view, x.reshape({6, k}), w);
    CHECK(outt.t().contiguous().to_vector<float>() == all);
  }
}

TEST_CASE("quant: the native kernels equal the portable kernel on odd shapes", "[infer][quant]") {
  TestContext ctx;
  for (WeightFormat f : kFormats) {
    CAPTURE(forge::infer::format_name(f));
    if (!qd::native_available(f)) {
      WARN("no native " << forge::infer::format_name(f) << " kernel in this build: the portable one runs alone");
      CHECK(qd::best_kernel(f) == qd::LinearKernel::portable);
      continue;
    }
    CHECK(qd::best_kernel(f) == qd::LinearKernel::native);
    const bool blocks = f == WeightFormat::q8_0 || f == WeightFormat::q4_0;
    for (std::int64_t k : blocks ? std::vector<std::int64_t>{0, 32, 96, 288} : std::vector<std::int64_t>{1, 17, 45, 64, 288})
      for (std::int64_t n : {1, 5, 33})
        for (std::int64_t m : {1, 2, 3, 4, 5, 8, 16, 17}) {
          CAPTURE(k, n, m);
          const PackedMatrix w = PackedMatrix::pack(
              ctx.from_vector(gaussian(static_cast<std::size_t>(n * k), static_cast<std::uint32_t>(k + n)), {n, k}), f);
          const std::vector<float> xv = gaussian(static_cast<std::size_t>(m * k), static_cast<std::uint32_t>(m));
          const Tensor x = ctx.from_vector(xv, {m, k});
          const Tensor bias = ctx.from_vector(gaussian(static_cast<std::size_t>(n), 5));
          const std::vector<float> native = qd::linear_using(qd::LinearKernel::native, x, w, bias).to_vector<float>();
          const std::vector<float> portable =
              qd::linear_using(qd::LinearKernel::portable, x, w, bias).to_vector<float>();
          const Product mag = reference(rounded_activations(xv, k, f), as_double(w.dequantize().to_vector<float>()), m,
                                        n, k);
          for (std::size_t i = 0; i < native.size(); ++i)
            CHECK(std::abs(native[i] - portable[i]) <= 2e-6 * (mag.magnitude[i] + 4) + 1e-6);
        }
  }
}

TEST_CASE("quant: bad matrices, operands and outputs are refused, leaking nothing", "[infer][quant]") {
  TestContext ctx;
  const Tensor w64 = ctx.ones({4, 64});
  const PackedMatrix w = PackedMatrix::pack(w64, WeightFormat::q8_0);
  // Packing and wrapping.
  CHECK_THAT(FORGE_REQUIRE_ERROR(shape, "PackedMatrix::pack", PackedMatrix::pack(ctx.ones({4, 33}), WeightFormat::q4_0)),
             Catch::Contains("33 cols"));
  FORGE_REQUIRE_ERROR(dtype, "PackedMatrix::pack", PackedMatrix::pack(ctx.ones({4, 32}, DType::i32), WeightFormat::q8_0));
  FORGE_REQUIRE_ERROR(shape, "PackedMatrix::pack", PackedMatrix::pack(ctx.ones({4, 32, 1}), WeightFormat::q8_0));
  FORGE_REQUIRE_ERROR(invalid_argument, "PackedMatrix::pack", PackedMatrix::pack(Tensor(), WeightFormat::f32));
  std::vector<float> bad(64, 1.0f);
  bad[40] = NAN;
  const Tensor nan_weight = ctx.from_vector(bad, {2, 32});
  bad[40] = 1e7f;  // d = 1e7 / 127 overflows f16
  const Tensor huge_weight = ctx.from_vector(bad, {2, 32});
  const auto before = ctx.stats().outstanding;
  CHECK_THAT(FORGE_REQUIRE_ERROR(invalid_argument, "PackedMatrix::pack", PackedMatrix::pack(nan_weight, WeightFormat::q4_0)),
             Catch::Contains("row 1"));
  FORGE_REQUIRE_ERROR(invalid_argument, "PackedMatrix::pack", PackedMatrix::pack(huge_weight, WeightFormat::q8_0));
  CHECK(ctx.stats().outstanding == before);  // the row scratch went back
  CHECK_THAT(FORGE_REQUIRE_ERROR(invalid_argument, "PackedMatrix::wrap",
                                 PackedMatrix::wrap(ctx.zeros({4 * 34 - 1}, DType::u8), WeightFormat::q8_0, 4, 32)),
             Catch::Contains("135 bytes") && Catch::Contains("136 bytes"));
  FORGE_REQUIRE_ERROR(dtype, "PackedMatrix::wrap", PackedMatrix::wrap(ctx.zeros({4, 32}), WeightFormat::bf16, 4, 32));
  FORGE_REQUIRE_ERROR(shape, "PackedMatrix::wrap", PackedMatrix::wrap(ctx.zeros({4 * 18}, DType::u8), WeightFormat::q4_0, 4, 16 + 16 + 1));
  FORGE_REQUIRE_ERROR(invalid_argument, "PackedMatrix::wrap",
                      PackedMatrix::wrap(ctx.zeros({32, 4}).t(), WeightFormat::f32, 4, 32));
  FORGE_REQUIRE_ERROR(invalid_argument, "PackedMatrix::wrap", PackedMatrix::wrap(ctx.zeros({4}), WeightFormat::f32, -1, 4));
  // linear's operands.
  const Tensor x = ctx.ones({2, 64});
  FORGE_REQUIRE_ERROR(dtype, "infer::linear", forge::infer::linear(x.to(DType::f64), w));
  CHECK_THAT(FORGE_REQUIRE_ERROR(shape, "infer::linear", forge::infer::linear(ctx.ones({2, 32}), w)),
             Catch::Contains("takes 64"));
  FORGE_REQUIRE_ERROR(invalid_argument, "infer::linear", forge::infer::linear(x, PackedMatrix()));
  FORGE_REQUIRE_ERROR(dtype, "infer::linear", forge::infer::linear(x, w, ctx.ones({4}, DType::f64)));
  CHECK_THAT(FORGE_REQUIRE_ERROR(shape, "infer::linear", forge::infer::linear(x, w, ctx.ones({5}))),
             Catch::Contains("[4]"));
  FORGE_REQUIRE_ERROR(shape, "infer::linear", forge::infer::linear(x, w, ctx.ones({1, 4})));
  FORGE_REQUIRE_ERROR(invalid_argument, "infer::linear", forge::infer::linear(Tensor(), w));
  Tensor trainable = ctx.ones({2, 64}).requires_grad_();
  CHECK_THAT(FORGE_REQUIRE_ERROR(invalid_argument, "infer::linear", forge::infer::linear(trainable, w)),
             Catch::Contains("requires grad"));
  {
    forge::autograd::NoGradGuard no_grad;
    CHECK(forge::infer::linear(trainable, w).to_vector<float>() == forge::infer::linear(x, w).to_vector<float>());
  }
  // linear_into's out.
  Tensor wrong = ctx.zeros({2, 5});
  FORGE_REQUIRE_ERROR(shape, "infer::linear_into", forge::infer::linear_into(wrong, x, w));
  Tensor wrong_dtype = ctx.zeros({2, 4}, DType::f64);
  FORGE_REQUIRE_ERROR(dtype, "infer::linear_into", forge::infer::linear_into(wrong_dtype, x, w));
  Tensor expanded = ctx.zeros({1, 4}).expand({2, 4});
  FORGE_REQUIRE_ERROR(invalid_argument, "infer::linear_into", forge::infer::linear_into(expanded, x, w));
  Tensor both = ctx.zeros({2, 68});
  Tensor over_x = both.narrow(1, 0, 4);
  CHECK_THAT(FORGE_REQUIRE_ERROR(invalid_argument, "infer::linear_into",
                                 forge::infer::linear_into(over_x, both.narrow(1, 0, 64), w)),
             Catch::Contains("overlaps x"));
}

TEST_CASE("quant: a device tensor is refused: the kernels are host-only", "[infer][quant][device]") {
  struct EmulatedCuda {
    static std::unique_ptr<forge::detail::DeviceRuntime> make(forge::Device, std::size_t max_cached_bytes) {
      return std::make_unique<forge::detail::DeviceRuntime>(
          forge::backend::cpu_backend(), 1, std::make_unique<forge::detail::EmulatedDevice>(SIZE_MAX, 0),
          forge::cpu::host_executor(1), max_cached_bytes);
    }
    EmulatedCuda() { forge::detail::set_accelerator_factory_for_testing(&make); }
    ~EmulatedCuda() { forge::detail::set_accelerator_factory_for_testing(nullptr); }
  } emulated;
  TestContext ctx(forge::ExecContextOptions{.device = forge::Device::cuda(0), .threads = 1});
  const Tensor on_device = ctx.ones({2, 32});
  const PackedMatrix w = PackedMatrix::pack(on_device.cpu(), WeightFormat::bf16);
  CHECK_THAT(FORGE_REQUIRE_ERROR(device, "infer::linear", forge::infer::linear(on_device, w)),
             Catch::Contains("cuda:0") && Catch::Contains("host only"));
  FORGE_REQUIRE_ERROR(device, "PackedMatrix::pack", PackedMatrix::pack(on_device, WeightFormat::q8_0));
  FORGE_REQUIRE_ERROR(device, "PackedMatrix::wrap", PackedMatrix::wrap(on_device, WeightFormat::f32, 2, 32));
  // A host x in the same context computes (on the host).
  CHECK(forge::infer::linear(on_device.cpu(), w).to_vector<float>() == std::vector<float>(4, 32.0f));
}

TEST_CASE("quant: quantize writes a packed checkpoint that read_packed maps without a copy", "[infer][quant]") {
  TempDir dir;
  TestContext ctx;
  const Tensor w = ctx.from_vector(gaussian(48 * 96, 21), {48, 96});
  const Tensor head = ctx.from_vector(gaussian(16 * 64, 22), {16, 64});
  const Tensor bias = ctx.from_vector(gaussian(48, 23));
  const Tensor odd = ctx.from_vector(gaussian(8 * 33, 24), {8, 33});  // cols % 32 != 0: stays f32
  const Tensor ids = ctx.arange(5, DType::i64);
  forge::io::save_safetensors(dir / "plain.safetensors",
                              {{"layer.weight", w}, {"head.weight", head}, {"layer.bias", bias}, {"odd.weight", odd},
                               {"ids", ids}},
                              {{"model", "tiny"}});
  for (WeightFormat f : kFormats) {
    CAPTURE(forge::infer::format_name(f));
    const fs::path path = dir / (std::string("packed_") + forge::infer::format_name(f) + ".safetensors");
    forge::quantize(dir / "plain.safetensors", path, f);
    const auto before = ctx.stats();
    forge::infer::PackedCheckpoint ck = forge::infer::read_packed(ctx, path);
    CHECK(ctx.stats().acquires == before.acquires);  // nothing from the pool: the bytes are the file's
    CHECK(ck.mapped_bytes == fs::file_size(path));
    CHECK(ck.metadata == forge::io::Metadata{{"model", "tiny"}});
    REQUIRE(ck.packed.size() == 2);
    REQUIRE(ck.tensors.size() == 3);
    for (const auto& [name, original] : {std::pair{"layer.weight", w}, std::pair{"head.weight", head}}) {
      const PackedMatrix& m = ck.packed.at(name);
      CHECK(m.format() == f);
      CHECK(m.rows() == original.shape()[0]);
      CHECK(m.cols() == original.shape()[1]);
      CHECK(bytes_of(m.storage()) == bytes_of(PackedMatrix::pack(original, f).storage()));
      CHECK(inside_mapping_of(m.storage().raw_data(), path));
      CHECK_FALSE(m.storage().buffer()->pooled());
    }
    CHECK(ck.tensors.at("layer.bias").to_vector<float>() == bias.to_vector<float>());
    CHECK(ck.tensors.at("odd.weight").to_vector<float>() == odd.to_vector<float>());
    CHECK(ck.tensors.at("ids").to_vector<std::int64_t>() == ids.to_vector<std::int64_t>());
    CHECK(inside_mapping_of(ck.tensors.at("layer.bias").raw_data(), path));
    const Tensor x = ctx.from_vector(gaussian(2 * 96, 25), {2, 96});
    CHECK(forge::infer::linear(x, ck.packed.at("layer.weight"), ck.tensors.at("layer.bias")).to_vector<float>() ==
          forge::infer::linear(x, PackedMatrix::pack(w, f), bias).to_vector<float>());
  }
  // A plain checkpoint reads as tensors only; a chosen selection converts
  // only what it accepts; a packed file converts again from its values.
  const forge::infer::PackedCheckpoint plain = forge::infer::read_packed(ctx, dir / "plain.safetensors");
  CHECK(plain.packed.empty());
  CHECK(plain.tensors.size() == 5);
  forge::quantize(dir / "plain.safetensors", dir / "head.safetensors", WeightFormat::q8_0,
                  [](std::string_view name, const Tensor&) { return name == "head.weight"; });
  const forge::infer::PackedCheckpoint only_head = forge::infer::read_packed(ctx, dir / "head.safetensors");
  CHECK(only_head.packed.size() == 1);
  CHECK(only_head.packed.count("head.weight") == 1);
  forge::quantize(dir / "packed_q8_0.safetensors", dir / "again.safetensors", WeightFormat::q4_0);
  const forge::infer::PackedCheckpoint again = forge::infer::read_packed(ctx, dir / "again.safetensors");
  CHECK(again.packed.at("layer.weight").format() == WeightFormat::q4_0);
  CHECK(bytes_of(again.packed.at("layer.weight").storage()) ==
        bytes_of(PackedMatrix::pack(PackedMatrix::pack(w, WeightFormat::q8_0).dequantize(), WeightFormat::q4_0).storage()));
  // A selected tensor that cannot convert is named.
  CHECK_THAT(FORGE_REQUIRE_ERROR(invalid_argument, "quantize",
                                 forge::quantize(dir / "plain.safetensors", dir / "bad.safetensors", WeightFormat::q4_0,
                                                 [](std::string_view, const Tensor&) { return true; })),
             Catch::Contains("'ids'") || Catch::Contains("'layer.bias'") || Catch::Contains("'odd.weight'"));
  CHECK_FALSE(fs::exists(dir / "bad.safetensors"));
}

TEST_CASE("quant: read_packed refuses metadata that does not describe a packed tensor, naming file and tensor",
          "[infer][quant]") {
  TempDir dir;
  TestContext ctx;
  const Tensor bytes = ctx.zeros({4, 2 * 18}, DType::u8);  // a q4_0 [4, 64]
  const Tensor f32 = ctx.zeros({4, 64});
  struct Case {
    const char* what;
    forge::io::Metadata metadata;
    const char* says;
  };
  const Case cases[] = {
      {"unknown format", {{"forge.format.w", "q5_1"}, {"forge.shape.w", "4,64"}}, "unknown format \"q5_1\""},
      {"no shape", {{"forge.format.w", "q4_0"}}, "no \"forge.shape.w\""},
      {"bad shape", {{"forge.format.w", "q4_0"}, {"forge.shape.w", "4;64"}}, "\"4;64\""},
      {"negative shape", {{"forge.format.w", "q4_0"}, {"forge.shape.w", "-4,64"}}, "\"-4,64\""},
      {"trailing text", {{"forge.format.w", "q4_0"}, {"forge.shape.w", "4,64x"}}, "\"4,64x\""},
      {"bytes for another shape", {{"forge.format.w", "q4_0"}, {"forge.shape.w", "4,96"}}, "144 bytes"},
      {"cols not blocks", {{"forge.format.w", "q4_0"}, {"forge.shape.w", "8,16"}}, "16 cols"},
      {"dtype of another format", {{"forge.format.f", "q8_0"}, {"forge.shape.f", "4,64"}}, "must be u8"},
      {"missing tensor", {{"forge.format.gone", "q8_0"}, {"forge.shape.gone", "4,64"}}, "'gone'"},
      {"shape without format", {{"forge.shape.w", "4,64"}}, "no \"forge.format.w\""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const fs::path path = dir / "bad.safetensors";
    forge::io::save_safetensors(path, {{"w", bytes}, {"f", f32}}, c.metadata);
    const std::string msg = FORGE_REQUIRE_ERROR(io, "read_packed", forge::infer::read_packed(ctx, path));
    CHECK_THAT(msg, Catch::Contains(path.string()) && Catch::Contains(c.says));
  }
}
