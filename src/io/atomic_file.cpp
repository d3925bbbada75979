// AtomicFile: a temporary beside the target, fsync, rename (see atomic_file.h).
//
// What is replaced, and how (Note [replacing a file]):
//   - a symbolic link is followed, as open(2) would: the file it leads to is
//     replaced and the link stays a link, so a "latest.safetensors" link to a
//     versioned checkpoint keeps working and the checkpoint gets the bytes.
//     As open(2) would under Linux's fs.protected_symlinks, a link in a
//     sticky world-writable directory (/tmp) is followed only when the
//     caller or the directory's owner owns it: another user's link there
//     cannot aim a write at the caller's files;
//   - only a regular file (or nothing) may be replaced: a device, FIFO,
//     socket or directory at the target is refused before anything is
//     written (renaming over /dev/full would swap the device for a file);
//   - a replaced file keeps its permission bits, and its owner and group
//     where the process may set them; where it may not, the bits that would
//     grant another owner's or group's rights to this one are dropped
//     (set-user-ID without the owner; the group bits and set-group-ID
//     without the group); a new file gets 0666 less the umask, as a plain
//     create would;
//   - the target is checked again just before the rename: one that became
//     something other than a regular file meanwhile is refused, not replaced;
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
  if (exists) keep_owner(st);
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
    refuse_unprotected_link(st);
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

void AtomicFile::refuse_unprotected_link(const struct stat& link) const {
  struct stat dir {};
  const std::filesystem::path parent = target_.parent_path();
  if (::stat(parent.empty() ? "." : parent.c_str(), &dir) != 0)
    fail("cannot inspect the directory of the symbolic link");
  const bool sticky_world_writable = (dir.st_mode & S_ISVTX) != 0 && (dir.st_mode & S_IWOTH) != 0;
  if (!sticky_world_writable || link.st_uid == ::geteuid() || link.st_uid == dir.st_uid) return;
  FORGE_FAIL(io, op_, path_, described_target(), ": a symbolic link owned by another user in a sticky world-writable ",
             "directory is not followed (as fs.protected_symlinks refuses it)");
}

void AtomicFile::keep_owner(const struct stat& st) {
  // Only root may give a file away; a member of the group may still keep it.
  mode_t mode = st.st_mode & 07777;
  if (::fchown(fd_, st.st_uid, st.st_gid) != 0) {
    mode &= ~static_cast<mode_t>(S_ISUID);  // a new owner gets no one else's set-user-ID
    if (::fchown(fd_, static_cast<uid_t>(-1), st.st_gid) != 0)
      mode &= ~static_cast<mode_t>(S_IRWXG | S_ISGID);  // nor another group's rights
  }
  mode_ = static_cast<int>(mode);
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
  if (mode_ >= 0 && ::fchmod(fd_, static_cast<mode_t>(mode_)) != 0)
    fail("cannot give the temporary file the mode of the one it replaces");
  // Flushed before the rename, so a crash leaves the old file or the whole new one.
  if (::fsync(fd_) != 0) fail("cannot flush");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) discard_and_fail("cannot close");
  struct stat st {};
  if (::lstat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    ::unlink(temp_.c_str());
    FORGE_FAIL(io, op_, path_, described_target(),
               ": became something other than a regular file while it was written; it is not replaced");
  }
  if (::rename(temp_.c_str(), target_.c_str()) != 0) discard_and_fail("cannot rename the temporary file into place");
}

}  // namespace forge::io::detail
