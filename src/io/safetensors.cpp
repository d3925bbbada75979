// safetensors reading and writing. The format:
//   - 8 bytes: the header length n, little-endian u64;
//   - n bytes: a JSON object, { name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
//     optional "__metadata__": {string: string} }, padded with spaces;
//   - the data: every tensor's bytes, packed, C order, little-endian; offsets
//     count from the start of the data.
// The reader trusts nothing: the header length is bounded by the file and by
// kMaxHeaderBytes, its entries by kMaxEntries, the JSON may only nest as deep
// as the format does and is read in one pass (Note [one pass over the
// header]), every entry's dtype, shape and byte range is checked, and the
// byte ranges must tile the data exactly (no overlap, no hole, nothing
// after), as the format requires. Only then are tensors made over the mapping.

#include "forge/io/safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_internal.h"
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
// Tensors in one file: about five times the most any released checkpoint
// holds (a mixture of experts quantized with per-expert scales, ~200 K). Each
// loaded tensor costs about 500 bytes of host memory, so this bounds what a
// header of empty tensors (60 bytes each) can make the reader allocate.
constexpr std::size_t kMaxEntries = std::size_t{1} << 20;

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f32, "F32"},   {DType::f64, "F64"},      {DType::f16, "F16"},
                                     {DType::bf16, "BF16"}, {DType::i32, "I32"},      {DType::i64, "I64"},
                                     {DType::u8, "U8"},     {DType::boolean, "BOOL"}, {DType::i8, "I8"}};

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
    order.emplace_back(name, forge::detail::packed_where_it_is(t.detach().cpu(), kSaveOp));  // on the host
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second.element_size() > b.second.element_size(); });
  return order;
}

// `s` as a JSON string literal; refuses text that is not valid UTF-8.
// (A json value holding a string frees it without allocating; an object or
// array may allocate in its destructor, so the header is not built as one:
// Note [Allocation failure at the API].)
std::string json_string(std::string_view s) {
  try {
    return json(s).dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    FORGE_FAIL(invalid_argument, kSaveOp, "a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
}

// Appends `item` to a JSON list or object being written, after a comma
// unless it is the first.
void append_item(std::string& out, std::string_view item) {
  if (out.size() > 1) out += ',';
  out += item;
}

template <typename Ints>
std::string json_list(const Ints& values) {
  std::string out = "[";
  for (const auto v : values) append_item(out, std::to_string(v));
  out += ']';
  return out;
}

// The header as compact JSON with every object's keys in sorted order (what
// a JSON library writing a sorted map gives), padded with spaces to
// kHeaderAlignBytes.
std::string header_text(const std::vector<std::pair<std::string, Tensor>>& order, const Metadata& metadata) {
  std::vector<std::pair<std::string_view, std::string>> entries;  // key, value text
  entries.reserve(order.size() + 1);
  std::uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    const std::uint64_t end = offset + t.nbytes();
    entries.emplace_back(name, "{\"data_offsets\":" + json_list(std::array{offset, end}) +
                                   ",\"dtype\":" + json_string(safetensors_name(t.dtype())) +
                                   ",\"shape\":" + json_list(t.shape().vec()) + "}");
    offset = end;
  }
  if (!metadata.empty()) {
    std::string object = "{";
    for (const auto& [key, value] : metadata) append_item(object, json_string(key) + ":" + json_string(value));
    object += '}';
    entries.emplace_back(kMetadataKey, std::move(object));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string text = "{";
  for (const auto& [key, value] : entries) append_item(text, json_string(key) + ":" + value);
  text += '}';
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
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

// The header once read: the entries in file order (a deque: no copies as it
// grows) and the metadata.
struct Header {
  std::deque<Entry> entries;
  Metadata metadata;
};

// Note [one pass over the header]
// The header is read by one SAX pass (nlohmann's sax_parse) that checks each
// event as it arrives and builds the entries itself: no JSON tree is built
// and every event costs O(1). Names given twice are found after the pass, by
// sorting the names (the StateDict's order, wanted anyway), so a header of n
// entries costs O(n log n) time and O(n) memory, and n is at most
// kMaxEntries. The parser's callback mode, which this replaced, rescans the
// parent object each time an entry closes: a header of n empty tensors cost
// O(n^2) (64 K of them took minutes). The format's shape is enforced event by
// event: the root object (tensor names and "__metadata__"), each entry's three
// fields, the metadata's strings, and the shape and offset arrays of
// non-negative integers; nothing else may appear and no key may repeat (a
// JSON parser would silently keep the last), so no input, however large,
// builds a deep or wide tree.
class HeaderReader final : public json::json_sax_t {
 public:
  HeaderReader(const std::filesystem::path& path, std::uint64_t data_bytes) : path_(path), data_bytes_(data_bytes) {}

  Header read(std::string_view text) && {
    try {
      json::sax_parse(text.begin(), text.end(), this);
    } catch (const json::exception& e) {
      refuse(path_, "header is not valid JSON: ", e.what());
    }
    if (in_ != In::done) refuse(path_, "header is not a JSON object");  // unreachable: the parser is strict
    return std::move(header_);
  }

  bool start_object(std::size_t) override {
    switch (in_) {
      case In::nothing:
        in_ = In::root;
        return true;
      case In::root:
        in_ = entry_ ? In::entry : In::metadata;
        return true;
      default:
        refuse(path_, "header nests an object deeper than the format allows");
    }
  }

  bool end_object() override {
    if (in_ == In::entry) finish_entry();
    in_ = in_ == In::root ? In::done : In::root;
    return true;
  }

  bool start_array(std::size_t) override {
    if (in_ == In::entry && (field_ == Field::shape || field_ == Field::offsets)) {
      in_ = field_ == Field::shape ? In::shape : In::offsets;
      length_ = 0;
      return true;
    }
    if (in_ == In::entry || in_ == In::metadata) return bad_value("an array");
    refuse(path_, "header has an array where the format has none");
  }

  bool end_array() override {
    if (in_ == In::offsets && length_ != 2)
      refuse(path_, where(), "data_offsets has ", length_, length_ == 1 ? " element" : " elements",
             ", not [begin, end]");
    in_ = In::entry;
    return true;
  }

  bool key(std::string& k) override {
    if (in_ == In::root) return root_key(k);
    if (in_ == In::metadata) {
      const auto [it, fresh] = header_.metadata.emplace(std::move(k), std::string());
      if (!fresh) refuse(path_, "header repeats the key \"", it->first, "\"");
      metadata_value_ = &it->second;
      metadata_key_ = &it->first;
      return true;
    }
    field_ = k == "dtype"          ? Field::dtype
             : k == "shape"        ? Field::shape
             : k == "data_offsets" ? Field::offsets
                                   : Field::none;
    if (field_ == Field::none) refuse(path_, where(), "fields other than dtype, shape and data_offsets (\"", k, "\")");
    const unsigned bit = 1u << static_cast<unsigned>(field_);
    if ((seen_ & bit) != 0) refuse(path_, where(), "header repeats the key \"", k, "\"");
    seen_ |= bit;
    return true;
  }

  bool string(std::string& s) override {
    if (in_ == In::metadata) {
      *metadata_value_ = std::move(s);
      return true;
    }
    if (in_ == In::entry && field_ == Field::dtype) {
      const auto parsed = parse_dtype(s);
      if (!parsed) refuse(path_, where(), "dtype \"", s, "\" is not one forge holds");
      entry_->dtype = *parsed;
      return true;
    }
    return bad_value("\"" + s + "\"");
  }

  bool number_unsigned(std::uint64_t v) override {
    constexpr auto kMaxExtent = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (in_ == In::shape) {
      if (length_ == static_cast<std::size_t>(kMaxRank))
        refuse(path_, where(), "shape is longer than ", kMaxRank, " elements (forge's largest rank)");
      if (v > kMaxExtent) return bad_value(std::to_string(v));
      entry_->shape.push_back(static_cast<std::int64_t>(v));
      ++length_;
      return true;
    }
    if (in_ == In::offsets) {
      if (length_ == 2) refuse(path_, where(), "data_offsets has more than 2 elements, not [begin, end]");
      (length_++ == 0 ? entry_->begin : entry_->end) = v;
      return true;
    }
    return bad_value(std::to_string(v));
  }

  // Non-negative integers come as number_unsigned, so these are never a count.
  bool number_integer(std::int64_t v) override { return bad_value(std::to_string(v)); }
  bool number_float(double, const std::string& text) override { return bad_value(text); }
  bool boolean(bool b) override { return bad_value(b ? "true" : "false"); }
  bool null() override { return bad_value("null"); }
  bool binary(json::binary_t&) override { return bad_value("binary data"); }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    refuse(path_, "header is not valid JSON: ", e.what());
  }

 private:
  enum class In { nothing, root, entry, metadata, shape, offsets, done };
  enum class Field : unsigned { dtype, shape, offsets, none };

  std::string where() const { return "tensor \"" + entry_->name + "\": "; }

  // A root key names a tensor, whose entry starts here, or the metadata.
  bool root_key(std::string& k) {
    if (k == kMetadataKey) {
      if (has_metadata_) refuse(path_, "header repeats the key \"", k, "\"");
      has_metadata_ = true;
      entry_ = nullptr;
      return true;
    }
    if (header_.entries.size() == kMaxEntries)
      refuse(path_, "header has more than ", kMaxEntries, " tensors, forge's limit for one file");
    entry_ = &header_.entries.emplace_back();
    entry_->name = std::move(k);
    seen_ = 0;
    return true;
  }

  // A value (`text` as it reads) where the format has no place for it.
  [[noreturn]] bool bad_value(const std::string& text) const {
    switch (in_) {
      case In::root:
        if (!entry_) refuse(path_, kMetadataKey, " is not an object");
        refuse(path_, where(), "entry is not an object");
      case In::metadata:
        refuse(path_, kMetadataKey, " value of \"", *metadata_key_, "\" is not a string");
      case In::entry:
        if (field_ == Field::dtype) refuse(path_, where(), "dtype ", text, " is not a string");
        if (field_ == Field::shape) refuse(path_, where(), "shape ", text, " is not an array");
        refuse(path_, where(), "data_offsets ", text, " is not [begin, end]");
      case In::shape:
        refuse(path_, where(), "shape element ", length_, " is ", text, ", not a non-negative integer below 2^63");
      case In::offsets:
        refuse(path_, where(), "data_offsets element ", length_, " is ", text, ", not a non-negative integer");
      default:
        refuse(path_, "header is not a JSON object");
    }
  }

  // The entry's closing brace: every field is there, and the shape's bytes
  // are its byte range's. The checks from_blob would make (the product of the
  // non-zero extents, and the bytes, fit in int64) come first, so a bad shape
  // is reported as a bad file.
  void finish_entry() {
    static constexpr const char* kFieldNames[] = {"dtype", "shape", "data_offsets"};
    for (unsigned f = 0; f < 3; ++f)
      if ((seen_ & (1u << f)) == 0) refuse(path_, where(), "no \"", kFieldNames[f], "\"");
    const Entry& e = *entry_;
    std::uint64_t product = 1;
    bool has_zero = false, overflow = false;
    for (const std::int64_t extent : e.shape) {
      if (extent == 0)
        has_zero = true;
      else
        overflow = overflow || __builtin_mul_overflow(product, static_cast<std::uint64_t>(extent), &product);
    }
    std::uint64_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(product, dtype_size(e.dtype), &nbytes) ||
               nbytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (overflow) refuse(path_, where(), "shape ", e.shape, " holds more bytes than fit in int64");
    if (has_zero) nbytes = 0;
    if (e.begin > e.end || e.end > data_bytes_)
      refuse(path_, where(), "data_offsets [", e.begin, ", ", e.end, "] lie outside the ", data_bytes_, " data bytes");
    if (e.end - e.begin != nbytes)
      refuse(path_, where(), "data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes, but shape ",
             e.shape, " of ", safetensors_name(e.dtype), " needs ", nbytes);
    entry_ = nullptr;
  }

  const std::filesystem::path& path_;
  const std::uint64_t data_bytes_;
  Header header_;
  In in_ = In::nothing;
  Entry* entry_ = nullptr;     // the entry being read; null in the metadata
  Field field_ = Field::none;  // the entry field whose value comes next
  unsigned seen_ = 0;          // a bit per field the entry has had
  std::size_t length_ = 0;     // elements of the array being read
  bool has_metadata_ = false;
  std::string* metadata_value_ = nullptr;
  const std::string* metadata_key_ = nullptr;
};

// The entries in name order (the StateDict's), refusing a name given twice.
std::vector<const Entry*> by_name(const std::filesystem::path& path, const std::deque<Entry>& entries) {
  std::vector<const Entry*> order;
  order.reserve(entries.size());
  for (const Entry& e : entries) order.push_back(&e);
  const auto less = [](const Entry* a, const Entry* b) { return a->name < b->name; };
  if (!std::is_sorted(order.begin(), order.end(), less)) std::sort(order.begin(), order.end(), less);
  const auto twice =
      std::adjacent_find(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->name == b->name; });
  if (twice != order.end()) refuse(path, "header repeats the key \"", (*twice)->name, "\"");
  return order;
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
      refuse(path, "tensor \"", e.name, "\": BOOL element ", i - e.begin, " is ", std::to_integer<unsigned>(data[i]),
             ", not 0 or 1");
}

// A tensor over the mapping, which it keeps alive; or, for bytes not aligned
// to the element size (which from_blob and the kernels need), a copy in
// memory the tensor owns.
Tensor make_tensor(ExecContext& ctx, const std::shared_ptr<detail::MappedFile>& file, std::byte* data, const Entry& e) {
  const std::size_t nbytes = e.end - e.begin;
  std::byte* p = data + e.begin;
  if (nbytes == 0) p = file->data();  // page-aligned; an empty tensor reads nothing
  if (reinterpret_cast<std::uintptr_t>(p) % dtype_size(e.dtype) == 0)
    return forge::detail::blob_tensor(ctx, Device::cpu(), p, e.shape, e.dtype, [file] {});  // host bytes
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
  return forge::detail::blob_tensor(ctx, Device::cpu(), q, e.shape, e.dtype, [copy = std::move(copy)] {});
}

}  // namespace

void save_safetensors(const std::filesystem::path& path, const StateDict& tensors, const Metadata& metadata) try {
  // Never write a file the reader refuses.
  FORGE_CHECK(tensors.size() <= kMaxEntries, invalid_argument, kSaveOp, path, ": ", tensors.size(),
              " tensors are more than ", kMaxEntries, ", forge's limit for one file");
  const auto order = file_order(tensors);
  const std::string header = header_text(order, metadata);
  FORGE_CHECK(header.size() <= kMaxHeaderBytes, invalid_argument, kSaveOp, path, ": a header of ", header.size(),
              " bytes is longer than ", kMaxHeaderBytes, ", the limit of a safetensors header");
  unsigned char length[kHeaderLengthBytes];
  put_u64_le(header.size(), length);

  detail::AtomicFile file(path, kSaveOp);
  file.write(length, sizeof length);
  file.write(header.data(), header.size());
  for (const auto& [name, t] : order)
    if (t.nbytes() > 0) file.write(t.raw_data(kSaveOp), t.nbytes());
  file.commit();
}
FORGE_CATCH_OOM(kSaveOp)

SafetensorsContents read_safetensors(ExecContext& ctx, const std::filesystem::path& path) try {
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

  std::byte* data = file->data() + kHeaderLengthBytes + header_bytes;
  const std::uint64_t data_bytes = size - kHeaderLengthBytes - header_bytes;
  Header header = HeaderReader(path, data_bytes).read(text);
  const std::vector<const Entry*> entries = by_name(path, header.entries);
  check_tiling(path, entries, data_bytes);
  for (const Entry* e : entries)
    if (e->dtype == DType::boolean) check_bools(path, *e, data);

  SafetensorsContents out;
  out.metadata = std::move(header.metadata);
  for (const Entry* e : entries) out.tensors.emplace_hint(out.tensors.end(), e->name, make_tensor(ctx, file, data, *e));
  return out;
}
FORGE_CATCH_OOM(kLoadOp)

StateDict load_safetensors(ExecContext& ctx, const std::filesystem::path& path) {
  return read_safetensors(ctx, path).tensors;
}

}  // namespace forge::io
