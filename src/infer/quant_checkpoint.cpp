// Packed checkpoints: forge::quantize writes a safetensors file whose
// converted tensors are their PackedMatrix storage (U8 bytes, BF16 or F32)
// and whose metadata records, per converted tensor <name>,
//   "forge.format.<name>" = "q4_0" (a format_name), and
//   "forge.shape.<name>"  = "<rows>,<cols>" (the logical matrix);
// read_packed maps such a file and wraps each converted tensor without a
// copy. A key that does not describe a valid packed tensor is ErrorCode::io
// naming the file and the tensor; the rest of the metadata is the user's.

#include <charconv>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "forge/infer/quant.h"
#include "forge/io/safetensors.h"
#include "infer/quant_internal.h"

namespace forge {
namespace {

constexpr std::string_view kFormatKey = "forge.format.";
constexpr std::string_view kShapeKey = "forge.shape.";

bool default_select(std::string_view name, const Tensor& t) {
  return is_floating(t.dtype()) && t.dim() == 2 && t.shape()[1] % infer::detail::kBlockValues == 0 &&
         name.ends_with("weight");
}

// "rows,cols" as two non-negative integers, or false.
bool parse_shape(std::string_view text, std::int64_t& rows, std::int64_t& cols) {
  const auto comma = text.find(',');
  if (comma == std::string_view::npos) return false;
  auto number = [](std::string_view s, std::int64_t& v) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty() && v >= 0;
  };
  return number(text.substr(0, comma), rows) && number(text.substr(comma + 1), cols);
}

}  // namespace

void quantize(const std::filesystem::path& in, const std::filesystem::path& out, infer::WeightFormat format,
              std::function<bool(std::string_view name, const Tensor& t)> select) try {
  constexpr const char* op = "quantize";
  if (!select) select = default_select;
  ExecContext ctx(ExecContextOptions{.threads = 1});
  infer::PackedCheckpoint source = infer::read_packed(ctx, in);

  StateDict tensors;
  io::Metadata metadata = source.metadata;
  auto convert = [&](const std::string& name, const Tensor& t) {
    FORGE_CHECK(is_floating(t.dtype()) && t.dim() == 2, invalid_argument, op, in, ": tensor '", name,
                "' was selected but is ", dtype_name(t.dtype()), " of shape ", t.shape(),
                "; only floating matrices convert");
    FORGE_CHECK(format == infer::WeightFormat::f32 || format == infer::WeightFormat::bf16 ||
                    t.shape()[1] % infer::detail::kBlockValues == 0,
                invalid_argument, op, in, ": tensor '", name, "' was selected but has ", t.shape()[1], " cols; ",
                infer::format_name(format), " needs a multiple of ", infer::detail::kBlockValues);
    infer::PackedMatrix m;
    try {
      m = infer::PackedMatrix::pack(t, format);
    } catch (const Error& e) {
      FORGE_FAIL(invalid_argument, op, in, ": tensor '", name, "': ", e.what());
    }
    tensors[name] = m.storage();
    metadata[std::string(kFormatKey) + name] = infer::format_name(format);
    metadata[std::string(kShapeKey) + name] = std::to_string(m.rows()) + "," + std::to_string(m.cols());
  };
  for (const auto& [name, t] : source.tensors) {
    if (select(name, t))
      convert(name, t);
    else
      tensors[name] = t;
  }
  // A file already packed: a selected matrix is converted again from its
  // values; the others keep their bytes and their keys.
  for (const auto& [name, m] : source.packed) {
    const Tensor values = m.dequantize();
    if (select(name, values)) {
      convert(name, values);
    } else {
      tensors[name] = m.storage();
      metadata[std::string(kFormatKey) + name] = infer::format_name(m.format());
      metadata[std::string(kShapeKey) + name] = std::to_string(m.rows()) + "," + std::to_string(m.cols());
    }
  }
  io::save_safetensors(out, tensors, metadata);
}
FORGE_CATCH_OOM("quantize")

namespace infer {

PackedCheckpoint read_packed(ExecContext& ctx, const std::filesystem::path& path) try {
  constexpr const char* op = "read_packed";
  io::SafetensorsContents contents = io::read_safetensors(ctx, path);
  PackedCheckpoint result;
  std::error_code ec;
  result.mapped_bytes = static_cast<std::size_t>(std::filesystem::file_size(path, ec));
  if (ec) result.mapped_bytes = 0;

  for (const auto& [key, value] : contents.metadata) {
    const std::string_view k = key;
    if (k.starts_with(kShapeKey)) {
      const std::string name(k.substr(kShapeKey.size()));
      FORGE_CHECK(contents.metadata.count(std::string(kFormatKey) + name), io, op, path, ": metadata \"", key,
                  "\" gives a shape to tensor '", name, "' but no \"", kFormatKey, name, "\" names its format");
      continue;
    }
    if (!k.starts_with(kFormatKey)) {
      result.metadata.emplace(key, value);
      continue;
    }
    const std::string name(k.substr(kFormatKey.size()));
    WeightFormat format;
    try {
      format = parse_weight_format(value);
    } catch (const Error&) {
      FORGE_FAIL(io, op, path, ": tensor '", name, "' has an unknown format \"", value,
                 "\" (the formats are f32, bf16, q8_0 and q4_0)");
    }
    const auto shape = contents.metadata.find(std::string(kShapeKey) + name);
    FORGE_CHECK(shape != contents.metadata.end(), io, op, path, ": tensor '", name, "' is marked ", value,
                " but no \"", kShapeKey, name, "\" gives its shape");
    std::int64_t rows = 0, cols = 0;
    FORGE_CHECK(parse_shape(shape->second, rows, cols), io, op, path, ": tensor '", name, "' has shape \"",
                shape->second, "\", not \"<rows>,<cols>\" of two non-negative integers");
    const auto stored = contents.tensors.find(name);
    FORGE_CHECK(stored != contents.tensors.end(), io, op, path, ": metadata describes a packed tensor '", name,
                "' that the file does not hold");
    try {
      result.packed.emplace(name, PackedMatrix::wrap(stored->second, format, rows, cols));
    } catch (const Error& e) {
      FORGE_FAIL(io, op, path, ": tensor '", name, "' does not hold a ", value, " [", rows, ", ", cols,
                 "] matrix: ", e.what());
    }
    contents.tensors.erase(stored);
  }
  result.tensors = std::move(contents.tensors);
  return result;
}
FORGE_CATCH_OOM("read_packed")

}  // namespace infer
}  // namespace forge
