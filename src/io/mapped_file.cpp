// MappedFile: open, check, map; unmap on destruction (see mapped_file.h).

#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "forge/error.h"

namespace forge::io::detail {

namespace {

// Closes the descriptor on every path out of open(): the mapping does not need it.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path, const char* op) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) FORGE_FAIL(io, op, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) FORGE_FAIL(io, op, path, ": cannot stat: ", std::strerror(errno));
  FORGE_CHECK(S_ISREG(st.st_mode), io, op, path, ": not a regular file");
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) return std::shared_ptr<MappedFile>(new MappedFile(path, nullptr, 0));
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) FORGE_FAIL(io, op, path, ": cannot map ", size, " bytes: ", std::strerror(errno));
  try {
    return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<std::byte*>(p), size));
  } catch (...) {
    ::munmap(p, size);
    throw;
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace forge::io::detail
