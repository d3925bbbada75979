#pragma once
// MappedFile: a whole regular file mapped for reading, shared by every tensor
// made over it (each holds a std::shared_ptr; the last one unmaps).
//
// The file is opened read-only and mapped private (copy-on-write): reads cost
// no copy, and a write through a loaded tensor changes a private copy of the
// page, never the file. A PROT_READ mapping would turn such a write (an
// optimizer step on loaded weights) into SIGSEGV.
//
// A file that another process truncates while it is mapped makes later reads
// of the lost pages fault (SIGBUS); forge's own writers replace files by
// rename, which leaves a mapped file intact.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

namespace forge::io::detail {

class MappedFile {
 public:
  // Maps `path`; throws ErrorCode::io naming op and the file when it cannot be
  // opened, is not a regular file, or cannot be mapped. An empty file maps to
  // an empty span.
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path, const char* op);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  MappedFile(std::filesystem::path path, std::byte* data, std::size_t size) noexcept
      : path_(std::move(path)), data_(data), size_(size) {}
  std::filesystem::path path_;
  std::byte* data_;
  std::size_t size_;
};

}  // namespace forge::io::detail
