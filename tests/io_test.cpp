// forge::io: safetensors and .npy round trips (bit-exact, every dtype, any
// layout), zero-copy loading that keeps the mapping alive, and hand-made
// damaged or hostile files, each refused with ErrorCode::io.

#include "forge/io.h"

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "support.h"
#include "temp_dir.h"

using forge::DType;
using forge::Shape;
using forge::StateDict;
using forge::Tensor;
using forge_test::TempDir;
using forge_test::TestContext;
namespace fs = std::filesystem;
namespace io = forge::io;

namespace {

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string le_bytes(std::uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file: length, header padded to a multiple of 8, data.
std::string safetensors_bytes(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return le_bytes(header.size(), 8) + header + data;
}

// The packed bytes of a host tensor.
std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  if (c.nbytes() == 0) return {};
  return {static_cast<const char*>(c.raw_data()), c.nbytes()};
}

// A tensor of random bit patterns (NaN payloads, subnormals, negative zero
// all included for the float types); bool elements are 0 or 1.
Tensor random_bits(TestContext& ctx, const Shape& shape, DType dtype, std::uint32_t seed) {
  const std::size_t nbytes = static_cast<std::size_t>(shape.numel()) * forge::dtype_size(dtype);
  std::vector<std::uint64_t> storage((nbytes + 7) / 8 + 1);
  auto* bytes = reinterpret_cast<unsigned char*>(storage.data());
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < nbytes; ++i)
    bytes[i] = static_cast<unsigned char>(dtype == DType::boolean ? rng() & 1 : rng() & 0xff);
  return ctx.from_blob(storage.data(), shape, dtype).clone();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && bytes_of(a) == bytes_of(b);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Whether this process maps `path` (Linux lists every mapping in /proc/self/maps).
bool mapped(const fs::path& path) { return contains(read_file("/proc/self/maps"), fs::canonical(path).string()); }

// The header of a forge-written or hand-made safetensors file.
nlohmann::json header_of(const fs::path& path) {
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  REQUIRE(n % 8 == 0);
  return nlohmann::json::parse(bytes.substr(8, n));
}

// A valid two-tensor file: "a" F32 [2] at [0, 8], "b" U8 [4] at [8, 12].
const std::string kGoodHeader =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})";
const std::string kGoodData = std::string("\0\0\x80\x3f\0\0\0\x40", 8) + "\x01\x02\x03\x04";

}  // namespace

// ---- safetensors: writing and round trips ----

TEST_CASE("io: safetensors round trip is bit-exact for every dtype") {
  TestContext ctx;
  TempDir dir;
  StateDict sd;
  std::uint32_t seed = 1;
  for (DType dtype : forge_test::kAllDTypes) {
    sd["w." + std::string(forge::dtype_name(dtype))] = random_bits(ctx, {3, 5}, dtype, seed++);
    sd["odd." + std::string(forge::dtype_name(dtype))] = random_bits(ctx, {7}, dtype, seed++);
  }
  io::save_safetensors(dir / "all.safetensors", sd);
  const StateDict back = io::load_safetensors(ctx, dir / "all.safetensors");
  REQUIRE(back.size() == sd.size());
  for (const auto& [name, t] : sd) {
    INFO(name);
    REQUIRE(back.count(name) == 1);
    CHECK(same_bits(back.at(name), t));
    // Larger elements first: every tensor lands aligned and loads without a copy.
    CHECK(reinterpret_cast<std::uintptr_t>(back.at(name).raw_data()) % t.element_size() == 0);
  }
  CHECK(dir.files() == std::vector<std::string>{"all.safetensors"});
}

TEST_CASE("io: safetensors follows the standard layout and names") {
  TestContext ctx;
  TempDir dir;
  StateDict sd{{"b", ctx.ones({2, 3}, DType::f32)},
               {"a", ctx.zeros({4}, DType::u8)},
               {"c", ctx.ones({1}, DType::bf16)},
               {"d", ctx.ones({2}, DType::boolean)},
               {"e", ctx.full({3}, -2, DType::i8)}};
  io::save_safetensors(dir / "m.safetensors", sd, {{"format", "pt"}});
  const nlohmann::json h = header_of(dir / "m.safetensors");
  CHECK(h["__metadata__"] == nlohmann::json{{"format", "pt"}});
  CHECK(h["b"]["dtype"] == "F32");
  CHECK(h["b"]["shape"] == nlohmann::json{2, 3});
  CHECK(h["b"]["data_offsets"] == nlohmann::json{0, 24});  // the 4-byte tensor first
  CHECK(h["c"]["dtype"] == "BF16");
  CHECK(h["c"]["data_offsets"] == nlohmann::json{24, 26});
  CHECK(h["a"]["dtype"] == "U8");
  CHECK(h["a"]["data_offsets"] == nlohmann::json{26, 30});  // then by name among 1-byte tensors
  CHECK(h["d"]["dtype"] == "BOOL");
  CHECK(h["d"]["data_offsets"] == nlohmann::json{30, 32});
  CHECK(h["e"]["dtype"] == "I8");
  CHECK(h["e"]["data_offsets"] == nlohmann::json{32, 35});
  const Tensor e = io::load_safetensors(ctx, dir / "m.safetensors").at("e");
  CHECK(e.dtype() == DType::i8);
  CHECK(e.to_vector<std::int8_t>() == std::vector<std::int8_t>{-2, -2, -2});
  const std::string bytes = read_file(dir / "m.safetensors");
  CHECK(bytes[8] == '{');
}

TEST_CASE("io: safetensors writes non-contiguous, empty and 0-d tensors packed") {
  TestContext ctx;
  TempDir dir;
  const Tensor base = ctx.arange(24, DType::f32).reshape({2, 3, 4});
  StateDict sd{{"transposed", base.transpose(0, 2)},
               {"strided", base.slice(2, 0, 4, 2)},
               {"expanded", ctx.arange(3, DType::i64).expand({4, 3})},
               {"empty", ctx.zeros({0, 3}, DType::f64)},
               {"scalar", ctx.full({}, 2.5, DType::f16)}};
  io::save_safetensors(dir / "v.safetensors", sd);
  const StateDict back = io::load_safetensors(ctx, dir / "v.safetensors");
  for (const auto& [name, t] : sd) {
    INFO(name);
    CHECK(back.at(name).is_contiguous());
    CHECK(same_bits(back.at(name), t));
  }
  CHECK(back.at("scalar").dim() == 0);
  CHECK(back.at("scalar").item<float>() == 2.5f);
  CHECK(back.at("empty").shape() == Shape{0, 3});
}

TEST_CASE("io: safetensors metadata round trips and an empty dict is a valid file") {
  TestContext ctx;
  TempDir dir;
  const io::Metadata metadata{{"epoch", "3"}, {"note", "caf\xc3\xa9 \"quoted\""}, {"", "empty key"}};
  io::save_safetensors(dir / "m.safetensors", {{"x", ctx.ones({2})}}, metadata);
  const io::SafetensorsContents c = io::read_safetensors(ctx, dir / "m.safetensors");
  CHECK(c.metadata == metadata);
  CHECK(c.tensors.size() == 1);

  io::save_safetensors(dir / "none.safetensors", {});
  const io::SafetensorsContents none = io::read_safetensors(ctx, dir / "none.safetensors");
  CHECK(none.tensors.empty());
  CHECK(none.metadata.empty());
}

TEST_CASE("io: loaded safetensors tensors view the mapping and keep it alive") {
  TempDir dir;
  Tensor kept;
  {
    TestContext ctx;
    const Tensor w = ctx.arange(6, DType::f32).reshape({2, 3});
    io::save_safetensors(dir / "w.safetensors", {{"w", w}, {"b", ctx.ones({3})}});
    const auto before = ctx.stats();
    StateDict sd = io::load_safetensors(ctx, dir / "w.safetensors");
    const auto after = ctx.stats();
    CHECK(after.outstanding == before.outstanding);  // no pool buffer: the bytes are the file's
    CHECK(after.acquires == before.acquires);
    CHECK_FALSE(sd.at("w").buffer()->pooled());
    CHECK(mapped(dir / "w.safetensors"));
    kept = sd.at("w");
    sd.clear();  // the mapping lives on in `kept`
    CHECK(mapped(dir / "w.safetensors"));
    CHECK(kept.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});

    // Replacing the file (by rename) leaves the mapped bytes as they were.
    io::save_safetensors(dir / "w.safetensors", {{"w", ctx.zeros({2, 3})}});
    CHECK(kept.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
    CHECK(io::load_safetensors(ctx, dir / "w.safetensors").at("w").to_vector<float>() == std::vector<float>(6, 0.0f));

    // Writing a loaded tensor changes this process's copy, never the file.
    kept.add_(10);
    CHECK(kept.to_vector<float>()[0] == 10.0f);
    CHECK(io::load_safetensors(ctx, dir / "w.safetensors").at("w").to_vector<float>()[0] == 0.0f);
    const fs::path canonical = fs::canonical(dir / "w.safetensors");
    kept = Tensor();  // the last tensor over the first file: it is unmapped
    CHECK_FALSE(contains(read_file("/proc/self/maps"), canonical.string()));
  }
}

TEST_CASE("io: a safetensors tensor at a misaligned offset is loaded as an aligned copy") {
  TestContext ctx;
  TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  write_file(dir / "odd.safetensors", safetensors_bytes(header, std::string("\x07\0\0\x80\x3f\0\0\0\x40", 9)));
  const StateDict sd = io::load_safetensors(ctx, dir / "odd.safetensors");
  CHECK(sd.at("a").to_vector<std::uint8_t>() == std::vector<std::uint8_t>{7});
  CHECK(sd.at("b").to_vector<float>() == std::vector<float>{1.0f, 2.0f});
  CHECK(reinterpret_cast<std::uintptr_t>(sd.at("b").raw_data()) % 4 == 0);
  CHECK_FALSE(sd.at("b").buffer()->pooled());
}

TEST_CASE("io: save_safetensors refuses bad names and tensors and leaves no file behind") {
  TestContext ctx;
  TempDir dir;
  io::save_safetensors(dir / "keep.safetensors", {{"x", ctx.ones({2})}});
  const std::string original = read_file(dir / "keep.safetensors");
  FORGE_REQUIRE_ERROR(invalid_argument, "save_safetensors",
                      io::save_safetensors(dir / "keep.safetensors", {{"__metadata__", ctx.ones({1})}}));
  FORGE_REQUIRE_ERROR(invalid_argument, "save_safetensors",
                      io::save_safetensors(dir / "keep.safetensors", {{"x", Tensor()}}));
  FORGE_REQUIRE_ERROR(invalid_argument, "save_safetensors",
                      io::save_safetensors(dir / "keep.safetensors", {{"bad\xff", ctx.ones({1})}}));
  FORGE_REQUIRE_ERROR(invalid_argument, "save_safetensors",
                      io::save_safetensors(dir / "keep.safetensors", {{"x", ctx.ones({1})}}, {{"k", "\xc3"}}));
  const std::string msg =
      FORGE_REQUIRE_ERROR(io, "save_safetensors", io::save_safetensors(dir / "no/such/dir/x.safetensors", {}));
  CHECK(contains(msg, "x.safetensors"));
  // A header the reader would refuse (over 100 MB) is never written.
  const std::string long_header_msg = FORGE_REQUIRE_ERROR(
      invalid_argument, "save_safetensors",
      io::save_safetensors(dir / "keep.safetensors", {{"x", ctx.ones({1})}}, {{"k", std::string(100'000'000, 'a')}}));
  CHECK(contains(long_header_msg, "longer than 100000000"));
  CHECK(read_file(dir / "keep.safetensors") == original);
  CHECK(dir.files() == std::vector<std::string>{"keep.safetensors"});
}

// ---- safetensors: damaged and hostile files ----

namespace {

// A header of `n` empty U8 tensors "0", "1", ..., each [0] at [0, 0]: the
// cheapest entry a hostile header can repeat.
std::string empty_tensors_header(std::size_t n) {
  std::string header = "{";
  header.reserve(n * 52);
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) header += ',';
    header += '"' + std::to_string(i) + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  }
  return header + '}';
}

}  // namespace

// Note [one pass over the header] (src/io/safetensors.cpp): reading the
// header used to cost O(n^2) in its entries (64 K took minutes, 1 M would take
// hours), so loading the most entries a file may have at all pins the
// near-linear pass. The names are out of order ("10" < "2"), so the reader
// sorts them, its slowest path.
TEST_CASE("io: a safetensors header of 1 M empty tensors loads and one more is refused") {
  TestContext ctx;
  TempDir dir;
  constexpr std::size_t kMaxEntries = std::size_t{1} << 20;
  const fs::path path = dir / "wide.safetensors";
  const std::string header = empty_tensors_header(kMaxEntries);
  write_file(path, safetensors_bytes(header, ""));
  {
    const StateDict sd = io::load_safetensors(ctx, path);
    REQUIRE(sd.size() == kMaxEntries);
    CHECK(sd.at("0").shape() == Shape{0});
    CHECK(sd.at(std::to_string(kMaxEntries - 1)).dtype() == DType::u8);
  }
  // One entry past the limit.
  std::string over = header;
  over.insert(over.size() - 1, R"(,"x":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})");
  write_file(path, safetensors_bytes(over, ""));
  const std::string msg = FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path));
  CHECK(contains(msg, "more than 1048576 tensors"));
  CHECK(contains(msg, "wide.safetensors"));
}

TEST_CASE("io: a truncated safetensors file is refused wherever it is cut") {
  TestContext ctx;
  TempDir dir;
  const std::string good = safetensors_bytes(kGoodHeader, kGoodData);
  write_file(dir / "good.safetensors", good);
  CHECK(io::load_safetensors(ctx, dir / "good.safetensors").size() == 2);
  for (std::size_t cut :
       {std::size_t{0}, std::size_t{4}, std::size_t{7}, std::size_t{8}, std::size_t{9}, std::size_t{40},
        good.size() - kGoodData.size() - 1, good.size() - kGoodData.size(), good.size() - 5, good.size() - 1}) {
    INFO("cut at " << cut);
    const fs::path path = dir / ("cut" + std::to_string(cut) + ".safetensors");
    write_file(path, good.substr(0, cut));
    const std::string msg = FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path));
    CHECK(contains(msg, path.filename().string()));
    CHECK_FALSE(mapped(path));  // a refused file is unmapped again
    fs::remove(path);
  }
}

TEST_CASE("io: a safetensors header length past the end or over the limit is refused") {
  TestContext ctx;
  TempDir dir;
  const fs::path path = dir / "bad.safetensors";
  std::string bytes = safetensors_bytes(kGoodHeader, kGoodData);
  write_file(path, le_bytes(bytes.size() - 7, 8) + bytes.substr(8));
  CHECK(contains(FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path)), "past the end"));
  write_file(path, le_bytes(100'000'001, 8) + bytes.substr(8));
  CHECK(contains(FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path)), "exceeds"));
  write_file(path, le_bytes(~std::uint64_t{0}, 8) + bytes.substr(8));
  FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path));
  write_file(path, le_bytes(0, 8));
  FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path));
}

TEST_CASE("io: safetensors headers that are not the format's JSON are refused") {
  TestContext ctx;
  TempDir dir;
  const fs::path path = dir / "bad.safetensors";
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& header :
       {std::string(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"),  // unterminated
        std::string(R"({"a":{"dtype":"F32",,"shape":[2],"data_offsets":[0,8]}})"),
        std::string("{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"),  // bad UTF-8
        std::string(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})") + std::string(1, '\0') + "x",
        std::string(R"(["a"])"), std::string(R"(  {"a":1})"), std::string(R"({"a":[1]})"),
        std::string(R"({"a":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})"),
        std::string(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":{}}})"),
        std::string(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x)"), std::string("{\"a\":") + deep + "}",
        deep}) {
    INFO(header.substr(0, 80));
    write_file(path, safetensors_bytes(header, std::string(8, '\0')));
    FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path));
  }
}

TEST_CASE("io: safetensors entries with a bad dtype, shape or offsets are refused") {
  TestContext ctx;
  TempDir dir;
  const fs::path path = dir / "bad.safetensors";
  struct Bad {
    std::string entry;  // the one tensor "a"; the data is 8 zero bytes
    std::string why;    // a piece of the message
  };
  for (const Bad& bad : std::vector<Bad>{
           {R"({"dtype":"F8","shape":[2],"data_offsets":[0,8]})", "F8"},
           {R"({"dtype":"I16","shape":[4],"data_offsets":[0,8]})", "I16"},
           {R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})", "f32"},
           {R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})", "dtype"},
           {R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", "non-negative"},
           {R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})", "non-negative"},
           {R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})", "shape"},
           {R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]})", "non-negative"},
           {R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]})", "int64"},
           {R"({"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]})", "int64"},
           {R"({"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]})", "int64"},
           {R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]})", "longer than"},
           {R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", "needs 12"},
           {R"({"dtype":"F32","shape":[1],"data_offsets":[0,8]})", "needs 4"},
           {R"({"dtype":"F32","shape":[2],"data_offsets":[0,16]})", "outside"},
           {R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})", "outside"},
           {R"({"dtype":"F32","shape":[2],"data_offsets":[18446744073709551615,8]})", "outside"},
           {R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})", "data_offsets"},
           {R"({"dtype":"F32","shape":[2],"data_offsets":[0]})", "data_offsets"},
           {R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})", "data_offsets"},
           {R"({"dtype":"F32","shape":[2]})", "data_offsets"},
           {R"({"shape":[2],"data_offsets":[0,8]})", "dtype"},
           {R"({"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]})", "repeats"},
           {R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":"x"})", "fields other"},
           {R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})", "no tensor"},
           {R"("F32")", "not an object"},
       }) {
    INFO(bad.entry);
    write_file(path, safetensors_bytes(R"({"a":)" + bad.entry + "}", std::string(8, '\0')));
    const std::string msg = FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path));
    CHECK(contains(msg, bad.why));
    CHECK(contains(msg, "bad.safetensors"));
  }
}

TEST_CASE("io: overlapping, gapped or repeated safetensors tensors are refused") {
  TestContext ctx;
  TempDir dir;
  const fs::path path = dir / "bad.safetensors";
  const std::string f32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":)";
  struct Bad {
    std::string header;
    std::size_t data_bytes;
    std::string why;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"{\"a\":" + f32x2 + "[0,8]},\"b\":" + f32x2 + "[4,12]}}", 12, "overlap"},
           {"{\"a\":" + f32x2 + "[0,8]},\"b\":" + f32x2 + "[0,8]}}", 8, "overlap"},
           {"{\"a\":" + f32x2 + "[0,8]},\"b\":" + f32x2 + "[12,20]}}", 20, "no tensor"},
           {"{\"a\":" + f32x2 + "[4,12]}}", 12, "no tensor"},
           {"{\"a\":" + f32x2 + "[0,8]}}", 9, "no tensor"},
           {"{\"a\":" + f32x2 + "[0,8]},\"a\":" + f32x2 + "[8,16]}}", 16, "repeats"},
           {"{\"a\":" + f32x2 + "[0,8]},\"__metadata__\":{\"k\":1}}", 8, "not a string"},
           {"{\"a\":" + f32x2 + "[0,8]},\"__metadata__\":[\"k\"]}", 8, "array"},
           {"{\"a\":" + f32x2 + "[0,8]},\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 8, "repeats"},
       }) {
    INFO(bad.header);
    write_file(path, safetensors_bytes(bad.header, std::string(bad.data_bytes, '\0')));
    CHECK(contains(FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path)), bad.why));
  }
  // Empty tensors take no bytes, so they may sit anywhere inside the data.
  write_file(path, safetensors_bytes("{\"a\":" + f32x2 +
                                         "[0,8]},\"e\":{\"dtype\":\"F64\",\"shape\":[0,3],"
                                         "\"data_offsets\":[3,3]}}",
                                     std::string(8, '\0')));
  CHECK(io::load_safetensors(ctx, path).at("e").shape() == Shape{0, 3});
}

TEST_CASE("io: a safetensors BOOL byte other than 0 or 1 is refused") {
  TestContext ctx;
  TempDir dir;
  const fs::path path = dir / "bool.safetensors";
  write_file(path, safetensors_bytes(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                     std::string("\x01\x00\x02", 3)));
  CHECK(contains(FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, path)), "element 2"));
}

TEST_CASE("io: a missing file, a directory and a non-CPU context are refused") {
  TestContext ctx;
  TempDir dir;
  CHECK(contains(FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, dir / "missing.safetensors")),
                 "missing.safetensors"));
  fs::create_directories(dir / "sub");
  FORGE_REQUIRE_ERROR(io, "load_safetensors", io::load_safetensors(ctx, dir / "sub"));
  FORGE_REQUIRE_ERROR(io, "load_npy", io::load_npy(ctx, dir / "sub"));
  FORGE_REQUIRE_ERROR(io, "load_npy", io::load_npy(ctx, dir / "missing.npy"));
}

// ---- npy ----

TEST_CASE("io: npy round trip is bit-exact for every dtype but bf16") {
  TestContext ctx;
  TempDir dir;
  std::uint32_t seed = 100;
  for (DType dtype : forge_test::kAllDTypes) {
    if (dtype == DType::bf16) continue;
    for (const Shape& shape : {Shape{}, Shape{5}, Shape{2, 3, 4}, Shape{0, 4}}) {
      INFO(forge::dtype_name(dtype) << " " << shape);
      const Tensor t = random_bits(ctx, shape, dtype, seed++);
      io::save_npy(dir / "t.npy", t);
      const Tensor back = io::load_npy(ctx, dir / "t.npy");
      CHECK(same_bits(back, t));
    }
  }
  FORGE_REQUIRE_ERROR(dtype, "save_npy", io::save_npy(dir / "b.npy", ctx.ones({2}, DType::bf16)));
  CHECK(dir.files() == std::vector<std::string>{"t.npy"});
}

TEST_CASE("io: npy writes NumPy's version 1.0 header, 64-aligned, and packs views") {
  TestContext ctx;
  TempDir dir;
  const Tensor base = ctx.arange(6, DType::f32).reshape({2, 3});
  io::save_npy(dir / "t.npy", base.t());
  const std::string bytes = read_file(dir / "t.npy");
  REQUIRE(bytes.size() > 10);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t n = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  CHECK((10 + n) % 64 == 0);
  const std::string header = bytes.substr(10, n);
  CHECK(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 0) == 0);
  CHECK(header.back() == '\n');
  CHECK(bytes.size() == 10 + n + 24);
  CHECK(io::load_npy(ctx, dir / "t.npy").to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});

  io::save_npy(dir / "s.npy", ctx.full({}, 1.0, DType::u8));
  CHECK(contains(read_file(dir / "s.npy"), "{'descr': '|u1', 'fortran_order': False, 'shape': (), }"));
  io::save_npy(dir / "v.npy", ctx.ones({3}, DType::boolean));
  CHECK(contains(read_file(dir / "v.npy"), "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }"));
  io::save_npy(dir / "c.npy", ctx.from_vector<std::int8_t>({-128, 5}));
  CHECK(contains(read_file(dir / "c.npy"), "{'descr': '|i1', 'fortran_order': False, 'shape': (2,), }"));
  const Tensor c = io::load_npy(ctx, dir / "c.npy");
  CHECK(c.dtype() == DType::i8);
  CHECK(c.to_vector<std::int8_t>() == std::vector<std::int8_t>{-128, 5});
}

namespace {

// An .npy file with a hand-written header (version major.0, padded to 64).
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  const std::size_t total = 8 + length_bytes + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  return std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0' +
         le_bytes(header.size(), static_cast<int>(length_bytes)) + header + data;
}

std::string i32_bytes(const std::vector<std::int32_t>& v, bool big_endian = false) {
  std::string s;
  for (std::int32_t x : v) {
    std::string b = le_bytes(static_cast<std::uint32_t>(x), 4);
    if (big_endian) std::reverse(b.begin(), b.end());
    s += b;
  }
  return s;
}

}  // namespace

TEST_CASE("io: npy reads version 2.0 and 3.0, big-endian and Fortran-order files") {
  TestContext ctx;
  TempDir dir;
  const fs::path path = dir / "in.npy";
  const std::vector<std::int32_t> values{1, 2, 3, 4, 5, 6};
  write_file(path, npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", i32_bytes(values), 2));
  CHECK(io::load_npy(ctx, path).to_vector<std::int32_t>() == values);
  write_file(path, npy_bytes("{\"descr\": \"<i4\", \"shape\": (6,), \"fortran_order\": False}", i32_bytes(values), 3));
  CHECK(io::load_npy(ctx, path).shape() == Shape{6});
  write_file(path, npy_bytes("{'descr': '>i4', 'fortran_order': False, 'shape': (6L,), }", i32_bytes(values, true)));
  CHECK(io::load_npy(ctx, path).to_vector<std::int32_t>() == values);
  // Column-major [[1, 3, 5], [2, 4, 6]].
  write_file(path, npy_bytes("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", i32_bytes(values)));
  const Tensor f = io::load_npy(ctx, path);
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 3, 5, 2, 4, 6});
  // NumPy's int8 ('|i1'; one byte, so any byte order reads the same).
  for (const char* descr : {"|i1", "<i1", ">i1"}) {
    INFO(descr);
    write_file(path, npy_bytes(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (3,), }",
                               std::string("\x80\xff\x07", 3)));
    const Tensor b = io::load_npy(ctx, path);
    CHECK(b.dtype() == DType::i8);
    CHECK(b.to_vector<std::int8_t>() == std::vector<std::int8_t>{-128, -1, 7});
  }
}

TEST_CASE("io: damaged or hostile npy files are refused") {
  TestContext ctx;
  TempDir dir;
  const fs::path path = dir / "bad.npy";
  const std::string good_dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data = i32_bytes({7, 8});
  const std::string good = npy_bytes(good_dict, data);
  write_file(path, good);
  CHECK(io::load_npy(ctx, path).to_vector<std::int32_t>() == std::vector<std::int32_t>{7, 8});

  struct Bad {
    std::string bytes;
    std::string why;
  };
  std::string bad_magic = good;
  bad_magic[1] = 'M';
  std::string v11 = good;
  v11[7] = 1;
  std::string v9 = good;
  v9[6] = 9;
  std::string long_header = good;
  long_header[8] = '\xff';
  long_header[9] = '\xff';
  const auto with = [&](const std::string& dict) { return npy_bytes(dict, data); };
  for (const Bad& bad : std::vector<Bad>{
           {"", "magic"},
           {bad_magic, "magic"},
           {"\x93NUMPY", "magic"},
           {v11, "version 1.1"},
           {v9, "version 9.0"},
           {long_header, "past the end"},
           {npy_bytes(good_dict, data, 2).substr(0, 11), "header length"},
           {good.substr(0, good.size() - 1), "holds 7"},
           {good.substr(0, 70), "past the end"},
           {good + "x", "holds 9"},
           {with("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }"), "descr"},
           {with("{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }"), "descr"},
           {with("{'descr': 'i4', 'fortran_order': False, 'shape': (2,), }"), "descr"},
           {with("{'descr': '<i4x', 'fortran_order': False, 'shape': (2,), }"), "descr"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), 'x': 1}"), "unexpected key"},
           {with("{'descr': '<i4', 'fortran_order': False}"), "lacks"},
           {with("{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (2,)}"), "repeats"},
           {with("{'descr': '<i4', 'fortran_order': 0, 'shape': (2,)}"), "True or False"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': (2)}"), "not a tuple"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': (-2,)}"), "non-negative"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': [2]}"), "expected '('"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,)}"), "too large"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}"), "int64"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,2)}"), "dimensions"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': (2,)} extra"), "after its dict"},
           {with("{'descr': '<i4, 'fortran_order': False, 'shape': (2,)}"), "expected"},
           {with("{'descr': '<i4', 'fortran_order': False, 'shape': (2,)"), "expected"},
           {with("{'descr': '<\\i4', 'fortran_order': False, 'shape': (2,)}"), "escaped"},
           {npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (2,)}", "\x01\x05"), "not 0 or 1"},
       }) {
    INFO(bad.why);
    write_file(path, bad.bytes);
    const std::string msg = FORGE_REQUIRE_ERROR(io, "load_npy", io::load_npy(ctx, path));
    CHECK(contains(msg, bad.why));
    CHECK(contains(msg, "bad.npy"));
  }
}

// ---- replacing a file: both writers share it (Note [replacing a file], src/io/atomic_file.cpp) ----

namespace {

struct Writer {
  const char* op;
  void (*save)(const fs::path&, const Tensor&);
  Tensor (*load)(forge::ExecContext&, const fs::path&);
};

const Writer kWriters[] = {
    {"save_safetensors",
     [](const fs::path& p, const Tensor& t) {
       io::save_safetensors(p, {{"t", t}});
     },
     [](forge::ExecContext& ctx, const fs::path& p) { return io::load_safetensors(ctx, p).at("t"); }},
    {"save_npy", [](const fs::path& p, const Tensor& t) { io::save_npy(p, t); },
     [](forge::ExecContext& ctx, const fs::path& p) { return io::load_npy(ctx, p); }},
};

// The permission bits of `path` itself (not of a link's target).
mode_t mode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// The process's umask, set for the guard's lifetime.
class UmaskGuard {
 public:
  explicit UmaskGuard(mode_t mask) : old_(::umask(mask)) {}
  ~UmaskGuard() { ::umask(old_); }
  UmaskGuard(const UmaskGuard&) = delete;
  UmaskGuard& operator=(const UmaskGuard&) = delete;

 private:
  mode_t old_;
};

std::vector<float> iota(int n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return v;
}

}  // namespace

TEST_CASE("io: a file whose name is NAME_MAX bytes is written and replaced with its temporary's name cut to fit") {
  TestContext ctx;
  // 127 two-byte characters and an 'x': 255 bytes, where a cut could split a character.
  std::string utf8;
  while (utf8.size() + 2 < 255) utf8 += "\xc3\xa9";
  utf8 += 'x';
  REQUIRE(utf8.size() == 255);
  for (const Writer& w : kWriters) {
    INFO(w.op);
    TempDir dir;
    const std::vector<std::string> names = {std::string(253, 'a'), std::string(255, 'b'), utf8};
    for (const std::string& name : names) {
      w.save(dir / name, ctx.arange(3, DType::f32));
      w.save(dir / name, ctx.arange(4, DType::f32));
      CHECK(w.load(ctx, dir / name).to_vector<float>() == iota(4));
    }
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    CHECK(dir.files() == sorted);  // no temporary left behind
    // One byte more than a name may have is refused before anything is written.
    const std::string msg = FORGE_REQUIRE_ERROR(io, w.op, w.save(dir / std::string(256, 'c'), ctx.ones({1})));
    CHECK(contains(msg, "too long"));
    CHECK(dir.files() == sorted);
  }
}

TEST_CASE("io: a replaced file keeps its mode and a new one gets 0666 less the umask") {
  TestContext ctx;
  const UmaskGuard umask(022);
  for (const Writer& w : kWriters) {
    INFO(w.op);
    TempDir dir;
    const fs::path path = dir / "w.bin";
    w.save(path, ctx.ones({2}));
    CHECK(mode_of(path) == 0644);
    for (const mode_t mode : {0600, 0640, 0444, 0755}) {
      INFO("mode 0" << std::oct << mode);
      REQUIRE(::chmod(path.c_str(), mode) == 0);
      w.save(path, ctx.arange(3, DType::f32));
      CHECK(mode_of(path) == mode);
      CHECK(w.load(ctx, path).to_vector<float>() == iota(3));
    }
    // The owner and group, where this process may set them: only root may
    // give a file away, so elsewhere the chown below fails and so would the save's.
    if (::chown(path.c_str(), 65534, 65534) == 0) {
      w.save(path, ctx.ones({2}));
      struct stat st {};
      REQUIRE(::stat(path.c_str(), &st) == 0);
      CHECK(st.st_uid == 65534);
      CHECK(st.st_gid == 65534);
    }
    fs::remove(path);
    {
      const UmaskGuard strict(077);
      w.save(path, ctx.ones({2}));
      CHECK(mode_of(path) == 0600);
    }
    CHECK(dir.files() == std::vector<std::string>{"w.bin"});
  }
}

// Following the link, as open(2), cp and a shell's > do, keeps a link such as
// "latest" -> "v/1.bin" meaningful; replacing the link itself would leave the
// versioned file stale and the link a plain copy.
TEST_CASE("io: saving through a symbolic link replaces the file it leads to and keeps the link") {
  TestContext ctx;
  for (const Writer& w : kWriters) {
    INFO(w.op);
    TempDir dir;
    fs::create_directories(dir / "v");
    const fs::path target = dir / "v" / "1.bin";
    w.save(target, ctx.ones({2}));
    REQUIRE(::chmod(target.c_str(), 0600) == 0);
    fs::create_symlink("v/1.bin", dir / "latest");      // relative: resolved from the link's folder
    fs::create_symlink(dir / "latest", dir / "alias");  // absolute, to a link
    w.save(dir / "alias", ctx.arange(5, DType::f32));
    CHECK(fs::is_symlink(dir / "alias"));
    CHECK(fs::is_symlink(dir / "latest"));
    CHECK(w.load(ctx, target).to_vector<float>() == iota(5));
    CHECK(mode_of(target) == 0600);
    CHECK(std::distance(fs::directory_iterator(dir / "v"), fs::directory_iterator()) == 1);

    // A dangling link: the file is created where it points.
    fs::create_symlink("v/2.bin", dir / "next");
    w.save(dir / "next", ctx.arange(2, DType::f32));
    CHECK(fs::is_symlink(dir / "next"));
    CHECK(w.load(ctx, dir / "v" / "2.bin").to_vector<float>() == iota(2));

    // A loop of links is refused, naming the link.
    fs::create_symlink("loop_b", dir / "loop_a");
    fs::create_symlink("loop_a", dir / "loop_b");
    const std::string msg = FORGE_REQUIRE_ERROR(io, w.op, w.save(dir / "loop_a", ctx.ones({1})));
    CHECK(contains(msg, "loop_a"));
    CHECK(contains(msg, "symbolic link"));
    CHECK(dir.files() == std::vector<std::string>{"alias", "latest", "loop_a", "loop_b", "next", "v"});
  }
}

// Another user's link in a sticky world-writable directory (/tmp) could aim
// a write at the caller's files; open(2) refuses to follow it under
// fs.protected_symlinks, and so does a save. Making such a link needs root
// (lchown), as it needs another user elsewhere.
TEST_CASE("io: a save does not follow another user's link in a sticky world-writable directory") {
  TestContext ctx;
  for (const Writer& w : kWriters) {
    INFO(w.op);
    TempDir dir;
    const fs::path target = dir / "mine.bin";
    w.save(target, ctx.ones({2}));
    fs::create_symlink("mine.bin", dir / "planted");
    if (::lchown((dir / "planted").c_str(), 65534, 65534) != 0) continue;  // not root: no such link to make
    REQUIRE(::chmod(dir.path().c_str(), 01777) == 0);
    const std::string msg = FORGE_REQUIRE_ERROR(io, w.op, w.save(dir / "planted", ctx.zeros({3})));
    CHECK(contains(msg, "planted"));
    CHECK(contains(msg, "protected_symlinks"));
    CHECK(w.load(ctx, target).to_vector<float>() == std::vector<float>{1, 1});
    CHECK(dir.files() == std::vector<std::string>{"mine.bin", "planted"});
    // Followed where the directory is not sticky, or its owner owns the link.
    REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
    w.save(dir / "planted", ctx.arange(3, DType::f32));
    CHECK(w.load(ctx, target).to_vector<float>() == iota(3));
    REQUIRE(::chmod(dir.path().c_str(), 01777) == 0);
    REQUIRE(::chown(dir.path().c_str(), 65534, 65534) == 0);
    w.save(dir / "planted", ctx.arange(4, DType::f32));
    CHECK(w.load(ctx, target).to_vector<float>() == iota(4));
  }
}

// A user who may not keep the replaced file's owner or group must not pass
// on rights meant for them: set-user-ID goes with the owner, the group bits
// and set-group-ID with the group. The save runs in a child process as
// another user (root is needed to become one).
TEST_CASE("io: replacing another user's file keeps no set-user-ID, nor group rights without the group") {
  TestContext ctx;
  if (::geteuid() != 0) return;  // only root can act as another user here
  const Tensor t = ctx.arange(3, DType::f32);
  for (const Writer& w : kWriters) {
    INFO(w.op);
    TempDir dir;
    REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
    struct Case {
      gid_t group;    // the replaced file's group (its owner is root)
      mode_t mode;    // and mode
      mode_t expect;  // the mode after user 65534 replaced it
      gid_t expect_group;
    };
    for (const Case c : {Case{0, 04775, 0705, 65534}, Case{65534, 06775, 02775, 65534}}) {
      INFO("mode 0" << std::oct << c.mode);
      const fs::path path = dir / "w.bin";
      w.save(path, ctx.ones({2}));
      REQUIRE(::chown(path.c_str(), 0, c.group) == 0);
      REQUIRE(::chmod(path.c_str(), c.mode) == 0);
      const pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        int code = 0;
        if (::setgroups(0, nullptr) != 0 || ::setegid(65534) != 0 || ::seteuid(65534) != 0) ::_exit(2);
        try {
          w.save(path, t);
        } catch (...) {
          code = 1;
        }
        ::_exit(code);
      }
      int status = 0;
      REQUIRE(::waitpid(child, &status, 0) == child);
      REQUIRE(WIFEXITED(status));
      REQUIRE(WEXITSTATUS(status) == 0);
      struct stat st {};
      REQUIRE(::stat(path.c_str(), &st) == 0);
      CHECK(st.st_uid == 65534);
      CHECK(st.st_gid == c.expect_group);
      CHECK((st.st_mode & 07777) == c.expect);
      CHECK(w.load(ctx, path).to_vector<float>() == iota(3));
      fs::remove(path);
    }
  }
}

// A FIFO stands in for a device node: renaming over /dev/full would have
// swapped the device for a regular file.
TEST_CASE("io: a FIFO or directory target (or a link to one) is refused and left as it was") {
  TestContext ctx;
  for (const Writer& w : kWriters) {
    INFO(w.op);
    TempDir dir;
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
    fs::create_directories(dir / "folder");
    fs::create_symlink("fifo", dir / "to_fifo");
    for (const char* name : {"fifo", "folder", "to_fifo"}) {
      INFO(name);
      const std::string msg = FORGE_REQUIRE_ERROR(io, w.op, w.save(dir / name, ctx.ones({2})));
      CHECK(contains(msg, "not a regular file"));
      CHECK(contains(msg, name));
    }
    CHECK(fs::is_fifo(dir / "fifo"));
    CHECK(fs::is_empty(dir / "folder"));
    CHECK(fs::is_symlink(dir / "to_fifo"));
    CHECK(dir.files() == std::vector<std::string>{"fifo", "folder", "to_fifo"});
  }
}
