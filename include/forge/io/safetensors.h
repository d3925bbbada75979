#pragma once
// safetensors checkpoints (the format PyTorch and the Hugging Face stack read
// and write): an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the tensors' bytes.
//
// Reading maps the file and hands out zero-copy tensors over the mapping; the
// mapping lives until the last of them dies (see src/io/mapped_file.h for what
// writing to them does). Every header field, offset and size is validated
// before it is used: a damaged or hostile file is a forge::Error with
// ErrorCode::io naming the file and the problem.

#include <filesystem>
#include <map>
#include <string>

#include "forge/exec_context.h"
#include "forge/state_dict.h"

namespace forge::io {

using Metadata = std::map<std::string, std::string>;

// Writes every tensor (any layout; written packed) of dtype f32, f64, f16,
// bf16, i32, i64, u8 or bool, and `metadata` as "__metadata__". The file is
// written whole to a temporary beside `path` and renamed over it, so a
// failure never leaves half a file. A symbolic link at `path` is followed
// (the file it leads to is replaced, the link stays), only a regular file is
// replaced (a device, FIFO or directory is refused with ErrorCode::io), and a
// replaced file keeps its mode (and owner, where permitted); a new one gets
// 0666 less the umask. Tensors are laid out by element size, largest first,
// then by name, so each starts aligned to its element size and loads without
// a copy. Host tensors only.
void save_safetensors(const std::filesystem::path& path, const StateDict& tensors, const Metadata& metadata = {});

struct SafetensorsContents {
  StateDict tensors;
  Metadata metadata;
};

// Maps `path` and returns its tensors over the mapping (a tensor whose bytes
// are not aligned to its element size, which forge's writer never makes, is
// copied into memory of its own instead). `ctx` must be a CPU context. A file
// may hold at most 2^20 (1,048,576) tensors, several times what any released
// checkpoint has: a header with more is refused (ErrorCode::io), so a small
// hostile file cannot make the reader build millions of tensors. The header
// is read in time near-linear in its size (1 M entries: under a second).
SafetensorsContents read_safetensors(ExecContext& ctx, const std::filesystem::path& path);

// read_safetensors without the metadata.
StateDict load_safetensors(ExecContext& ctx, const std::filesystem::path& path);

}  // namespace forge::io
