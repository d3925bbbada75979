// fuzz_safetensors: the input as a safetensors file. When it loads, the
// tensors must tile the data exactly (the format's rule, which the reader
// enforces): their bytes together are the file's data bytes, no more, no
// fewer, and every element reads back.

#include "forge/io/safetensors.h"
#include "support.h"

namespace forge_fuzz {

int fuzz_safetensors(const std::uint8_t* data, std::size_t size) {
  return run(kReaderCodes, [&](forge::ExecContext& ctx) {
    const MemFile file(data, size);
    const forge::io::SafetensorsContents contents = forge::io::read_safetensors(ctx, file.path());
    require(size >= 8, "a file shorter than its header length loaded");
    std::uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | data[i];
    require(header_bytes <= size - 8, "a header longer than the file loaded");
    const std::size_t data_start = 8 + static_cast<std::size_t>(header_bytes);

    Histogram loaded{}, file_data{};
    std::size_t total = 0;
    for (const auto& [name, t] : contents.tensors) {
      require(t.is_contiguous(), "a loaded tensor is not contiguous");
      require(t.nbytes() == static_cast<std::size_t>(t.numel()) * t.element_size(), "nbytes disagrees with numel");
      if (t.nbytes() > 0) count_bytes(loaded, t.raw_data(), t.nbytes());
      total += t.nbytes();
      (void)t.to_vector<double>();  // every element through the conversion kernels
    }
    require(total == size - data_start, "the tensors do not cover the data bytes exactly");
    count_bytes(file_data, data + data_start, size - data_start);
    require(loaded == file_data, "the tensors' bytes are not the file's data bytes");
  });
}

}  // namespace forge_fuzz
