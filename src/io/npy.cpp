// NumPy .npy reading and writing. The format:
//   - the magic "\x93NUMPY", a major and a minor version byte;
//   - the header length: u16 little-endian (1.0), u32 (2.0, 3.0);
//   - the header: a Python dict literal {'descr': '<f4', 'fortran_order': False,
//     'shape': (2, 3), } padded with spaces and ending in '\n', so that the
//     data starts at a multiple of 64 bytes;
//   - the elements, packed.
// The reader parses only that dict grammar (strings, True/False, tuples of
// integers) with a bounded header length, and requires exactly the three keys
// and exactly the data bytes the shape calls for.

#include "forge/io/npy.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/tensor_internal.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace forge::io {

namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr const char* kSaveOp = "save_npy";
constexpr const char* kLoadOp = "load_npy";
constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kPreambleBytes = 8;         // magic and version
constexpr std::size_t kMaxHeaderBytes = 1 << 20;  // a header of three keys needs well under 1 KiB
constexpr std::size_t kHeaderAlignBytes = 64;     // NumPy aligns the data to 64 bytes
constexpr std::size_t kMaxV1HeaderBytes = 65535;  // the u16 of version 1.0

// ---- descr <-> dtype ----

struct Descr {
  DType dtype;
  std::string_view name;  // without the byte-order character
};
constexpr Descr kDescrs[] = {{DType::f32, "f4"}, {DType::f64, "f8"}, {DType::f16, "f2"},     {DType::i32, "i4"},
                             {DType::i64, "i8"}, {DType::u8, "u1"},  {DType::boolean, "b1"}, {DType::i8, "i1"}};

std::string descr_of(DType dtype) {
  for (const auto& d : kDescrs)
    if (d.dtype == dtype) {
      std::string descr(1, dtype_size(dtype) == 1 ? '|' : '<');  // byte order: none, or little
      return descr.append(d.name);
    }
  FORGE_FAIL(dtype, kSaveOp, dtype_name(dtype), " has no NumPy type (convert it first, e.g. to f32)");
}

// ---- writing ----

struct HeaderText {
  std::string text;  // the dict, padded, ending in '\n'
  bool v2;           // too long for version 1.0's u16 length
};

HeaderText header_text(const Tensor& t) {
  std::string shape = "(";
  for (int d = 0; d < t.dim(); ++d) {
    shape += std::to_string(t.size(d));
    if (t.dim() == 1)
      shape += ",";  // (3,): a one-element tuple
    else if (d + 1 < t.dim())
      shape += ", ";
  }
  shape += ")";
  std::string dict = "{'descr': '" + descr_of(t.dtype()) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Padded with spaces before the '\n' so the data starts 64-aligned.
  const auto padded = [&](std::size_t length_bytes) {
    const std::size_t total = kPreambleBytes + length_bytes + dict.size() + 1;
    return dict.size() + 1 + (kHeaderAlignBytes - total % kHeaderAlignBytes) % kHeaderAlignBytes;
  };
  const bool v2 = padded(2) > kMaxV1HeaderBytes;
  const std::size_t bytes = padded(v2 ? 4 : 2);
  dict.append(bytes - dict.size() - 1, ' ');
  dict += '\n';
  return {std::move(dict), v2};
}

// ---- reading ----

template <typename... Args>
[[noreturn]] void refuse(const std::filesystem::path& path, const Args&... args) {
  forge::detail::fail(ErrorCode::io, kLoadOp, path, ": ", args...);
}

struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<Shape> shape;
};

// A cursor over the header dict; every method refuses what the grammar lacks.
class DictParser {
 public:
  DictParser(const std::filesystem::path& path, std::string_view text) : path_(path), text_(text) {}

  Header parse() {
    Header h;
    expect('{');
    while (!accept('}')) {
      const std::string key = string();
      expect(':');
      if (key == "descr")
        set(h.descr, string(), key);
      else if (key == "fortran_order")
        set(h.fortran_order, boolean(), key);
      else if (key == "shape")
        set(h.shape, tuple(), key);
      else
        refuse(path_, "header has the unexpected key '", key, "'");
      if (!accept(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (pos_ != text_.size()) refuse(path_, "header has text after its dict");
    if (!h.descr || !h.fortran_order || !h.shape)
      refuse(path_, "header lacks one of 'descr', 'fortran_order', 'shape'");
    return h;
  }

 private:
  template <typename T>
  void set(std::optional<T>& slot, T value, const std::string& key) {
    if (slot) refuse(path_, "header repeats the key '", key, "'");
    slot = std::move(value);
  }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) refuse(path_, "header is not a valid dict: expected '", c, "' at byte ", pos_);
  }
  // A quoted string without escapes (no descr or key needs one).
  std::string string() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      refuse(path_, "header is not a valid dict: expected a string at byte ", pos_);
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) refuse(path_, "header has an unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    if (s.find('\\') != std::string::npos) refuse(path_, "header has an escaped string");
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}})
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    refuse(path_, "header is not a valid dict: expected True or False at byte ", pos_);
  }
  std::int64_t integer() {
    skip_space();
    std::int64_t v = 0;
    const std::size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v))
        refuse(path_, "header has a shape extent too large for int64");
      ++pos_;
    }
    if (pos_ == start) refuse(path_, "header shape is not a tuple of non-negative integers (byte ", pos_, ")");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs, as old NumPy wrote them
    return v;
  }
  // "()", "(3,)", "(2, 3)", "(2, 3,)"; "(3)" is an int in Python, not a tuple.
  Shape tuple() {
    expect('(');
    Shape shape;
    while (!accept(')')) {
      if (shape.rank() == kMaxRank) refuse(path_, "header shape has more than ", kMaxRank, " dimensions");
      shape.push_back(integer());
      if (!accept(',')) {
        if (shape.rank() == 1) refuse(path_, "header shape (n) is not a tuple: write (n,)");
        expect(')');
        break;
      }
    }
    return shape;
  }

  const std::filesystem::path& path_;
  std::string_view text_;
  std::size_t pos_ = 0;
};

// The dtype and byte order of a descr such as '<f4', '>i8' or '|u1'.
std::pair<DType, bool> parse_descr(const std::filesystem::path& path, const std::string& descr) {
  if (descr.size() == 3) {
    const char order = descr[0];
    for (const auto& d : kDescrs) {
      if (descr.compare(1, 2, d.name) != 0) continue;
      const bool one_byte = dtype_size(d.dtype) == 1;
      if (order == '<' || order == '=' || (one_byte && (order == '|' || order == '>'))) return {d.dtype, false};
      if (order == '>') return {d.dtype, true};
    }
  }
  refuse(path, "descr '", descr, "' is not one of '<f4' '<f8' '<f2' '<i4' '<i8' '|u1' '|i1' '|b1' (either byte order)");
}

// Element count and bytes of a shape, or a refusal when they overflow int64.
std::uint64_t checked_nbytes(const std::filesystem::path& path, const Shape& shape, DType dtype) {
  std::uint64_t product = 1;
  bool has_zero = false;
  for (std::int64_t d : shape) {
    if (d == 0)
      has_zero = true;
    else if (__builtin_mul_overflow(product, static_cast<std::uint64_t>(d), &product))
      refuse(path, "shape ", shape, " holds more elements than fit in int64");
  }
  std::uint64_t nbytes = 0;
  if (__builtin_mul_overflow(product, dtype_size(dtype), &nbytes) ||
      nbytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    refuse(path, "shape ", shape, " holds more bytes than fit in int64");
  return has_zero ? 0 : nbytes;
}

void swap_bytes(std::byte* p, std::size_t count, std::size_t size) {
  for (std::size_t i = 0; i < count; ++i, p += size)
    for (std::size_t a = 0, b = size - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
}

}  // namespace

void save_npy(const std::filesystem::path& path, const Tensor& t) try {
  FORGE_CHECK(t.defined(), invalid_argument, kSaveOp, "undefined tensor");
  FORGE_CHECK(t.device().is_cpu(), device, kSaveOp, "the tensor is on ", t.device().str(),
              "; only host tensors are written");
  const auto [header, v2] = header_text(t);
  const Tensor packed = forge::detail::packed_where_it_is(t.detach().cpu(), kSaveOp);  // the bytes, on the host

  unsigned char preamble[kPreambleBytes + 4];
  std::memcpy(preamble, kMagic.data(), kMagic.size());
  preamble[6] = v2 ? 2 : 1;
  preamble[7] = 0;
  const std::size_t length_bytes = v2 ? 4 : 2;
  for (std::size_t i = 0; i < length_bytes; ++i)
    preamble[kPreambleBytes + i] = static_cast<unsigned char>(header.size() >> (8 * i));

  detail::AtomicFile file(path, kSaveOp);
  file.write(preamble, kPreambleBytes + length_bytes);
  file.write(header.data(), header.size());
  if (packed.nbytes() > 0) file.write(packed.raw_data(kSaveOp), packed.nbytes());
  file.commit();
}
FORGE_CATCH_OOM(kSaveOp)

Tensor load_npy(ExecContext& ctx, const std::filesystem::path& path) try {
  FORGE_CHECK(ctx.device().is_cpu(), device, kLoadOp, path, ": the context is on ", ctx.device().str(),
              "; files are read into host memory");
  const auto file = detail::MappedFile::open(path, kLoadOp);
  const std::byte* bytes = file->data();
  const std::size_t size = file->size();
  const auto byte = [&](std::size_t i) { return std::to_integer<unsigned>(bytes[i]); };

  if (size < kPreambleBytes + 2 || std::memcmp(bytes, kMagic.data(), kMagic.size()) != 0)
    refuse(path, "not an .npy file (no \\x93NUMPY magic)");
  const unsigned major = byte(6), minor = byte(7);
  if (major < 1 || major > 3 || minor != 0)
    refuse(path, "format version ", major, ".", minor, " is not 1.0, 2.0 or 3.0");
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (size < kPreambleBytes + length_bytes) refuse(path, "file ends inside its header length");
  std::size_t header_bytes = 0;
  for (std::size_t i = length_bytes; i-- > 0;) header_bytes = (header_bytes << 8) | byte(kPreambleBytes + i);
  if (header_bytes > kMaxHeaderBytes) refuse(path, "header length ", header_bytes, " exceeds ", kMaxHeaderBytes);
  const std::size_t data_start = kPreambleBytes + length_bytes + header_bytes;
  if (data_start > size)
    refuse(path, "header length ", header_bytes, " runs past the end of the file (", size, " bytes)");

  const std::string_view text(reinterpret_cast<const char*>(bytes) + kPreambleBytes + length_bytes, header_bytes);
  const Header h = DictParser(path, text).parse();
  const auto [dtype, swapped] = parse_descr(path, *h.descr);
  const std::uint64_t nbytes = checked_nbytes(path, *h.shape, dtype);
  if (size - data_start != nbytes)
    refuse(path, "shape ", *h.shape, " of ", *h.descr, " needs ", nbytes, " data bytes, the file holds ",
           size - data_start);
  if (dtype == DType::boolean)
    for (std::size_t i = 0; i < nbytes; ++i)
      if (byte(data_start + i) > 1) refuse(path, "bool element ", i, " is ", byte(data_start + i), ", not 0 or 1");

  // Fortran order stores the transpose of the C-order array: read it with the
  // dims reversed, then permute them back into a C-order copy.
  const int rank = h.shape->rank();
  const bool transposed = *h.fortran_order && rank > 1;
  Shape stored = *h.shape;
  if (transposed)
    for (int d = 0; d < rank; ++d) stored[d] = (*h.shape)[rank - 1 - d];
  Tensor t = forge::detail::allocate_in(ctx.runtime(), ctx.runtime().pool(), stored, dtype, kLoadOp);  // on the host
  if (nbytes > 0) {
    auto* out = static_cast<std::byte*>(t.raw_data(kLoadOp));
    std::memcpy(out, bytes + data_start, nbytes);
    if (swapped) swap_bytes(out, nbytes / dtype_size(dtype), dtype_size(dtype));
  }
  if (transposed) {
    Dims reverse;
    for (int d = rank - 1; d >= 0; --d) reverse.push_back(d);
    t = forge::detail::packed_where_it_is(t.permute(reverse), kLoadOp);
  }
  forge::detail::adopt_output(t);
  return t;
}
FORGE_CATCH_OOM(kLoadOp)

}  // namespace forge::io
