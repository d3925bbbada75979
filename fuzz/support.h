#pragma once
// What the fuzz bodies share: the context they run on, the input as a file,
// and the checks around each run.

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "forge/forge.h"
#include "targets.h"

namespace forge_fuzz {

// The caller's current context (the corpus test's TestContext), else one
// made on first use and kept: libFuzzer calls a body millions of times.
inline forge::ExecContext& context() {
  if (forge::ExecContext* current = forge::ExecContext::current()) return *current;
  static forge::ExecContext fallback(
      forge::ExecContextOptions{.threads = 1, .max_cached_bytes = std::size_t{64} << 20});
  return fallback;
}

// The input as a file without touching the disk: a memfd, named by its
// /proc/self/fd path, so the readers take their real path (open, fstat, mmap
// or gzdopen) over exactly these bytes.
class MemFile {
 public:
  MemFile(const std::uint8_t* data, std::size_t size) : fd_(::memfd_create("forge-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) throw Violation("memfd_create failed");
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) {
        ::close(fd_);
        throw Violation("writing the input to a memfd failed");
      }
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const noexcept { return path_; }

 private:
  int fd_;
  std::string path_;
};

// How often each byte value occurs: byte swaps and transposes move bytes
// around but keep this, so it compares a loaded tensor with the file's data.
using Histogram = std::array<std::uint64_t, 256>;

inline void count_bytes(Histogram& h, const void* p, std::size_t n) {
  const auto* bytes = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) ++h[bytes[i]];
}

inline void require(bool ok, const char* what) {
  if (!ok) throw Violation(what);
}

// Runs body(ctx); a forge::Error with one of `allowed` codes is an accepted
// refusal, any other code a Violation. Either way every pool buffer the run
// took must be back when it ends.
template <typename Body>
int run(std::initializer_list<forge::ErrorCode> allowed, Body&& body) {
  forge::ExecContext& ctx = context();
  const std::int64_t outstanding = ctx.stats().outstanding;
  try {
    body(ctx);
  } catch (const forge::Error& e) {
    bool ok = false;
    for (forge::ErrorCode code : allowed) ok = ok || e.code() == code;
    if (!ok) throw Violation(std::string("refused with an unexpected code: ") + e.what());
  }
  require(ctx.stats().outstanding == outstanding, "pool buffers outstanding after the run");
  return 0;
}

// A reader's refusals: a bad file (io), or a size the system would not give.
inline constexpr std::initializer_list<forge::ErrorCode> kReaderCodes = {forge::ErrorCode::io,
                                                                         forge::ErrorCode::out_of_memory};

}  // namespace forge_fuzz
