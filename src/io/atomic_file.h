#pragma once
// AtomicFile: how forge's writers (safetensors, npy) replace a file.

#include <cstddef>
#include <filesystem>
#include <string>

struct stat;

namespace forge::io::detail {

// Writes a file all at once or not at all: the bytes go to a fresh temporary
// file beside `path`, which commit() flushes to disk and renames over `path`.
// Destroyed without commit (a failure half-way), it removes the temporary, so
// `path` is never left half written and a reader that mapped the old file
// keeps its bytes. A symbolic link at `path` is followed (the file it leads to
// is replaced), only a regular file is replaced, and a replaced file keeps its
// mode (see Note [replacing a file] in atomic_file.cpp).
class AtomicFile {
 public:
  AtomicFile(std::filesystem::path path, const char* op);  // throws ErrorCode::io
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t nbytes);  // throws ErrorCode::io
  void commit();                                     // throws ErrorCode::io

 private:
  // Sets target_ to the file `path` leads to through symbolic links; whether
  // it exists, and if so its lstat in `st`.
  bool resolve_target(struct stat& st);
  // Refuses to follow `link` (lstat of target_) where fs.protected_symlinks would.
  void refuse_unprotected_link(const struct stat& link) const;
  // Gives the temporary the replaced file's owner and group where allowed,
  // and decides the mode commit() gives it (last: a write by a process
  // without CAP_FSETID clears set-user-ID and set-group-ID).
  void keep_owner(const struct stat& st);
  std::string described_target() const;                        // the target, for messages, when a link led to it
  [[noreturn]] void fail(const char* what) const;              // reports errno
  [[noreturn]] void discard_and_fail(const char* what) const;  // also removes the closed temporary
  std::filesystem::path path_;                                 // as the caller named it
  std::filesystem::path target_;                               // the file replaced: path_ with its links followed
  std::filesystem::path temp_;
  const char* op_;
  int fd_ = -1;
  int mode_ = -1;  // the mode commit() sets; -1 for a new file (created with its mode)
};

}  // namespace forge::io::detail
