// triu, tril and pad against naive loops written here: each output element
// is decided by hand (kept, zero, fill value, or which input element a
// reflect/replicate pad mirrors) and read straight from the input's buffer.
// Random shapes with size-1 and zero-size dims, packed, transposed, stepped
// and offset inputs, every dtype, the _into forms and every error path.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "reference.h"
#include "support.h"

namespace {

using forge::BFloat16;
using forge::Dims;
using forge::DType;
using forge::Half;
using forge::Shape;
using forge::Tensor;
using forge_test::kAllDTypes;
using forge_test::TestContext;
using namespace forge_test::reference;

// ---- triu / tril ----

TEST_CASE("triu and tril: every dtype and layout against the j - i rule", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(23);
  const std::int64_t huge = std::int64_t{1} << 62;
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const int rank = static_cast<int>(pick(rng, 2, 4));
    const Shape s = random_shape(rng, rank);
    const std::int64_t diagonal = iter % 17 == 0 ? (iter % 2 ? huge : -huge) : pick(rng, -5, 5);
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " dtype " << forge::dtype_name(t) << " shape " << s << " diagonal " << diagonal);
    for (const bool upper : {true, false}) {
      auto check = [&](const Tensor& out, const Tensor& in) {
        REQUIRE(out.shape() == s);
        REQUIRE(out.dtype() == t);
        int bad = 0;
        each_index(s, [&](const Dims& idx) {
          const std::int64_t i = idx[rank - 2], j = idx[rank - 1];
          const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
          const double want = keep ? at(in, idx) : 0.0;
          if (at(out, idx) != want && bad++ < 3) FAIL_CHECK((upper ? "triu" : "tril") << " at " << idx);
        });
        CHECK(bad == 0);
      };
      check(upper ? forge::triu(x, diagonal) : forge::tril(x, diagonal), x);
      check(upper ? x.triu(diagonal) : x.tril(diagonal), x);
      Tensor target = ctx.full(s, 1, t);
      if (upper)
        forge::triu_into(target, x, diagonal);
      else
        forge::tril_into(target, x, diagonal);
      check(target, x);
      // exactly in place, through a transposed view
      Tensor copy = x.clone();
      Tensor in_place = x.dim() >= 2 ? copy.transpose(-1, -2).clone().transpose(-1, -2) : copy;
      if (upper)
        forge::triu_into(in_place, in_place, diagonal);
      else
        forge::tril_into(in_place, in_place, diagonal);
      check(in_place, x);
    }
  }
}

TEST_CASE("triu and tril: a large batch runs the parallel path", "[shape_ops]") {
  TestContext ctx(forge_test::context_options(4));
  std::mt19937_64 rng(29);
  const Tensor x = make_exact(ctx, rng, {6, 130, 129}, DType::f32, stepped);
  const Tensor out = forge::tril(x, -3);
  int bad = 0;
  each_index(x.shape(), [&](const Dims& idx) {
    const double want = idx[2] - idx[1] <= -3 ? at(x, idx) : 0.0;
    if (at(out, idx) != want) ++bad;
  });
  CHECK(bad == 0);
}

TEST_CASE("triu and tril: bad input", "[shape_ops]") {
  TestContext ctx;
  const Tensor v = ctx.zeros({3});
  FORGE_REQUIRE_ERROR(shape, "triu", (void)forge::triu(v));
  FORGE_REQUIRE_ERROR(shape, "tril", (void)forge::tril(ctx.zeros({})));
  FORGE_REQUIRE_ERROR(invalid_argument, "triu", (void)forge::triu(Tensor()));
  const Tensor x = ctx.zeros({3, 3});
  Tensor out = ctx.zeros({3, 2});
  FORGE_REQUIRE_ERROR(shape, "triu_into", forge::triu_into(out, x));
  Tensor wrong = ctx.zeros({3, 3}, DType::i32);
  FORGE_REQUIRE_ERROR(dtype, "tril_into", forge::tril_into(wrong, x));
  Tensor big = ctx.zeros({4, 3});
  Tensor a = big.narrow(0, 0, 3), b = big.narrow(0, 1, 3);
  FORGE_REQUIRE_ERROR(invalid_argument, "tril_into", forge::tril_into(a, b));
  TestContext other;
  Tensor foreign = other.zeros({3, 3});
  FORGE_REQUIRE_ERROR(device, "triu_into", forge::triu_into(foreign, x));
}

// ---- pad ----

// The source index a padded output index reads, or -1 for the fill value.
std::int64_t source_index(std::int64_t i, std::int64_t before, std::int64_t size, forge::PadMode mode) {
  const std::int64_t j = i - before;
  switch (mode) {
    case forge::PadMode::constant:
      return (j >= 0 && j < size) ? j : -1;
    case forge::PadMode::reflect:
      return j < 0 ? -j : j >= size ? 2 * (size - 1) - j : j;
    case forge::PadMode::replicate:
      return std::clamp<std::int64_t>(j, 0, size - 1);
  }
  return -1;
}

double fill_in(double value, DType t) {
  if (t == DType::boolean) return value != 0;
  if (forge::is_floating(t)) return value;
  return std::trunc(value);
}

void check_pad(const Tensor& out, const Tensor& x, const Dims& pad, forge::PadMode mode, double value) {
  const int rank = x.dim();
  Shape want = x.shape();
  for (int k = 0; k < pad.size() / 2; ++k) want[rank - 1 - k] += pad[2 * k] + pad[2 * k + 1];
  REQUIRE(out.shape() == want);
  REQUIRE(out.dtype() == x.dtype());
  int bad = 0;
  each_index(want, [&](const Dims& idx) {
    Dims in = idx;
    bool fill = false;
    for (int k = 0; k < pad.size() / 2; ++k) {
      const int d = rank - 1 - k;
      in[d] = source_index(idx[d], pad[2 * k], x.shape()[d], mode);
      fill = fill || in[d] < 0;
    }
    const double expect = fill ? fill_in(value, x.dtype()) : at(x, in);
    if (at(out, idx) != expect && bad++ < 3) FAIL_CHECK("at " << idx << " got " << at(out, idx) << " want " << expect);
  });
  CHECK(bad == 0);
}

TEST_CASE("pad: constant mode, every dtype, with crops, against a naive lookup", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(31);
  for (int iter = 0; iter < 160; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const int rank = static_cast<int>(pick(rng, 1, 4));
    const Shape s = random_shape(rng, rank);
    Dims pad;
    const int pairs = static_cast<int>(pick(rng, 0, rank));
    for (int k = 0; k < pairs; ++k) {
      const std::int64_t size = s[rank - 1 - k];
      const std::int64_t before = pick(rng, -size, 3);
      pad.push_back(before);
      pad.push_back(pick(rng, -(size + std::min<std::int64_t>(before, 0)), 3));  // never below size 0
    }
    // Each dtype sees both a zero and a nonzero value; bool takes 0 and 1 only.
    const double value = (iter / std::size(kAllDTypes)) % 3 == 0 ? 0.0 : t == DType::boolean ? 1.0 : 2.5;
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " dtype " << forge::dtype_name(t) << " shape " << s << " pad " << pad);
    const Tensor out = forge::pad(x, pad, forge::PadMode::constant, value);
    check_pad(out, x, pad, forge::PadMode::constant, value);
    Tensor target = ctx.zeros(out.shape(), t);
    forge::pad_into(target, x, pad, forge::PadMode::constant, value);
    check_pad(target, x, pad, forge::PadMode::constant, value);
  }
}

TEST_CASE("pad: reflect and replicate against a naive lookup", "[shape_ops]") {
  TestContext ctx;
  std::mt19937_64 rng(37);
  for (int iter = 0; iter < 120; ++iter) {
    const DType t = kAllDTypes[iter % std::size(kAllDTypes)];
    const auto mode = iter % 2 ? forge::PadMode::reflect : forge::PadMode::replicate;
    const int rank = static_cast<int>(pick(rng, 1, 4));
    Shape s = random_shape(rng, rank);
    Dims pad;
    const int pairs = static_cast<int>(pick(rng, 1, std::min(rank, 3)));
    for (int k = 0; k < pairs; ++k) {
      std::int64_t& size = s[rank - 1 - k];
      size = std::max<std::int64_t>(size, 1);
      const std::int64_t most = mode == forge::PadMode::reflect ? size - 1 : 4;
      pad.push_back(pick(rng, 0, most));
      pad.push_back(pick(rng, 0, most));
    }
    const Tensor x = make_exact(ctx, rng, s, t, static_cast<int>(rng() % kLayouts));
    INFO("iter " << iter << " shape " << s << " pad " << pad);
    check_pad(forge::pad(x, pad, mode), x, pad, mode, 0);
  }
}

TEST_CASE("pad: a large pad runs the parallel path", "[shape_ops]") {
  TestContext ctx(forge_test::context_options(4));
  std::mt19937_64 rng(41);
  const Tensor x = make_exact(ctx, rng, {3, 200, 150}, DType::bf16, transposed);
  check_pad(forge::pad(x, {2, 3, -1, 4}, forge::PadMode::constant, -1.5), x, {2, 3, -1, 4}, forge::PadMode::constant,
            -1.5);
  check_pad(forge::pad(x, {5, 7, 1, 0}, forge::PadMode::reflect), x, {5, 7, 1, 0}, forge::PadMode::reflect, 0);
}

TEST_CASE("pad: a crop and a pad of 2^62 each leave every element padding, with no overflow", "[shape_ops]") {
  TestContext ctx;
  constexpr std::int64_t k62 = std::int64_t{1} << 62;
  const Tensor x = ctx.from_vector<float>({1, 2, 3}, {3});
  CHECK(forge::pad(x, {-k62, k62}, forge::PadMode::constant, 7.0).to_vector<float>() == std::vector<float>{7, 7, 7});
  CHECK(forge::pad(x, {k62, -k62}, forge::PadMode::constant, 7.0).to_vector<float>() == std::vector<float>{7, 7, 7});
}

TEST_CASE("pad: bad input", "[shape_ops]") {
  TestContext ctx;
  const Tensor x = ctx.zeros({2, 3});
  FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(x, {1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(x, {1, 1, 1, 1, 1, 1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(x, {-2, -2}));
  FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(x, {3, 0}, forge::PadMode::reflect));
  FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(x, {-1, 0}, forge::PadMode::reflect));
  FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(x, {0, -1}, forge::PadMode::replicate));
  FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(ctx.zeros({2, 0}), {1, 1}, forge::PadMode::replicate));
  FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(Tensor(), {1, 1}));
  // Amounts whose sum, or the source index i - before the kernel reads, overflows int64.
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  for (const forge::Dims& p : {forge::Dims{kMin, kMax}, forge::Dims{kMax, kMin}, forge::Dims{kMax, 0},
                               forge::Dims{0, kMax}, forge::Dims{kMin + 3, kMax}, forge::Dims{kMin, 0}}) {
    CAPTURE(p);
    const std::string message = FORGE_REQUIRE_ERROR(invalid_argument, "pad", (void)forge::pad(x, p));
    CHECK(message.find("overflows int64") != std::string::npos);
    Tensor into = ctx.zeros({2, 3});
    FORGE_REQUIRE_ERROR(invalid_argument, "pad_into", forge::pad_into(into, x, p));
  }
  Tensor out = ctx.zeros({2, 4});
  FORGE_REQUIRE_ERROR(shape, "pad_into", forge::pad_into(out, x, {1, 1}));
  Tensor wrong = ctx.zeros({2, 5}, DType::f16);
  FORGE_REQUIRE_ERROR(dtype, "pad_into", forge::pad_into(wrong, x, {1, 1}));
  Tensor big = ctx.zeros({2, 8});
  Tensor part = big.narrow(1, 0, 5);
  const Tensor in = big.narrow(1, 4, 3);
  FORGE_REQUIRE_ERROR(invalid_argument, "pad_into", forge::pad_into(part, in, {1, 1}));
}

}  // namespace
