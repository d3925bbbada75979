#pragma once
// TextWindowDataset: next-token examples over a file of tokens.
//
//   data::TextWindowDataset text("corpus.txt", {.context = 256});              // bytes as tokens
//   data::TextWindowDataset ids("train.bin", {.context = 1024, .format = data::TokenFormat::u16});
//
// Window k covers tokens [k * stride, k * stride + context + 1): its input is
// the first `context` of them and its target the last `context` (the input
// shifted by one), both i64 [context]. The file is mapped, not read: a large
// corpus costs no memory until its pages are touched, and worker threads
// read the mapping directly.

#include <cstdint>
#include <filesystem>
#include <memory>

#include "forge/data/dataset.h"

namespace forge::io::detail {
class MappedFile;
}

namespace forge::data {

enum class TokenFormat {
  u8,   // one byte per token (a raw text or binary file: byte-level tokens 0..255)
  u16,  // little-endian unsigned 16-bit token ids (GPT-2 style .bin files)
  u32,  // little-endian unsigned 32-bit token ids
  i64,  // little-endian signed 64-bit token ids
};

struct TextWindowOptions {
  std::int64_t context = 128;            // tokens per input (and per target)
  std::int64_t stride = 0;               // tokens between window starts; 0: `context` (inputs do not overlap)
  TokenFormat format = TokenFormat::u8;  // how the file stores its tokens
};

class TextWindowDataset final : public Dataset {
 public:
  // Maps `path`. Throws io when it cannot be read or its size is not a whole
  // number of tokens, invalid_argument for context < 1 or stride < 0, or when
  // it holds fewer than context + 1 tokens (not one window: an empty dataset).
  explicit TextWindowDataset(const std::filesystem::path& path, TextWindowOptions options = {});
  ~TextWindowDataset() override;

  std::int64_t size() const override { return windows_; }
  void fill(std::int64_t i, Example& out) const override;

  std::int64_t tokens() const noexcept { return tokens_; }  // in the file
  // Token t of the file (0 <= t < tokens(), unchecked), as i64.
  std::int64_t token(std::int64_t t) const noexcept;
  const TextWindowOptions& options() const noexcept { return options_; }

 private:
  std::shared_ptr<io::detail::MappedFile> file_;
  TextWindowOptions options_;
  std::size_t token_bytes_ = 1;
  std::int64_t tokens_ = 0;
  std::int64_t windows_ = 0;
};

}  // namespace forge::data
