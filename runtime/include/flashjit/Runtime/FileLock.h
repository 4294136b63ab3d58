//===- FileLock.h - an exclusive advisory lock on a file ----------*- C++
//-*-===//
// Why: processes that compile the same kernel at once must agree on who
// builds it. flock(2) on a per-key lock file gives that, and the kernel
// drops the lock when a holder crashes, so no stale lock can wedge the cache.
#ifndef FLASHJIT_RUNTIME_FILELOCK_H
#define FLASHJIT_RUNTIME_FILELOCK_H

#include "llvm/Support/Error.h"
#include <optional>
#include <string>

namespace flashjit {

/// Holds flock(LOCK_EX) on a file until destroyed. The lock excludes other
/// processes and other FileLock objects of this process alike (each opens
/// the file afresh). Lock files are left in place: deleting one that another
/// process has open would let two holders coexist.
class FileLock {
public:
  /// Creates `path` if needed and blocks until the lock is held.
  static llvm::Expected<FileLock> acquire(llvm::StringRef path);
  /// Like acquire but returns std::nullopt at once if another holder has it.
  static llvm::Expected<std::optional<FileLock>>
  tryAcquire(llvm::StringRef path);

  FileLock(FileLock &&other) noexcept;
  FileLock &operator=(FileLock &&other) noexcept;
  FileLock(const FileLock &) = delete;
  FileLock &operator=(const FileLock &) = delete;
  ~FileLock();

  /// Removes the lock file while still holding it, then releases. Used by
  /// cache clearing; a process that opened the old file in the meantime
  /// notices (see acquire) and retries on the new one.
  void unlinkAndRelease();

  const std::string &path() const { return Path; }

private:
  FileLock(std::string path, int fd) : Path(std::move(path)), Fd(fd) {}
  static llvm::Expected<std::optional<FileLock>> lock(llvm::StringRef path,
                                                      bool wait);
  void release();

  std::string Path;
  int Fd = -1;
};

} // namespace flashjit

#endif
