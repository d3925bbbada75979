// MappedFile: open, check, map; unmap on destruction (see mapped_file.h).

#include "io/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "forge/error.h"
#include "io/regular_file.h"

namespace forge::io::detail {

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path, const char* op) {
  const ReadFile file(path, op);  // the mapping does not need the descriptor: closed on return
  const auto size = static_cast<std::size_t>(file.size());
  if (size == 0) return std::shared_ptr<MappedFile>(new MappedFile(path, nullptr, 0));
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.fd(), 0);
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
