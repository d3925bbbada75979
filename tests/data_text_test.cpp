// TextWindowDataset: next-token windows over byte files and little-endian
// u16 / u32 / i64 token files, through a DataLoader, and the files refused.

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "forge/data/dataloader.h"
#include "forge/data/text_window_dataset.h"
#include "support.h"
#include "temp_dir.h"

using forge::DType;
using forge::data::TextWindowDataset;
using forge::data::TokenFormat;
using Tokens = std::vector<std::int64_t>;

namespace {

void write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Each token's low `width` bytes, least significant first.
std::string little_endian(const Tokens& tokens, int width) {
  std::string out;
  for (std::int64_t t : tokens) {
    const auto u = static_cast<std::uint64_t>(t);
    for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((u >> (8 * b)) & 0xff));
  }
  return out;
}

Tokens tokens_of(const std::string& text) {
  Tokens out;
  for (unsigned char c : text) out.push_back(c);
  return out;
}

}  // namespace

TEST_CASE("data: TextWindowDataset over bytes gives windows and their shift by one", "[data]") {
  forge_test::TempDir dir;
  write(dir / "text", "hello world!");
  const TextWindowDataset text(dir / "text", {.context = 4});
  CHECK(text.tokens() == 12);
  CHECK(text.size() == 2);  // windows start at 0 and 4; one at 8 would need token 12
  const auto w0 = text.get(0), w1 = text.get(1);
  CHECK(w0.input.dtype() == DType::i64);
  CHECK(w0.input.shape() == forge::Shape{4});
  CHECK(w0.input.to_vector<std::int64_t>() == tokens_of("hell"));
  CHECK(w0.target.to_vector<std::int64_t>() == tokens_of("ello"));
  CHECK(w1.input.to_vector<std::int64_t>() == tokens_of("o wo"));
  CHECK(w1.target.to_vector<std::int64_t>() == tokens_of(" wor"));

  const TextWindowDataset sliding(dir / "text", {.context = 4, .stride = 1});
  CHECK(sliding.size() == 8);
  CHECK(sliding.get(7).input.to_vector<std::int64_t>() == tokens_of("orld"));
  CHECK(sliding.get(7).target.to_vector<std::int64_t>() == tokens_of("rld!"));
  write(dir / "high", "\xff\x80\x01");
  CHECK(TextWindowDataset(dir / "high", {.context = 2}).get(0).input.to_vector<std::int64_t>() == Tokens{255, 128});
}

TEST_CASE("data: TextWindowDataset reads little-endian u16, u32 and i64 tokens", "[data]") {
  forge_test::TempDir dir;
  struct Case {
    TokenFormat format;
    int width;
    Tokens tokens;
  };
  const std::vector<Case> cases = {
      {TokenFormat::u16, 2, {50256, 1, 65535, 258, 7}},
      {TokenFormat::u32, 4, {100000, 0, 4294967295, 16909060, 3}},
      {TokenFormat::i64, 8, {-5, std::int64_t{1} << 40, 0, 9, std::int64_t{-1} << 62}},
  };
  for (const Case& c : cases) {
    INFO(c.width << "-byte tokens");
    write(dir / "ids.bin", little_endian(c.tokens, c.width));
    const TextWindowDataset ids(dir / "ids.bin", {.context = 3, .stride = 2, .format = c.format});
    REQUIRE(ids.tokens() == 5);
    REQUIRE(ids.size() == 1);
    for (std::int64_t t = 0; t < 5; ++t) CHECK(ids.token(t) == c.tokens[static_cast<std::size_t>(t)]);
    CHECK(ids.get(0).input.to_vector<std::int64_t>() == Tokens(c.tokens.begin(), c.tokens.begin() + 3));
    CHECK(ids.get(0).target.to_vector<std::int64_t>() == Tokens(c.tokens.begin() + 1, c.tokens.begin() + 4));
  }
}

TEST_CASE("data: TextWindowDataset batches through a DataLoader with workers", "[data]") {
  forge_test::TestContext ctx;
  forge_test::TempDir dir;
  Tokens tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back((i * 37) % 50000);
  write(dir / "ids.bin", little_endian(tokens, 2));
  auto text = std::make_shared<TextWindowDataset>(
      dir / "ids.bin", forge::data::TextWindowOptions{.context = 16, .format = TokenFormat::u16});
  CHECK(text->size() == (1000 - 17) / 16 + 1);
  forge::data::DataLoader loader(ctx, text, {.batch_size = 8, .seed = 2, .num_workers = 2});
  std::int64_t windows = 0;
  for (const forge::data::Batch& b : loader.epoch(0)) {
    REQUIRE(b.input.shape() == forge::Shape{b.input.size(0), 16});
    CHECK(b.input.dtype() == DType::i64);
    // The target is the input shifted by one token.
    CHECK(b.input.narrow(1, 1, 15).to_vector<std::int64_t>() == b.target.narrow(1, 0, 15).to_vector<std::int64_t>());
    const auto first = b.input.select(1, 0).to_vector<std::int64_t>();
    for (std::int64_t start : first)
      CHECK(start % (16 * 37) == 0);  // window k starts at token 16 k, which is 16 k * 37
    windows += b.input.size(0);
  }
  CHECK(windows == text->size());
}

TEST_CASE("data: TextWindowDataset refuses unreadable, ragged and too short files", "[data]") {
  forge_test::TempDir dir;
  const std::string missing =
      FORGE_REQUIRE_ERROR(io, "TextWindowDataset", TextWindowDataset(dir / "nope", {.context = 2}));
  CHECK(missing.find("nope") != std::string::npos);
  write(dir / "odd", std::string(7, 'a'));
  const std::string ragged = FORGE_REQUIRE_ERROR(
      io, "TextWindowDataset", TextWindowDataset(dir / "odd", {.context = 2, .format = TokenFormat::u16}));
  CHECK(ragged.find("7 bytes, not a whole number of 2-byte tokens") != std::string::npos);
  const std::string empty =
      FORGE_REQUIRE_ERROR(invalid_argument, "TextWindowDataset", TextWindowDataset(dir / "odd", {.context = 7}));
  CHECK(empty.find("7 tokens, fewer than one window of context 7 + 1") != std::string::npos);
  write(dir / "none", "");
  FORGE_REQUIRE_ERROR(invalid_argument, "TextWindowDataset", TextWindowDataset(dir / "none", {.context = 1}));
  FORGE_REQUIRE_ERROR(invalid_argument, "TextWindowDataset", TextWindowDataset(dir / "odd", {.context = 0}));
  FORGE_REQUIRE_ERROR(invalid_argument, "TextWindowDataset",
                      TextWindowDataset(dir / "odd", {.context = 2, .stride = -1}));
  CHECK(TextWindowDataset(dir / "odd", {.context = 6}).size() == 1);  // exactly one window
}
