#pragma once
// ReadFile: how forge's readers open a file. Opening never blocks and only a
// regular file is accepted: a FIFO opened for reading would wait for a writer
// (forever, with none), and a device or directory is no file to read.

#include <cstdint>
#include <filesystem>

namespace forge::io::detail {

// An open, read-only descriptor on a regular file, closed with the object
// unless release()d.
class ReadFile {
 public:
  // Opens `path`; throws ErrorCode::io naming op and the file when it cannot
  // be opened or is not a regular file.
  ReadFile(const std::filesystem::path& path, const char* op);
  ~ReadFile();
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  int fd() const noexcept { return fd_; }
  std::uint64_t size() const noexcept { return size_; }
  int release() noexcept;  // the descriptor, now the caller's to close

 private:
  ReadFile() = default;  // owns nothing: the constructor's guard while it checks
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace forge::io::detail
