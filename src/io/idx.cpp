// IDX reader (include/forge/io/idx.h has the format and the policy). One code
// path reads both kinds of file: zlib's gzread decompresses a gzip stream and
// copies anything else through unchanged; the 1f 8b magic, checked here
// first, only decides which size bound applies before allocating.

#include "forge/io/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "core/tensor_internal.h"
#include "forge/exec_context.h"
#include "io/regular_file.h"

namespace forge::io {
namespace {

constexpr const char* kOp = "load_idx";
// Deflate cannot expand its input by more than about 1032:1 (RFC 1951: a
// 258-byte match in at most 2 bits), so a gzip file of n bytes holds at most
// this many times n: a header claiming more is refused before allocating.
constexpr std::uint64_t kMaxDeflateRatio = 1032;
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 62;
constexpr unsigned kReadChunkBytes = 1u << 30;  // gzread takes an unsigned, returns an int
constexpr unsigned kGzBufferBytes = 1u << 18;
constexpr std::uint64_t kStagingBytes = 1u << 20;  // i8 and i16 are read this much at a time

struct ElementType {
  std::uint8_t code;
  const char* name;
  std::size_t file_bytes;  // bytes per element in the file
  DType dtype;             // what it becomes in memory
};

constexpr ElementType kTypes[] = {
    {0x08, "u8", 1, DType::u8},   {0x09, "i8", 1, DType::i32},  {0x0B, "i16", 2, DType::i32},
    {0x0C, "i32", 4, DType::i32}, {0x0D, "f32", 4, DType::f32}, {0x0E, "f64", 8, DType::f64},
};

const ElementType* find_type(std::uint8_t code) {
  for (const ElementType& t : kTypes)
    if (t.code == code) return &t;
  return nullptr;
}

// An open IDX file, plain or gzip, read front to back.
class Source {
 public:
  explicit Source(const std::string& path) : path_(path) {
    detail::ReadFile file(path, kOp);  // a FIFO or device is refused here, before anything blocks
    unsigned char magic[2] = {0, 0};
    gzip_ = ::pread(file.fd(), magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    file_bytes_ = file.size();
    file_ = gzdopen(file.fd(), "rb");
    FORGE_CHECK(file_ != nullptr, io, kOp, path, ": zlib cannot open it");
    file.release();  // gzclose closes it from here on
    gzbuffer(file_, kGzBufferBytes);
  }
  ~Source() { gzclose(file_); }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  bool gzip() const noexcept { return gzip_; }
  std::uint64_t file_bytes() const noexcept { return file_bytes_; }
  const std::string& path() const noexcept { return path_; }

  // Reads exactly n bytes or throws: `what` names the part of the file. A
  // part read in pieces passes the bytes read before and its whole size, for
  // the message.
  void read_exact(void* dst, std::uint64_t n, const char* what, std::uint64_t done_before = 0,
                  std::uint64_t part_bytes = 0) {
    const std::uint64_t got = read_raw(dst, n);
    FORGE_CHECK(got == n, io, kOp, path_, ": truncated ", what, ": needs ", std::max(part_bytes, n), " bytes, got ",
                done_before + got, gzip_ ? " (decompressed)" : "", stream_error());
  }

  // Requires the stream to end here. Reading past the data also makes zlib
  // check a gzip stream's trailer (CRC and length), so a damaged one throws.
  void expect_end() {
    unsigned char extra[64];
    const std::uint64_t trailing = read_raw(extra, sizeof extra);
    FORGE_CHECK(trailing == 0, io, kOp, path_, ": ", trailing == sizeof extra ? "at least " : "", trailing,
                " bytes after the data its dims cover (trailing bytes are refused)");
  }

 private:
  // Up to n bytes; fewer only at the end of the stream. A zlib error throws.
  std::uint64_t read_raw(void* dst, std::uint64_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    std::uint64_t done = 0;
    while (done < n) {
      const auto want = static_cast<unsigned>(std::min<std::uint64_t>(n - done, kReadChunkBytes));
      const int got = gzread(file_, out + done, want);
      FORGE_CHECK(got >= 0, io, kOp, path_, ": read failed", stream_error());
      if (got == 0) break;
      done += static_cast<std::uint64_t>(got);
    }
    // gzread reports a stream cut short only through gzerror (Z_BUF_ERROR).
    int code = Z_OK;
    gzerror(file_, &code);
    FORGE_CHECK(code == Z_OK || code == Z_STREAM_END, io, kOp, path_, ": read failed", stream_error());
    return done;
  }

  std::string stream_error() const {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code == Z_OK || code == Z_STREAM_END) return {};
    if (code == Z_ERRNO) return std::string(": ") + std::strerror(errno);
    if (code == Z_BUF_ERROR) return ": the gzip stream is truncated";
    return std::string(gzip_ ? ": gzip: " : ": ") + (message ? message : "unknown error");
  }

  std::string path_;
  gzFile file_ = nullptr;
  std::uint64_t file_bytes_ = 0;
  bool gzip_ = false;
};

std::uint32_t big_endian_u32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// Reverses the byte order of each `width`-byte element in place.
void swap_bytes(std::byte* p, std::uint64_t count, std::size_t width) {
  if (width == 1) return;
  for (std::uint64_t i = 0; i < count; ++i, p += width)
    for (std::size_t a = 0, b = width - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
}

// The tensor's own bytes: 64-byte aligned host memory, freed with the last view.
struct HostBytes {
  explicit HostBytes(std::uint64_t n)
      : data(static_cast<std::byte*>(::operator new (std::max<std::uint64_t>(n, 1), std::align_val_t{64}))) {}
  ~HostBytes() { ::operator delete (data, std::align_val_t{64}); }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;
  std::byte* data;
};

std::shared_ptr<HostBytes> allocate(const Source& src, std::uint64_t nbytes) {
  try {
    return std::make_shared<HostBytes>(nbytes);
  } catch (const std::bad_alloc&) {
    FORGE_FAIL(out_of_memory, kOp, src.path(), ": cannot allocate ", nbytes, " bytes for its data");
  }
}

// i8 and i16 elements widened to i32.
void widen(const unsigned char* raw, std::uint64_t count, std::size_t width, std::int32_t* out) {
  for (std::uint64_t i = 0; i < count; ++i)
    out[i] =
        width == 1 ? static_cast<std::int8_t>(raw[i]) : static_cast<std::int16_t>((raw[2 * i] << 8) | raw[2 * i + 1]);
}

// Reads the elements into memory of the dtype they map to. i8 and i16 pass
// through a bounded staging chunk from the context's pool, so a file of any
// size needs no more than its output, and a refused chunk is an
// out_of_memory error like any other allocation.
std::shared_ptr<HostBytes> read_elements(ExecContext& ctx, Source& src, const ElementType& type, std::uint64_t count) {
  const std::uint64_t file_bytes = count * type.file_bytes;
  auto bytes = allocate(src, count * dtype_size(type.dtype));
  if (type.file_bytes == dtype_size(type.dtype)) {  // u8, i32, f32, f64: in place
    src.read_exact(bytes->data, file_bytes, "data");
    swap_bytes(bytes->data, count, type.file_bytes);
    return bytes;
  }
  if (count == 0) return bytes;
  const std::uint64_t chunk = std::min<std::uint64_t>(count, kStagingBytes / type.file_bytes);
  Ref<Buffer> staging;
  try {
    staging = ctx.pool().acquire(chunk * type.file_bytes, kOp);
  } catch (const Error& e) {
    FORGE_FAIL(out_of_memory, kOp, src.path(), ": no memory to stage its ", type.name, " data (", e.what(), ")");
  }
  auto* raw = reinterpret_cast<unsigned char*>(staging->data());
  auto* out = reinterpret_cast<std::int32_t*>(bytes->data);
  for (std::uint64_t done = 0; done < count;) {
    const std::uint64_t n = std::min(chunk, count - done);
    src.read_exact(raw, n * type.file_bytes, "data", done * type.file_bytes, file_bytes);
    widen(raw, n, type.file_bytes, out + done);
    done += n;
  }
  return bytes;
}

}  // namespace

Tensor load_idx(ExecContext& ctx, const std::string& path) try {
  // The tensor's bytes and the staging chunk are host memory.
  FORGE_CHECK(ctx.device().is_cpu(), device, kOp, path, ": the context is on ", ctx.device().str(),
              "; files are read into host memory");
  Source src(path);

  unsigned char head[4];
  src.read_exact(head, 4, "header");
  FORGE_CHECK(head[0] == 0 && head[1] == 0, io, kOp, path, ": not an IDX file (magic starts 0x", std::hex, int{head[0]},
              " 0x", int{head[1]}, ", expected 0x0 0x0)");
  const ElementType* type = find_type(head[2]);
  FORGE_CHECK(type != nullptr, io, kOp, path, ": unknown element type 0x", std::hex, int{head[2]},
              " (known: 0x8 u8, 0x9 i8, 0xb i16, 0xc i32, 0xd f32, 0xe f64)");
  const int ndims = head[3];
  FORGE_CHECK(ndims >= 1 && ndims <= kMaxRank, io, kOp, path, ": ", ndims, " dims; forge reads 1 to ", kMaxRank);

  unsigned char raw_dims[4 * kMaxRank];
  src.read_exact(raw_dims, 4 * static_cast<std::uint64_t>(ndims), "header dims");
  Shape shape;
  // span counts a zero extent as one: a shape with a zero still needs the
  // product of its other extents to fit (as every forge shape does).
  std::uint64_t count = 1, span = 1;
  bool overflow = false;
  for (int d = 0; d < ndims; ++d) {
    const std::uint32_t extent = big_endian_u32(raw_dims + 4 * d);
    shape.push_back(extent);
    const std::uint64_t factor = std::max<std::uint32_t>(extent, 1);
    overflow = overflow || span > kMaxBytes / 8 / factor;
    if (!overflow) {
      span *= factor;
      count *= extent;
    }
  }
  FORGE_CHECK(!overflow, io, kOp, path, ": dims ", shape, " hold more elements than any file can");

  const std::uint64_t header_bytes = 4 + 4 * static_cast<std::uint64_t>(ndims);
  const std::uint64_t data_bytes = count * type->file_bytes;
  if (src.gzip()) {
    FORGE_CHECK(data_bytes / kMaxDeflateRatio <= src.file_bytes(), io, kOp, path, ": dims ", shape, " of ", type->name,
                " need ", data_bytes, " bytes, more than a gzip file of ", src.file_bytes(), " bytes can hold");
  } else {
    const std::uint64_t available = src.file_bytes() - std::min(src.file_bytes(), header_bytes);
    FORGE_CHECK(data_bytes <= available, io, kOp, path, ": truncated data: dims ", shape, " of ", type->name, " need ",
                data_bytes, " bytes, the file has ", available, " after the header");
    FORGE_CHECK(data_bytes == available, io, kOp, path, ": ", available - data_bytes, " bytes after the data its dims ",
                shape, " cover (trailing bytes are refused)");
  }

  std::shared_ptr<HostBytes> bytes = read_elements(ctx, src, *type, count);
  src.expect_end();
  return forge::detail::blob_tensor(ctx, Device::cpu(), bytes->data, shape, type->dtype, [bytes] {});  // host bytes
}
FORGE_CATCH_OOM(kOp)

}  // namespace forge::io
