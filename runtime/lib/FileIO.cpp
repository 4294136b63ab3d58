//===- FileIO.cpp - whole-file reads and writes for the cache -------------===//
// Why: see FileIO.h. Plain POSIX calls: the cache runs on Linux and needs
// O_EXCL and exact error numbers.
#include "FileIO.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flashjit {

static llvm::Error ioError(const char *what, const std::string &path, int err) {
  return llvm::createStringError(
      std::error_code(err, std::generic_category()),
      llvm::formatv("cannot {0} '{1}': {2}", what, path, std::strerror(err))
          .str());
}

llvm::Expected<std::string> readWholeFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ioError("read", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ioError("read", path, err);
  }
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  // Read until EOF, not just st_size bytes: the file may have grown.
  for (;;) {
    if (done == data.size())
      data.resize(data.size() + 4096);
    ssize_t n = ::read(fd, &data[done], data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ioError("read", path, err);
    }
    if (n == 0)
      break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(done);
  return data;
}

llvm::Error writeNewFile(const std::string &path, llvm::StringRef data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return ioError("create", path, errno);
  const char *p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      return ioError("write", path, err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    return ioError("write", path, errno);
  return llvm::Error::success();
}

llvm::Error removeTree(const std::string &path) {
  if (std::error_code ec =
          llvm::sys::fs::remove_directories(path, /*IgnoreErrors=*/false))
    return llvm::createStringError(
        ec,
        llvm::formatv("cannot remove '{0}': {1}", path, ec.message()).str());
  return llvm::Error::success();
}

} // namespace flashjit
