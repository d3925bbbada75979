// AtomicFile: a temporary beside the target, fsync, rename (see atomic_file.h).

#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdint>
#include <string>

#include "forge/error.h"

namespace forge::io::detail {

namespace {

// Distinguishes the temporaries of concurrent writers in one process (the pid
// distinguishes processes).
std::atomic<std::uint64_t> temp_counter{0};

constexpr int kTempAttempts = 16;

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path path, const char* op) : path_(std::move(path)), op_(op) {
  for (int attempt = 0; attempt < kTempAttempts && fd_ < 0; ++attempt) {
    temp_ = path_;
    temp_ += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(temp_counter.fetch_add(1));
    // 0666 less the umask, as a plain create would give the final file.
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) fail("cannot create a temporary file");
  }
  if (fd_ < 0) fail("cannot create a temporary file");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

void AtomicFile::fail(const char* what) const {
  const int err = errno;
  FORGE_FAIL(io, op_, path_, ": ", what, ": ", std::strerror(err));
}

void AtomicFile::discard_and_fail(const char* what) const {
  const int err = errno;
  ::unlink(temp_.c_str());
  errno = err;
  fail(what);
}

void AtomicFile::write(const void* data, std::size_t nbytes) {
  const auto* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write");
    p += n;
    nbytes -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  // Flushed before the rename, so a crash leaves the old file or the whole new one.
  if (::fsync(fd_) != 0) fail("cannot flush");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) discard_and_fail("cannot close");
  if (::rename(temp_.c_str(), path_.c_str()) != 0) discard_and_fail("cannot rename the temporary file into place");
}

}  // namespace forge::io::detail
