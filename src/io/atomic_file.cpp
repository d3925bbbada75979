// AtomicFile: a temporary beside the target, fsync, rename (see atomic_file.h).
//
// What is replaced, and how (Note [replacing a file]):
//   - a symbolic link is followed, as open(2) would: the file it leads to is
//     replaced and the link stays a link, so a "latest.safetensors" link to a
//     versioned checkpoint keeps working and the checkpoint gets the bytes;
//   - only a regular file (or nothing) may be replaced: a device, FIFO,
//     socket or directory at the target is refused before anything is
//     written (renaming over /dev/full would swap the device for a file);
//   - a replaced file keeps its permission bits, and its owner and group
//     where the process may set them; a new file gets 0666 less the umask,
//     as a plain create would;
//   - the temporary is the target's name plus ".tmp.<pid>.<n>", the name cut
//     short (on a UTF-8 character boundary) so the whole fits the directory's
//     NAME_MAX: any name the target may have, the temporary can have too.

#include "io/atomic_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "forge/error.h"

namespace forge::io::detail {

namespace {

// Distinguishes the temporaries of concurrent writers in one process (the pid
// distinguishes processes).
std::atomic<std::uint64_t> temp_counter{0};

constexpr int kTempAttempts = 16;
constexpr int kMaxLinkHops = 40;  // Linux's own bound on a chain of symbolic links

// The longest file name `dir` allows.
std::size_t name_max(const std::filesystem::path& dir) {
  const long n = ::pathconf(dir.empty() ? "." : dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<std::size_t>(n) : NAME_MAX;
}

// `name` + `suffix`, the name cut short so the result has at most `limit`
// bytes; the cut never splits a UTF-8 character.
std::string temp_name(const std::string& name, const std::string& suffix, std::size_t limit) {
  std::size_t keep = name.size();
  if (keep + suffix.size() > limit) {
    keep = limit > suffix.size() ? limit - suffix.size() : 0;
    while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;
  }
  return name.substr(0, keep) + suffix;
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path path, const char* op) : path_(std::move(path)), op_(op) {
  struct stat st {};
  const bool exists = resolve_target(st);
  if (exists && !S_ISREG(st.st_mode))
    FORGE_FAIL(io, op_, path_, described_target(), ": not a regular file; only a regular file is replaced");
  const std::filesystem::path dir = target_.parent_path();
  const std::size_t limit = name_max(dir);
  for (int attempt = 0; attempt < kTempAttempts && fd_ < 0; ++attempt) {
    const std::string suffix = ".tmp." + std::to_string(::getpid()) + "." + std::to_string(temp_counter.fetch_add(1));
    temp_ = dir / temp_name(target_.filename().string(), suffix, limit);
    // A replaced file's bytes stay private to this user until its mode is
    // copied below; a new file gets 0666 less the umask, as a plain create would.
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, exists ? 0600 : 0666);
    if (fd_ < 0 && errno != EEXIST) fail("cannot create a temporary file");
  }
  if (fd_ < 0) fail("cannot create a temporary file");
  if (exists) keep_owner_and_mode(st);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

bool AtomicFile::resolve_target(struct stat& st) {
  target_ = path_;
  for (int hop = 0; hop <= kMaxLinkHops; ++hop) {
    if (::lstat(target_.c_str(), &st) != 0) {
      if (errno == ENOENT) return false;  // a new file (through a dangling link: where it points)
      fail("cannot inspect the file it replaces");
    }
    if (!S_ISLNK(st.st_mode)) return true;
    std::string link(PATH_MAX, '\0');
    const ssize_t n = ::readlink(target_.c_str(), link.data(), link.size());
    if (n < 0) fail("cannot read the symbolic link");
    if (n == PATH_MAX) {
      errno = ENAMETOOLONG;
      fail("cannot read the symbolic link");
    }
    link.resize(static_cast<std::size_t>(n));
    const std::filesystem::path next(link);
    target_ = next.is_absolute() ? next : target_.parent_path() / next;
  }
  errno = ELOOP;
  fail("cannot follow the symbolic link");
}

void AtomicFile::keep_owner_and_mode(const struct stat& st) {
  // Owner first: changing it clears the set-user-ID and set-group-ID bits.
  // Only root may give a file away; a member of the group may still keep it.
  if (::fchown(fd_, st.st_uid, st.st_gid) != 0) (void)::fchown(fd_, static_cast<uid_t>(-1), st.st_gid);
  if (::fchmod(fd_, st.st_mode & 07777) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    errno = err;
    discard_and_fail("cannot give the temporary file the mode of the one it replaces");
  }
}

std::string AtomicFile::described_target() const {
  return target_ == path_ ? std::string() : " (a link to " + target_.string() + ")";
}

void AtomicFile::fail(const char* what) const {
  const int err = errno;
  FORGE_FAIL(io, op_, path_, described_target(), ": ", what, ": ", std::strerror(err));
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
  if (::rename(temp_.c_str(), target_.c_str()) != 0) discard_and_fail("cannot rename the temporary file into place");
}

}  // namespace forge::io::detail
