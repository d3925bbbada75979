// The fuzz targets' committed corpus (fuzz/corpus/<name>/, seeds from
// fuzz/make_seeds.py and the inputs fuzzing kept) replayed through the same
// bodies the fuzzers run (fuzz/targets.h): every file must be read or
// refused with a forge::Error, with the body's checks holding. scripts/fuzz
// runs the fuzzers themselves.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../fuzz/targets.h"
#include "support.h"

namespace {

using forge_test::TestContext;
namespace fs = std::filesystem;

using Body = int (*)(const std::uint8_t*, std::size_t);

std::vector<fs::path> corpus(const std::string& name) {
  const fs::path dir = fs::path(FORGE_SOURCE_DIR) / "fuzz" / "corpus" / name;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs every corpus file of `name` through `body`; returns how many ran.
std::size_t replay(const std::string& name, Body body) {
  const auto files = corpus(name);
  for (const fs::path& file : files) {
    INFO("input: " << file.string());
    const std::vector<std::uint8_t> bytes = read_all(file);
    CHECK_NOTHROW(body(bytes.data(), bytes.size()));
  }
  return files.size();
}

}  // namespace

TEST_CASE("fuzz corpus: safetensors inputs load or refuse with io errors") {
  TestContext ctx;
  CHECK(replay("safetensors", forge_fuzz::fuzz_safetensors) >= 20);
}

TEST_CASE("fuzz corpus: npy inputs load or refuse with io errors") {
  TestContext ctx;
  CHECK(replay("npy", forge_fuzz::fuzz_npy) >= 20);
}

TEST_CASE("fuzz corpus: idx inputs plain and gzip load or refuse with io errors") {
  TestContext ctx;
  CHECK(replay("idx", forge_fuzz::fuzz_idx) >= 20);
}

TEST_CASE("fuzz corpus: view op sequences match the index model") {
  TestContext ctx;
  CHECK(replay("views", forge_fuzz::fuzz_views) >= 20);
}
