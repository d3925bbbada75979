// safetensors reading and writing. The format:
//   - 8 bytes: the header length n, little-endian u64;
//   - n bytes: a JSON object, { name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
//     optional "__metadata__": {string: string} }, padded with spaces;
//   - the data: every tensor's bytes, packed, C order, little-endian; offsets
//     count from the start of the data.
// The reader trusts nothing: the header length is bounded by the file and by
// kMaxHeaderBytes, the JSON may only nest as deep as the format does, every
// entry's dtype, shape and byte range is checked, and the byte ranges must
// tile the data exactly (no overlap, no hole, nothing after), as the format
// requires. Only then are tensors made over the mapping.

#include "forge/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace forge::io {

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors files are little-endian; a big-endian host would need byte swaps");

using json = nlohmann::json;

constexpr const char* kSaveOp = "save_safetensors";
constexpr const char* kLoadOp = "load_safetensors";
constexpr std::uint64_t kHeaderLengthBytes = 8;
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's bound
constexpr std::uint64_t kHeaderAlignBytes = 8;          // data starts 8-aligned: no f64 lands misaligned
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"},
                                     {DType::bf16, "BF16"}, {DType::i32, "I32"}, {DType::i64, "I64"},
                                     {DType::u8, "U8"},   {DType::boolean, "BOOL"}};

std::string_view safetensors_name(DType dtype) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  FORGE_FAIL(dtype, kSaveOp, "no safetensors dtype for ", dtype_name(dtype));
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& d : kDTypeNames)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

// ---- writing ----

void put_u64_le(std::uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

// The tensors in file order: larger elements first, then by name (the map's
// order, kept by the stable sort), so every tensor starts aligned to its size.
std::vector<std::pair<std::string, Tensor>> file_order(const StateDict& tensors) {
  std::vector<std::pair<std::string, Tensor>> order;
  order.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    FORGE_CHECK(name != kMetadataKey, invalid_argument, kSaveOp, "a tensor may not be named ", kMetadataKey);
    FORGE_CHECK(t.defined(), invalid_argument, kSaveOp, "tensor '", name, "' is undefined");
    FORGE_CHECK(t.device().is_cpu(), device, kSaveOp, "tensor '", name, "' is on ", t.device().str(),
                "; only host tensors are written");
    safetensors_name(t.dtype());  // refuses a dtype the format lacks before anything is written
    order.emplace_back(name, t.detach().contiguous());
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second.element_size() > b.second.element_size(); });
  return order;
}

std::string header_text(const std::vector<std::pair<std::string, Tensor>>& order, const Metadata& metadata) {
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    const std::uint64_t end = offset + t.nbytes();
    header[name] = {{"dtype", safetensors_name(t.dtype())},
                    {"shape", t.shape().vec()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    FORGE_FAIL(invalid_argument, kSaveOp, "a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  text.append((kHeaderAlignBytes - text.size() % kHeaderAlignBytes) % kHeaderAlignBytes, ' ');
  return text;
}

// ---- reading ----

template <typename... Args>
[[noreturn]] void refuse(const std::filesystem::path& path, const Args&... args) {
  forge::detail::fail(ErrorCode::io, kLoadOp, path, ": ", args...);
}

// One tensor's header entry, validated against the data's size.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin;
  std::uint64_t end;
};

// Parses the header, refusing duplicate keys (the JSON parser would silently
// keep the last) and any nesting the format does not have: the root object
// (depth 0), entries and metadata (depth 1), shape and offset arrays (depth 2)
// of at most kMaxRank numbers. So no input, however large, builds a deep or
// wide tree.
json parse_header(const std::filesystem::path& path, std::string_view text) {
  struct Container {
    explicit Container(bool is_array) : array(is_array) {}
    bool array;
    std::size_t length = 0;  // elements so far, for arrays
    std::unordered_set<std::string> keys;
  };
  std::vector<Container> open;
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    switch (event) {
      case E::object_start:
        if (depth > 1) refuse(path, "header nests an object deeper than the format allows");
        open.emplace_back(false);
        break;
      case E::array_start:
        if (depth != 2) refuse(path, "header has an array where the format has none");
        open.emplace_back(true);
        break;
      case E::object_end:
      case E::array_end: open.pop_back(); break;
      case E::key:
        if (!open.back().keys.insert(parsed.get<std::string>()).second)
          refuse(path, "header repeats the key \"", parsed.get<std::string>(), "\"");
        break;
      case E::value:
        if (!open.empty() && open.back().array && ++open.back().length > static_cast<std::size_t>(kMaxRank))
          refuse(path, "header has an array longer than ", kMaxRank, " elements");
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    refuse(path, "header is not valid JSON: ", e.what());
  }
}

// A non-negative JSON integer, or nothing.
std::optional<std::uint64_t> as_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

Entry parse_entry(const std::filesystem::path& path, const std::string& name, const json& v,
                  std::uint64_t data_bytes) {
  const auto where = [&] { return "tensor \"" + name + "\": "; };
  if (!v.is_object()) refuse(path, where(), "entry is not an object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) refuse(path, where(), "no \"", field, "\"");
  if (v.size() != 3) refuse(path, where(), "fields other than dtype, shape and data_offsets");

  Entry e{name, DType::f32, {}, 0, 0};
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) refuse(path, where(), "dtype is not a string");
  const auto parsed = parse_dtype(dtype.get<std::string>());
  if (!parsed) refuse(path, where(), "dtype \"", dtype.get<std::string>(), "\" is not one forge holds");
  e.dtype = *parsed;

  // The element count, with the checks from_blob would make (the product of
  // the non-zero extents, and the bytes, fit in int64) done here first, so a
  // bad shape is reported as a bad file.
  const json& shape = v["shape"];
  if (!shape.is_array()) refuse(path, where(), "shape is not an array");
  std::uint64_t product = 1;
  bool has_zero = false, overflow = false;
  for (const json& d : shape) {
    const auto extent = as_count(d);
    if (!extent || *extent > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      refuse(path, where(), "shape ", shape.dump(), " is not a list of non-negative integers");
    e.shape.push_back(static_cast<std::int64_t>(*extent));
    if (*extent == 0) has_zero = true;
    else overflow = overflow || __builtin_mul_overflow(product, *extent, &product);
  }
  std::uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(product, dtype_size(e.dtype), &nbytes) ||
             nbytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (overflow) refuse(path, where(), "shape ", e.shape, " holds more bytes than fit in int64");
  if (has_zero) nbytes = 0;

  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !as_count(offsets[0]) || !as_count(offsets[1]))
    refuse(path, where(), "data_offsets ", offsets.dump(), " is not [begin, end]");
  e.begin = *as_count(offsets[0]);
  e.end = *as_count(offsets[1]);
  if (e.begin > e.end || e.end > data_bytes)
    refuse(path, where(), "data_offsets [", e.begin, ", ", e.end, "] lie outside the ", data_bytes, " data bytes");
  if (e.end - e.begin != nbytes)
    refuse(path, where(), "data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes, but shape ",
           e.shape, " of ", safetensors_name(e.dtype), " needs ", nbytes);
  return e;
}

Metadata parse_metadata(const std::filesystem::path& path, const json& v) {
  if (!v.is_object()) refuse(path, kMetadataKey, " is not an object");
  Metadata metadata;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) refuse(path, kMetadataKey, " value of \"", key, "\" is not a string");
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// The byte ranges must tile the data: in order of offset, each non-empty
// tensor starts where the previous one ended, and the last ends at the end.
void check_tiling(const std::filesystem::path& path, std::vector<const Entry*> entries, std::uint64_t data_bytes) {
  std::erase_if(entries, [](const Entry* e) { return e->begin == e->end; });
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : entries) {
    if (e->begin < covered)
      refuse(path, "tensors \"", previous->name, "\" and \"", e->name, "\" overlap at byte ", e->begin);
    if (e->begin > covered) refuse(path, "data bytes [", covered, ", ", e->begin, ") belong to no tensor");
    covered = e->end;
    previous = e;
  }
  if (covered != data_bytes) refuse(path, "data bytes [", covered, ", ", data_bytes, ") belong to no tensor");
}

// forge's bool kernels read bytes as C++ bool, for which only 0 and 1 are values.
void check_bools(const std::filesystem::path& path, const Entry& e, const std::byte* data) {
  for (std::uint64_t i = e.begin; i < e.end; ++i)
    if (std::to_integer<unsigned>(data[i]) > 1)
      refuse(path, "tensor \"", e.name, "\": BOOL element ", i - e.begin, " is ",
             std::to_integer<unsigned>(data[i]), ", not 0 or 1");
}

// A tensor over the mapping, which it keeps alive; or, for bytes not aligned
// to the element size (which from_blob and the kernels need), a copy in
// memory the tensor owns.
Tensor make_tensor(ExecContext& ctx, const std::shared_ptr<detail::MappedFile>& file, std::byte* data,
                   const Entry& e) {
  const std::size_t nbytes = e.end - e.begin;
  std::byte* p = data + e.begin;
  if (nbytes == 0) p = file->data();  // page-aligned; an empty tensor reads nothing
  if (reinterpret_cast<std::uintptr_t>(p) % dtype_size(e.dtype) == 0)
    return ctx.from_blob(p, e.shape, e.dtype, [file] {});
  constexpr std::align_val_t kAlign{Buffer::kAlignmentBytes};
  std::shared_ptr<std::byte> copy;
  try {
    copy.reset(static_cast<std::byte*>(::operator new(nbytes, kAlign)),
               [](std::byte* q) { ::operator delete(q, kAlign); });
  } catch (const std::bad_alloc&) {
    FORGE_FAIL(out_of_memory, kLoadOp, file->path(), ": no memory to align tensor \"", e.name, "\" (", nbytes,
               " bytes)");
  }
  std::memcpy(copy.get(), p, nbytes);
  std::byte* q = copy.get();
  return ctx.from_blob(q, e.shape, e.dtype, [copy = std::move(copy)] {});
}

}  // namespace

void save_safetensors(const std::filesystem::path& path, const StateDict& tensors, const Metadata& metadata) {
  const auto order = file_order(tensors);
  const std::string header = header_text(order, metadata);
  unsigned char length[kHeaderLengthBytes];
  put_u64_le(header.size(), length);

  detail::AtomicFile file(path, kSaveOp);
  file.write(length, sizeof length);
  file.write(header.data(), header.size());
  for (const auto& [name, t] : order)
    if (t.nbytes() > 0) file.write(t.raw_data(kSaveOp), t.nbytes());
  file.commit();
}

SafetensorsContents read_safetensors(ExecContext& ctx, const std::filesystem::path& path) {
  FORGE_CHECK(ctx.device().is_cpu(), device, kLoadOp, path, ": the context is on ", ctx.device().str(),
              "; files map into host memory");
  const auto file = detail::MappedFile::open(path, kLoadOp);
  const std::uint64_t size = file->size();
  if (size < kHeaderLengthBytes) refuse(path, "file of ", size, " bytes is shorter than the 8-byte header length");
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | std::to_integer<std::uint64_t>(file->data()[i]);
  if (header_bytes > kMaxHeaderBytes) refuse(path, "header length ", header_bytes, " exceeds ", kMaxHeaderBytes);
  if (header_bytes > size - kHeaderLengthBytes)
    refuse(path, "header length ", header_bytes, " runs past the end of the file (", size, " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(file->data()) + kHeaderLengthBytes, header_bytes);
  if (text.empty() || text.front() != '{') refuse(path, "header does not start with '{'");
  // The JSON parser would stop at a NUL as at the end of its input.
  if (text.find('\0') != std::string_view::npos) refuse(path, "header contains a NUL byte");

  const json header = parse_header(path, text);
  if (!header.is_object()) refuse(path, "header is not a JSON object");
  std::byte* data = file->data() + kHeaderLengthBytes + header_bytes;
  const std::uint64_t data_bytes = size - kHeaderLengthBytes - header_bytes;

  SafetensorsContents out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) out.metadata = parse_metadata(path, value);
    else entries.push_back(parse_entry(path, name, value, data_bytes));
  }
  std::vector<const Entry*> views;
  for (const Entry& e : entries) views.push_back(&e);
  check_tiling(path, std::move(views), data_bytes);
  for (const Entry& e : entries)
    if (e.dtype == DType::boolean) check_bools(path, e, data);

  for (const Entry& e : entries) out.tensors.emplace(e.name, make_tensor(ctx, file, data, e));
  return out;
}

StateDict load_safetensors(ExecContext& ctx, const std::filesystem::path& path) {
  return read_safetensors(ctx, path).tensors;
}

}  // namespace forge::io
