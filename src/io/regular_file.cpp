// ReadFile: a non-blocking open, fstat, then blocking reads (see regular_file.h).

#include "io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "forge/error.h"

namespace forge::io::detail {

ReadFile::ReadFile(const std::filesystem::path& path, const char* op) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
  // below, before anything reads from it.
  ReadFile file;
  file.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file.fd_ < 0) FORGE_FAIL(io, op, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd_, &st) != 0) FORGE_FAIL(io, op, path, ": cannot stat: ", std::strerror(errno));
  FORGE_CHECK(S_ISREG(st.st_mode), io, op, path, ": not a regular file");
  // Linux ignores O_NONBLOCK on a regular file; cleared anyway, so reads block as usual.
  const int flags = ::fcntl(file.fd_, F_GETFL);
  if (flags < 0 || ::fcntl(file.fd_, F_SETFL, flags & ~O_NONBLOCK) != 0)
    FORGE_FAIL(io, op, path, ": cannot clear O_NONBLOCK: ", std::strerror(errno));
  fd_ = file.release();
  size_ = static_cast<std::uint64_t>(st.st_size);
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

int ReadFile::release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace forge::io::detail
