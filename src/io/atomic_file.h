#pragma once
// AtomicFile: how forge's writers (safetensors, npy) replace a file.

#include <cstddef>
#include <filesystem>

namespace forge::io::detail {

// Writes a file all at once or not at all: the bytes go to a fresh temporary
// file beside `path`, which commit() flushes to disk and renames over `path`.
// Destroyed without commit (a failure half-way), it removes the temporary, so
// `path` is never left half written and a reader that mapped the old file
// keeps its bytes.
class AtomicFile {
 public:
  AtomicFile(std::filesystem::path path, const char* op);  // throws ErrorCode::io
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t nbytes);  // throws ErrorCode::io
  void commit();                                      // throws ErrorCode::io

 private:
  [[noreturn]] void fail(const char* what) const;              // reports errno
  [[noreturn]] void discard_and_fail(const char* what) const;  // also removes the closed temporary
  std::filesystem::path path_;
  std::filesystem::path temp_;
  const char* op_;
  int fd_ = -1;
};

}  // namespace forge::io::detail
