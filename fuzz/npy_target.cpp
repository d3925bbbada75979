// fuzz_npy: the input as a .npy file. When it loads, the tensor's bytes are
// the file's last nbytes (byte-swapped or transposed perhaps, which keeps the
// bytes' histogram), and every element reads back.

#include "forge/io/npy.h"
#include "support.h"

namespace forge_fuzz {

int fuzz_npy(const std::uint8_t* data, std::size_t size) {
  return run(kReaderCodes, [&](forge::ExecContext& ctx) {
    const MemFile file(data, size);
    const forge::Tensor t = forge::io::load_npy(ctx, file.path());
    require(t.is_contiguous(), "a loaded array is not contiguous");
    require(t.nbytes() == static_cast<std::size_t>(t.numel()) * t.element_size(), "nbytes disagrees with numel");
    require(t.nbytes() + 10 <= size, "an array larger than its file loaded");
    Histogram loaded{}, file_data{};
    if (t.nbytes() > 0) count_bytes(loaded, t.raw_data(), t.nbytes());
    count_bytes(file_data, data + size - t.nbytes(), t.nbytes());
    require(loaded == file_data, "the array's bytes are not the file's data bytes");
    (void)t.to_vector<double>();
  });
}

}  // namespace forge_fuzz
