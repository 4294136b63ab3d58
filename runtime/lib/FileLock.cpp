//===- FileLock.cpp - an exclusive advisory lock on a file ----------------===//
// Why: see FileLock.h. The one subtlety is a lock file unlinked by a cache
// clear between our open() and our flock(): we would then hold a lock on a
// file nobody else can find. After locking we compare the inode we hold with
// the one at the path and retry until they match.
#include "flashjit/Runtime/FileLock.h"

#include "llvm/Support/FormatVariadic.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flashjit {

static llvm::Error lockError(llvm::StringRef what, llvm::StringRef path,
                             int err) {
  return llvm::createStringError(
      std::error_code(err, std::generic_category()),
      llvm::formatv("cannot {0} lock file '{1}': {2}", what, path,
                    std::strerror(err))
          .str());
}

llvm::Expected<std::optional<FileLock>> FileLock::lock(llvm::StringRef path,
                                                       bool wait) {
  std::string p = path.str();
  for (;;) {
    int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return lockError("create", p, errno);
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      int err = errno;
      ::close(fd);
      if (!wait && err == EWOULDBLOCK)
        return std::optional<FileLock>();
      return lockError("take", p, err);
    }
    // Still the file at `path`? If it was unlinked (or replaced) while we
    // waited, our lock protects nothing: start over.
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && ::stat(p.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
      return std::optional<FileLock>(FileLock(p, fd));
    ::close(fd);
  }
}

llvm::Expected<FileLock> FileLock::acquire(llvm::StringRef path) {
  auto lock = FileLock::lock(path, /*wait=*/true);
  if (!lock)
    return lock.takeError();
  return std::move(**lock);
}

llvm::Expected<std::optional<FileLock>>
FileLock::tryAcquire(llvm::StringRef path) {
  return FileLock::lock(path, /*wait=*/false);
}

FileLock::FileLock(FileLock &&other) noexcept
    : Path(std::move(other.Path)), Fd(other.Fd) {
  other.Fd = -1;
}

FileLock &FileLock::operator=(FileLock &&other) noexcept {
  if (this != &other) {
    release();
    Path = std::move(other.Path);
    Fd = other.Fd;
    other.Fd = -1;
  }
  return *this;
}

FileLock::~FileLock() { release(); }

void FileLock::unlinkAndRelease() {
  if (Fd >= 0)
    ::unlink(Path.c_str());
  release();
}

void FileLock::release() {
  if (Fd < 0)
    return;
  // Closing the descriptor drops the flock.
  ::close(Fd);
  Fd = -1;
}

} // namespace flashjit
