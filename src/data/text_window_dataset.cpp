// TextWindowDataset (include/forge/data/text_window_dataset.h): windows of
// context + 1 tokens over a mapped file. Tokens are decoded byte by byte as
// little-endian, so a file reads the same on any host.

#include "forge/data/text_window_dataset.h"

#include "forge/error.h"
#include "io/mapped_file.h"

namespace forge::data {
namespace {

constexpr const char* kOp = "TextWindowDataset";

std::size_t token_bytes(TokenFormat format) {
  switch (format) {
    case TokenFormat::u8:
      return 1;
    case TokenFormat::u16:
      return 2;
    case TokenFormat::u32:
      return 4;
    case TokenFormat::i64:
      return 8;
  }
  FORGE_FAIL(invalid_argument, kOp, "unknown token format ", static_cast<int>(format));
}

}  // namespace

TextWindowDataset::TextWindowDataset(const std::filesystem::path& path, TextWindowOptions options) try
    : options_(options) {
  FORGE_CHECK(options_.context >= 1, invalid_argument, kOp, "context must be at least 1, got ", options_.context);
  FORGE_CHECK(options_.stride >= 0, invalid_argument, kOp, "stride must be non-negative, got ", options_.stride);
  if (options_.stride == 0) options_.stride = options_.context;
  const std::size_t width = token_bytes_ = token_bytes(options_.format);
  file_ = io::detail::MappedFile::open(path, kOp);
  FORGE_CHECK(file_->size() % width == 0, io, kOp, path.string(), " holds ", file_->size(),
              " bytes, not a whole number of ", width, "-byte tokens");
  tokens_ = static_cast<std::int64_t>(file_->size() / width);
  FORGE_CHECK(tokens_ >= options_.context + 1, invalid_argument, kOp, path.string(), " holds ", tokens_,
              " tokens, fewer than one window of context ", options_.context, " + 1: the dataset would be empty");
  windows_ = (tokens_ - options_.context - 1) / options_.stride + 1;
}
FORGE_CATCH_OOM(kOp)

TextWindowDataset::~TextWindowDataset() = default;

std::int64_t TextWindowDataset::token(std::int64_t t) const noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(file_->data()) + static_cast<std::size_t>(t) * token_bytes_;
  std::uint64_t v = 0;
  for (std::size_t b = token_bytes_; b-- > 0;) v = (v << 8) | p[b];
  return static_cast<std::int64_t>(v);
}

void TextWindowDataset::fill(std::int64_t i, Example& out) const {
  const std::int64_t first = i * options_.stride, n = options_.context;
  auto* input = out.input.reset({n}, DType::i64);
  auto* target = out.target.reset({n}, DType::i64);
  std::int64_t previous = token(first);
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t t = token(first + k + 1);
    reinterpret_cast<std::int64_t*>(input)[k] = previous;
    reinterpret_cast<std::int64_t*>(target)[k] = t;
    previous = t;
  }
}

}  // namespace forge::data
