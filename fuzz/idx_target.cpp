// fuzz_idx: the input as an IDX file, gzip when it starts 1f 8b. When a plain
// file loads, its shape is the header's dims and, for the types read at their
// own width (u8, i32, f32, f64), its bytes are the file's after the header
// (byte-swapped, which keeps the bytes' histogram). Every element reads back.

#include "forge/io/idx.h"
#include "support.h"

namespace forge_fuzz {
namespace {

// A plain file's header against the loaded tensor.
void check_plain(const std::uint8_t* data, std::size_t size, const forge::Tensor& t) {
  require(size >= 4 && data[0] == 0 && data[1] == 0, "a file without the IDX magic loaded");
  const int rank = data[3];
  require(t.dim() == rank, "the rank is not the header's");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  require(size >= header, "a file shorter than its header loaded");
  for (int d = 0; d < rank; ++d) {
    const std::uint8_t* p = data + 4 + 4 * d;
    const std::int64_t extent = (std::int64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    require(t.size(d) == extent, "an extent is not the header's");
  }
  const std::uint8_t type = data[2];
  if (type != 0x08 && type != 0x0C && type != 0x0D && type != 0x0E) return;  // i8 and i16 widen
  require(t.nbytes() == size - header, "the tensor's bytes are not the rest of the file");
  Histogram loaded{}, file_data{};
  if (t.nbytes() > 0) count_bytes(loaded, t.raw_data(), t.nbytes());
  count_bytes(file_data, data + header, size - header);
  require(loaded == file_data, "the tensor's bytes are not the file's data bytes");
}

}  // namespace

int fuzz_idx(const std::uint8_t* data, std::size_t size) {
  return run(kReaderCodes, [&](forge::ExecContext& ctx) {
    const MemFile file(data, size);
    const forge::Tensor t = forge::io::load_idx(ctx, file.path());
    require(t.is_contiguous(), "a loaded tensor is not contiguous");
    const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    if (!gzip) check_plain(data, size, t);
    (void)t.to_vector<double>();
  });
}

}  // namespace forge_fuzz
