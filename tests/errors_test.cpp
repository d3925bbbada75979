// Bad input across the API (DESIGN.md section 11): each gets a forge::Error
// with the right code, a message that starts with "[op]" and shows the
// offending values, and leaves the pool's outstanding count as it was (and
// the inputs untouched).

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "support.h"

namespace {

using forge::DType;
using forge::ErrorCode;
using forge::Shape;
using forge::Tensor;
using forge_test::TestContext;

// Runs fn, requires the error (code, "[op]" prefix), that the message shows
// each of `shows`, and that ctx's pool has as many outstanding buffers after
// as before. Returns the message.
template <typename Fn>
std::string expect_clean_failure(TestContext& ctx, ErrorCode code, const std::string& op,
                                 std::initializer_list<const char*> shows, Fn&& fn) {
  const auto before = ctx.stats().outstanding;
  const auto live = ctx.stats().live_bytes;
  const std::string msg = forge_test::expect_error(code, op, std::forward<Fn>(fn));
  INFO("message: " << msg);
  for (const char* s : shows) CHECK_THAT(msg, Catch::Contains(s));
  CHECK(ctx.stats().outstanding == before);
  CHECK(ctx.stats().live_bytes == live);
  return msg;
}

}  // namespace

TEST_CASE("errors: forge::Error is a std::runtime_error carrying its code") {
  TestContext ctx;
  try {
    (void)forge::add(ctx.ones({2}), ctx.ones({3}));
    FAIL("no error");
  } catch (const std::runtime_error& e) {
    const auto* fe = dynamic_cast<const forge::Error*>(&e);
    REQUIRE(fe != nullptr);
    CHECK(fe->code() == ErrorCode::shape);
    CHECK(std::string(e.what()).rfind("[add] ", 0) == 0);
  }
  CHECK(forge::to_string(ErrorCode::shape) == "shape");
  CHECK(forge::to_string(ErrorCode::out_of_range) == "out_of_range");
  CHECK(forge::to_string(ErrorCode::invalid_argument) == "invalid_argument");
}

TEST_CASE("errors: shapes that do not broadcast are a shape error showing both shapes") {
  TestContext ctx;
  const Tensor a = ctx.ones({2, 3}), b = ctx.ones({4, 3});
  expect_clean_failure(ctx, ErrorCode::shape, "add", {"[2, 3]", "[4, 3]"}, [&] { (void)forge::add(a, b); });
  expect_clean_failure(ctx, ErrorCode::shape, "mul", {"[2, 3]", "[4, 3]"}, [&] { (void)forge::mul(a, b); });
  // Also when the dtypes differ (no converted temporary may stay behind).
  const Tensor l = ctx.ones({4, 3}, DType::i64);
  expect_clean_failure(ctx, ErrorCode::shape, "add", {"[2, 3]", "[4, 3]"}, [&] { (void)forge::add(a, l); });
  expect_clean_failure(ctx, ErrorCode::shape, "mul", {"[4, 3]", "[5]"}, [&] { (void)forge::mul(l, ctx.ones({5})); });
  Tensor out = ctx.zeros({2, 3});
  expect_clean_failure(ctx, ErrorCode::shape, "add_into", {"[2, 3]", "[4, 3]"}, [&] { forge::add_into(out, a, b); });
  expect_clean_failure(ctx, ErrorCode::shape, "copy_", {"[4, 3]", "[2, 3]"}, [&] { out.copy_(b); });
  expect_clean_failure(ctx, ErrorCode::shape, "broadcast_to", {"[2, 3]", "[4, 3]"}, [&] {
    (void)a.broadcast_to({4, 3});
  });
  CHECK(out.to_vector<float>() == std::vector<float>(6, 0.0f));
}

TEST_CASE("errors: narrow past the end is out_of_range and shows start, length and size") {
  TestContext ctx;
  const Tensor t = ctx.zeros({4, 9});
  const std::string msg =
      expect_clean_failure(ctx, ErrorCode::out_of_range, "narrow", {"7", "4", "9"}, [&] { (void)t.narrow(1, 7, 4); });
  CHECK(msg == "[narrow] start 7 + length 4 exceeds dimension 1 of size 9");
  expect_clean_failure(ctx, ErrorCode::out_of_range, "narrow", {"5", "4"}, [&] { (void)t.narrow(0, 5, 0); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "narrow", {"2"}, [&] { (void)t.narrow(2, 0, 1); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "select", {"4"}, [&] { (void)t.select(0, 4); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "size", {"2"}, [&] { (void)t.size(2); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "stride", {"-3"}, [&] { (void)t.stride(-3); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "view_with_strides", {"[4, 10]"}, [&] {
    (void)t.view_with_strides({4, 10}, {9, 1}, 0);
  });
}

TEST_CASE("errors: a rank above 8 is invalid_argument, from unsqueeze, Shape and reshape") {
  TestContext ctx;
  const Tensor r8 = ctx.zeros({1, 1, 1, 1, 1, 1, 1, 2});
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "unsqueeze", {"9", "8"}, [&] { (void)r8.unsqueeze(3); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "shape", {"9"}, [&] {
    (void)Shape({1, 2, 3, 4, 5, 6, 7, 8, 9});
  });
  // The 9-dim shape argument is refused while it is being built, before reshape or zeros run.
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "shape", {"9"}, [&] {
    (void)r8.reshape({1, 1, 1, 1, 1, 1, 1, 1, 2});
  });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "shape", {"9"}, [&] {
    (void)ctx.zeros({1, 1, 1, 1, 1, 1, 1, 1, 1});
  });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "shape", {"9"}, [&] {
    (void)r8.expand({1, 1, 1, 1, 1, 1, 1, 1, 2});
  });
  CHECK(r8.shape() == Shape{1, 1, 1, 1, 1, 1, 1, 2});
}

TEST_CASE("errors: negative sizes are invalid_argument from the creating call, showing the size") {
  TestContext ctx;
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "empty", {"-1"}, [&] { (void)ctx.empty({-1}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "full", {"-2"}, [&] { (void)ctx.full({3, -2}, 1.0); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "from_vector", {"-1"},
                       [&] { (void)ctx.from_vector<float>({}, {-1}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "from_vector", {"-2"}, [&] {
    (void)ctx.from_vector<float>({1, 2}, {-1, -2});
  });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "rand", {"-5"}, [&] { (void)ctx.rand({-5}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "randn", {"-5"}, [&] { (void)ctx.randn({2, -5}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "eye", {"-3"}, [&] { (void)ctx.eye(-3); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "linspace", {"-1"}, [&] { (void)ctx.linspace(0, 1, -1); });
  const Tensor t = ctx.zeros({6});
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "reshape", {"-2"}, [&] { (void)t.reshape({-2, -3}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "view_with_strides", {"-1"},
                       [&] { (void)t.view_with_strides({-1}, {1}, 0); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "broadcast_to", {"-4"}, [&] {
    (void)t.broadcast_to({-4, 6});
  });
}

TEST_CASE("errors: zeros and ones with a negative size name zeros and ones") {
  TestContext ctx;
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "zeros", {"-1"}, [&] { (void)ctx.zeros({-1}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "ones", {"-3"}, [&] { (void)ctx.ones({2, -3}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "zeros", {"-1"}, [&] { (void)forge::zeros({-1}); });
}

TEST_CASE("errors: tensors of two contexts do not mix (device), and neither pool leaks") {
  TestContext ctx1;
  TestContext ctx2;
  const Tensor a = ctx1.ones({3}), b = ctx2.ones({3});
  Tensor out1 = ctx1.zeros({3});
  const auto before2 = ctx2.stats().outstanding;
  expect_clean_failure(ctx1, ErrorCode::device, "add", {}, [&] { (void)forge::add(a, b); });
  expect_clean_failure(ctx1, ErrorCode::device, "mul", {}, [&] { (void)forge::mul(b, a); });
  expect_clean_failure(ctx1, ErrorCode::device, "add", {}, [&] { (void)(a + b); });
  expect_clean_failure(ctx1, ErrorCode::device, "add_into", {}, [&] { forge::add_into(out1, a, b); });
  expect_clean_failure(ctx1, ErrorCode::device, "mul_into", {}, [&] { forge::mul_into(out1, b, b); });
  expect_clean_failure(ctx1, ErrorCode::device, "relu_into", {}, [&] { forge::relu_into(out1, b); });
  expect_clean_failure(ctx1, ErrorCode::device, "copy_", {}, [&] { out1.copy_(b); });
  // Also when the shapes or dtypes differ (a converted temporary must not be made first).
  expect_clean_failure(ctx1, ErrorCode::device, "add", {}, [&] { (void)forge::add(a, ctx2.ones({3}, DType::i64)); });
  CHECK(ctx2.stats().outstanding == before2);
  CHECK(out1.to_vector<float>() == std::vector<float>{0, 0, 0});
  // Same-context ops still work.
  CHECK(forge::add(a, a).to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("errors: a write through an expanded view is invalid_argument and writes nothing") {
  TestContext ctx;
  Tensor base = ctx.from_vector<float>({1, 2}, {2, 1});
  Tensor e = base.expand({2, 3});
  const std::uint32_t v = base.version();
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "fill_", {"expanded"}, [&] { e.fill_(0); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "copy_", {"expanded"}, [&] { e.copy_(ctx.zeros({2, 3})); });
  const Tensor x = ctx.zeros({2, 3});
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "add_into", {"expanded"}, [&] { forge::add_into(e, x, x); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "mul_into", {"expanded"}, [&] { forge::mul_into(e, x, x); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "relu_into", {"expanded"}, [&] { forge::relu_into(e, x); });
  CHECK(base.to_vector<float>() == std::vector<float>{1, 2});
  CHECK(base.version() == v);
}

TEST_CASE("errors: out partially overlapping an input is invalid_argument and writes nothing") {
  TestContext ctx;
  Tensor buf = ctx.arange(8);
  Tensor out = buf.narrow(0, 0, 4);
  const Tensor in = buf.narrow(0, 1, 4);
  const std::uint32_t v = buf.version();
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "add_into", {"overlap"},
                       [&] { forge::add_into(out, in, in); });
  CHECK(buf.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(buf.version() == v);
}

TEST_CASE("errors: undefined tensors are invalid_argument naming the op, never a crash") {
  TestContext ctx;
  const Tensor u;
  const Tensor x = ctx.ones({2});
  Tensor out = ctx.zeros({2});
  Tensor uw;
  auto expect_undefined = [&](const std::string& op, auto&& fn) {
    expect_clean_failure(ctx, ErrorCode::invalid_argument, op, {"undefined"}, fn);
  };
  expect_undefined("add", [&] { (void)forge::add(u, x); });
  expect_undefined("add", [&] { (void)forge::add(x, u); });
  expect_undefined("mul", [&] { (void)forge::mul(u, u); });
  expect_undefined("relu", [&] { (void)forge::relu(u); });
  expect_undefined("add_into", [&] { forge::add_into(uw, x, x); });
  expect_undefined("add_into", [&] { forge::add_into(out, x, u); });
  expect_undefined("relu_into", [&] { forge::relu_into(out, u); });
  expect_undefined("clone", [&] { (void)u.clone(); });
  expect_undefined("contiguous", [&] { (void)u.contiguous(); });
  expect_undefined("to", [&] { (void)u.to(DType::f64); });
  expect_undefined("fill_", [&] { uw.fill_(1); });
  expect_undefined("copy_", [&] { uw.copy_(x); });
  expect_undefined("copy_", [&] { out.copy_(u); });
  expect_undefined("item", [&] { (void)u.item<float>(); });
  expect_undefined("data_ptr", [&] { (void)u.data_ptr<float>(); });
  expect_undefined("clone_view", [&] { (void)u.clone_view(); });
  expect_undefined("view_with_strides", [&] { (void)u.view_with_strides({1}, {1}, 0); });
  expect_undefined("view", [&] { (void)u.view({1}); });
  expect_undefined("reshape", [&] { (void)u.reshape({1}); });
  expect_undefined("broadcast_to", [&] { (void)u.broadcast_to({1}); });
  expect_undefined("expand", [&] { (void)u.expand({1}); });
  expect_undefined("narrow", [&] { (void)u.narrow(0, 0, 1); });
  expect_undefined("slice", [&] { (void)u.slice(0, 0, 1); });
  expect_undefined("select", [&] { (void)u.select(0, 0); });
  expect_undefined("permute", [&] { (void)u.permute({0}); });
  expect_undefined("transpose", [&] { (void)u.transpose(0, 1); });
  expect_undefined("t", [&] { (void)u.t(); });
  expect_undefined("squeeze", [&] { (void)u.squeeze(); });
  expect_undefined("unsqueeze", [&] { (void)u.unsqueeze(0); });
  expect_undefined("flatten", [&] { (void)u.flatten(); });
  CHECK(out.to_vector<float>() == std::vector<float>{0, 0});
  CHECK_FALSE(u.defined());
  CHECK(u.to_vector<float>().empty());
}

TEST_CASE("errors: dtype mistakes are dtype errors naming the op and the dtypes") {
  TestContext ctx;
  const Tensor f = ctx.ones({2});
  Tensor l = ctx.zeros({2}, DType::i64);
  expect_clean_failure(ctx, ErrorCode::dtype, "relu", {"bool"},
                       [&] { (void)forge::relu(ctx.ones({2}, DType::boolean)); });
  expect_clean_failure(ctx, ErrorCode::dtype, "add_into", {"f32", "i64"}, [&] { forge::add_into(l, f, f); });
  expect_clean_failure(ctx, ErrorCode::dtype, "relu_into", {"f32", "i64"}, [&] { forge::relu_into(l, f); });
  expect_clean_failure(ctx, ErrorCode::dtype, "rand", {"i32"}, [&] { (void)ctx.rand({2}, DType::i32); });
  expect_clean_failure(ctx, ErrorCode::dtype, "randn", {"bool"}, [&] { (void)ctx.randn({2}, DType::boolean); });
  expect_clean_failure(ctx, ErrorCode::dtype, "data_ptr", {"f32", "i64"}, [&] { (void)f.data_ptr<std::int64_t>(); });
  CHECK(l.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0});
}

TEST_CASE("errors: bad counts and arguments of the creation calls") {
  TestContext ctx;
  expect_clean_failure(ctx, ErrorCode::shape, "from_vector", {"5", "[2, 2]"}, [&] {
    (void)ctx.from_vector<float>({1, 2, 3, 4, 5}, {2, 2});
  });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "arange", {"0"}, [&] { (void)ctx.arange(0, 1, 0); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "arange", {"-1"}, [&] { (void)ctx.arange(0, 3, -1); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "item", {"[3]", "3"},
                       [&] { (void)ctx.zeros({3}).item<float>(); });
  float data[2] = {1, 2};
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "from_blob", {},
                       [&] { (void)ctx.from_blob(nullptr, {2}, DType::f32); });
  CHECK(ctx.from_blob(data, {2}, DType::f32).to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("errors: bad view arguments name the view op and show the values") {
  TestContext ctx;
  const Tensor t = ctx.zeros({2, 3, 4});
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "permute", {"[0, 0, 1]"}, [&] { (void)t.permute({0, 0, 1}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "permute", {"2", "3"}, [&] { (void)t.permute({0, 1}); });
  expect_clean_failure(ctx, ErrorCode::shape, "reshape", {"[5, 5]", "24"}, [&] { (void)t.reshape({5, 5}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "view", {"[4, 3, 2]"},
                       [&] { (void)t.transpose(0, 2).view({24}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "slice", {"0"}, [&] { (void)t.slice(0, 0, 2, 0); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "t", {"[2, 3, 4]"}, [&] { (void)t.t(); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "flatten", {"2", "1"}, [&] { (void)t.flatten(2, 1); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "transpose", {"3"}, [&] { (void)t.transpose(0, 3); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "squeeze", {"-4"}, [&] { (void)t.squeeze(-4); });
}

TEST_CASE("errors: accessors of an undefined tensor throw invalid_argument instead of reading null") {
  TestContext ctx;
  const Tensor u;
  auto undefined = [&](auto&& fn) {
    expect_clean_failure(ctx, ErrorCode::invalid_argument, "tensor", {"undefined"}, fn);
  };
  undefined([&] { (void)u.shape(); });
  undefined([&] { (void)u.strides(); });
  undefined([&] { (void)u.dim(); });
  undefined([&] { (void)u.numel(); });
  undefined([&] { (void)u.dtype(); });
  undefined([&] { (void)u.offset(); });
  undefined([&] { (void)u.nbytes(); });
  undefined([&] { (void)u.buffer(); });
  undefined([&] { (void)u.version(); });
  undefined([&] { (void)u.is_contiguous(); });
  undefined([&] { (void)u.size(0); });
  CHECK(u.str() == "[ Tensor (undefined) ]");
}

TEST_CASE("errors: huge indices, strides and offsets are errors, never integer overflow") {
  TestContext ctx;
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const std::int64_t small = std::numeric_limits<std::int64_t>::min();
  const Tensor t = ctx.zeros({4, 9});
  expect_clean_failure(ctx, ErrorCode::out_of_range, "narrow", {"9"}, [&] { (void)t.narrow(1, 2, big); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "narrow", {"9"}, [&] { (void)t.narrow(1, big, 1); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "narrow", {"9"}, [&] { (void)t.narrow(1, small, 1); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "select", {"4"}, [&] { (void)t.select(0, small); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "unsqueeze", {}, [&] { (void)t.unsqueeze(small); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "view_with_strides", {},
                       [&] { (void)t.view_with_strides({3}, {big}, 0); });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "view_with_strides", {}, [&] {
    (void)t.view_with_strides({2, 2}, {1, 1}, big);
  });
  expect_clean_failure(ctx, ErrorCode::out_of_range, "view_with_strides", {},
                       [&] { (void)t.view_with_strides({3}, {small / 2}, 35); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "empty", {}, [&] { (void)ctx.empty({big, 2}); });
  expect_clean_failure(ctx, ErrorCode::invalid_argument, "empty", {}, [&] {
    (void)ctx.empty({std::int64_t{1} << 32, std::int64_t{1} << 32});
  });
  // Huge steps and bounds clamp like Python instead of overflowing.
  CHECK(t.slice(1, small, big).shape() == Shape{4, 9});
  CHECK(t.slice(1, 0, 9, big).shape() == Shape{4, 1});
  CHECK(t.slice(1, 3, big, big).shape() == Shape{4, 1});
}

// ---------------------------------------------------------------------------
// Sizes and layouts at the edge of int64

TEST_CASE("errors: a broadcast whose element count overflows int64 is refused before allocating") {
  TestContext ctx;
  const Tensor a = ctx.ones({1}).expand({std::int64_t{1} << 32, 1});
  const Tensor b = ctx.ones({1}).expand({1, std::int64_t{1} << 32});
  const std::int64_t baseline = ctx.stats().outstanding;
  const std::string msg = FORGE_REQUIRE_ERROR(invalid_argument, "add", a + b);
  CHECK(msg.find("4294967296") != std::string::npos);
  Tensor out = ctx.zeros({1});
  FORGE_REQUIRE_ERROR(invalid_argument, "mul_into", forge::mul_into(out, a, b));
  CHECK(ctx.stats().outstanding == baseline + 1);
}

TEST_CASE("errors: a shape with a zero extent still has to fit in int64") {
  TestContext ctx;
  const std::int64_t big = std::int64_t{1} << 40;
  FORGE_REQUIRE_ERROR(invalid_argument, "zeros", ctx.zeros({0, big, big}));
  FORGE_REQUIRE_ERROR(invalid_argument, "empty", ctx.empty({big, big, 0}));
  const Tensor e = ctx.zeros({0, 4});
  FORGE_REQUIRE_ERROR(invalid_argument, "reshape", e.reshape({0, big, big}));
  FORGE_REQUIRE_ERROR(invalid_argument, "expand", ctx.zeros({1, 1, 0}).expand({big, big, 0}));
  CHECK(ctx.stats().outstanding == 1);
}

TEST_CASE("errors: empty views take a canonical layout, so no offset arithmetic overflows") {
  TestContext ctx;
  const std::int64_t huge = std::int64_t{1} << 62;
  const Tensor wide = ctx.zeros({0, huge});
  const Tensor picked = wide.select(1, huge - 1);
  CHECK(picked.shape() == Shape{0});
  CHECK(picked.offset() == 0);
  CHECK(picked.clone().numel() == 0);
  const Tensor base = ctx.zeros({4});
  const Tensor odd = base.view_with_strides({0, 2}, {1, std::numeric_limits<std::int64_t>::max()}, 0);
  CHECK(odd.strides() == forge::contiguous_strides(Shape{0, 2}));
  CHECK(odd.clone().numel() == 0);
  const Tensor far = base.view_with_strides({0}, {1}, std::numeric_limits<std::int64_t>::max() / 2);
  CHECK(far.offset() == 0);
  CHECK(far.raw_data() == base.raw_data());
}

TEST_CASE("errors: writing through a view whose elements overlap each other is invalid_argument") {
  TestContext ctx;
  Tensor base = ctx.from_vector<float>({10, 20, 30});
  Tensor out = base.view_with_strides({2, 2}, {1, 1}, 0);  // elements 0,1 / 1,2
  const Tensor one = ctx.ones({2, 2});
  FORGE_REQUIRE_ERROR(invalid_argument, "add_into", forge::add_into(out, out, one));
  FORGE_REQUIRE_ERROR(invalid_argument, "copy_", out.copy_(one));
  FORGE_REQUIRE_ERROR(invalid_argument, "fill_", out.fill_(1.0));
  CHECK(base.to_vector<float>() == std::vector<float>{10, 20, 30});
  // Interleaved but disjoint layouts stay writable.
  Tensor grid = ctx.zeros({6});
  Tensor columns = grid.view({3, 2}).t();  // strides [1, 2]
  columns.fill_(2.0);
  CHECK(grid.to_vector<float>() == std::vector<float>(6, 2.0f));
}

TEST_CASE("errors: size and stride of a 0-dimensional tensor are out_of_range") {
  TestContext ctx;
  const Tensor s = ctx.arange(0, 5).select(0, 1);
  REQUIRE(s.dim() == 0);
  FORGE_REQUIRE_ERROR(out_of_range, "size", s.size(0));
  FORGE_REQUIRE_ERROR(out_of_range, "size", s.size(-1));
  FORGE_REQUIRE_ERROR(out_of_range, "stride", s.stride(0));
}
