// What a safetensors header costs to read, by its number of entries: files of
// N empty tensors (the cheapest entry a hostile header can repeat, about 60
// bytes each) loaded whole with load_safetensors, the StateDict's teardown
// included. The time must grow (near) linearly in N, up to the reader's limit
// of 2^20 entries; one entry more is refused.
//
//   build/release/benchmarks/io_bench
//
// Names in order ("t0000000", "t0000001", ...: a forge-written file's order)
// are checked for repeats in one scan; out of order ("0", "1", ..., "10", ...)
// they are sorted first.

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "forge/forge.h"
#include "forge/io.h"

namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kMaxEntries = std::int64_t{1} << 20;  // src/io/safetensors.cpp

// A header of `entries` empty F32 tensors, named in order or out of it.
std::string empty_entries_header(std::int64_t entries, bool in_order) {
  std::string header = "{";
  header.reserve(static_cast<std::size_t>(entries) * 60 + 8);
  char name[32];
  for (std::int64_t i = 0; i < entries; ++i) {
    std::snprintf(name, sizeof name, in_order ? "t%07lld" : "%lld", static_cast<long long>(i));
    if (i > 0) header += ',';
    header += '"';
    header += name;
    header += R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

// A safetensors file of that header and no data, removed with the object.
class HeaderFile {
 public:
  explicit HeaderFile(const std::string& header)
      : path_(fs::temp_directory_path() / ("forge_io_bench_" + std::to_string(::getpid()) + ".safetensors")) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    const std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
  }
  ~HeaderFile() { fs::remove(path_); }
  HeaderFile(const HeaderFile&) = delete;
  HeaderFile& operator=(const HeaderFile&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void load_entries(benchmark::State& state, bool in_order) {
  const std::string header = empty_entries_header(state.range(0), in_order);
  const HeaderFile file(header);
  forge::ExecContext ctx;
  std::size_t loaded = 0;
  for (auto _ : state) loaded = forge::io::load_safetensors(ctx, file.path()).size();
  if (loaded != static_cast<std::size_t>(state.range(0))) state.SkipWithError("not every entry loaded");
  state.counters["header_MB"] = static_cast<double>(header.size()) / 1e6;
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_SafetensorsEmptyEntries(benchmark::State& state) { load_entries(state, true); }
BENCHMARK(BM_SafetensorsEmptyEntries)->RangeMultiplier(2)->Range(8 << 10, kMaxEntries)->Unit(benchmark::kMillisecond);

void BM_SafetensorsEmptyEntriesOutOfOrder(benchmark::State& state) { load_entries(state, false); }
BENCHMARK(BM_SafetensorsEmptyEntriesOutOfOrder)->Arg(kMaxEntries)->Unit(benchmark::kMillisecond);

// One entry past the limit: refused when the parse reaches it.
void BM_SafetensorsPastTheLimit(benchmark::State& state) {
  const std::string header = empty_entries_header(kMaxEntries + 1, true);
  const HeaderFile file(header);
  forge::ExecContext ctx;
  bool refused = false;
  for (auto _ : state) {
    try {
      (void)forge::io::load_safetensors(ctx, file.path());
      refused = false;
    } catch (const forge::Error& e) {
      refused = e.code() == forge::ErrorCode::io;
    }
  }
  if (!refused) state.SkipWithError("the header past the limit was not refused");
  state.counters["header_MB"] = static_cast<double>(header.size()) / 1e6;
}
BENCHMARK(BM_SafetensorsPastTheLimit)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
