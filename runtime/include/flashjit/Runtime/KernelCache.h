//===- KernelCache.h - compiled kernels in memory and on disk ------*- C++
//-*-===//
// Why: compiling a kernel takes a large fraction of a second; looking it up
// must take microseconds (memory) or milliseconds (disk). Lookups go to
// memory, then disk, then the caller's build. On disk, entries are published atomically, guarded by a per-key
// file lock across processes, and verified by checksums before use. A
// directory that cannot be used costs a warning, never a failure.
#ifndef FLASHJIT_RUNTIME_KERNELCACHE_H
#define FLASHJIT_RUNTIME_KERNELCACHE_H

#include "flashjit/Runtime/CacheFormat.h"
#include "flashjit/Runtime/CacheOptions.h"
#include "flashjit/Templates/KernelABI.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace flashjit {

/// One compiled kernel.
struct CacheEntry {
  KernelInfo info;
  std::string ptx;
  /// May be empty: a machine without a GPU compiles PTX only; the runtime
  /// adds the cubin later (KernelCache::storeCubin).
  std::string cubin;
};

/// Counters since the cache was constructed.
struct CacheStats {
  uint64_t memoryHits = 0;
  uint64_t diskHits = 0;
  uint64_t builds = 0;
  uint64_t corruptEntries = 0; ///< found on disk, warned about, removed
};
nlohmann::json toJson(const CacheStats &stats);

/// One directory of the on-disk cache, as list() sees it.
struct CacheListing {
  std::string key;
  std::string kernelName; ///< empty when meta.json is unreadable
  uint64_t ptxBytes = 0, cubinBytes = 0;
  std::string created; ///< ISO 8601 UTC
  /// The toolchain that wrote it (empty when meta.json is unreadable).
  std::string flashjitVersion, llvmVersion, generator;
  bool valid = false;
  std::string problem; ///< why it is not valid
};
nlohmann::json toJson(const CacheListing &listing);

/// Thread-safe. Several KernelCache objects, in one process or many, may
/// share a directory.
class KernelCache {
public:
  using EntryPtr = std::shared_ptr<const CacheEntry>;
  using BuildFn = llvm::function_ref<llvm::Expected<CacheEntry>()>;

  /// CacheOptions::fromEnvironment().
  KernelCache();
  explicit KernelCache(CacheOptions options);
  KernelCache(const KernelCache &) = delete;
  KernelCache &operator=(const KernelCache &) = delete;

  /// The key of a kernel: 32 hex digits (see makeCacheKey).
  static std::string
  makeKey(llvm::StringRef specCanonical, llvm::StringRef configCanonical,
          llvm::StringRef chip, llvm::StringRef flashjitVersion,
          llvm::StringRef llvmVersion, llvm::StringRef ptxVersion);
  static std::string makeKey(const CacheKeyInputs &inputs);

  /// The entry for `inputs`: from memory, else from disk (verified), else
  /// from `build`, which is then written to disk. Across processes sharing
  /// the directory, one builds and the others wait for and read its
  /// result. Errors only when `build` fails (its error, unchanged).
  llvm::Expected<EntryPtr> getOrBuild(const CacheKeyInputs &inputs,
                                      BuildFn build);
  /// Same, with the key already computed (the hot path hashes nothing).
  /// `key` must be makeKey(inputs).
  llvm::Expected<EntryPtr>
  getOrBuild(llvm::StringRef key, const CacheKeyInputs &inputs, BuildFn build);

  /// Memory, then disk; null on a miss. Never builds.
  EntryPtr lookup(llvm::StringRef key);

  /// Replaces the cubin of an existing entry (in memory and on disk,
  /// atomically), e.g. after the runtime JIT-linked the PTX on a GPU.
  /// Errors if no entry `key` exists; a disk that cannot be written only
  /// warns, as everywhere.
  llvm::Error storeCubin(llvm::StringRef key, llvm::StringRef cubin);

  /// Every entry directory on disk, sorted by key, checked in full.
  std::vector<CacheListing> list() const;
  /// Empties memory and removes every entry directory and every stray
  /// temporary directory on disk; returns how many directories it removed.
  /// Temporary directories another process is writing right now are left
  /// alone. Errors name a directory that could not be removed.
  llvm::Expected<size_t> clear();
  /// Removes the entry of `key` from memory and disk, its lock file too
  /// (after its writer, if any, is done); a missing entry is no error.
  /// Errors name the directory.
  llvm::Error remove(llvm::StringRef key);

  /// The cache directory ("" when memory only).
  llvm::StringRef path() const { return Options.directory; }
  /// False when memory only: no directory set, or it could not be created.
  bool diskEnabled() const { return DiskEnabled.load(); }
  /// False when entries are read from disk but new ones are kept in memory
  /// only (a read-only or full directory); implies the warning was given.
  bool diskWritable() const {
    return DiskEnabled.load() && WritesEnabled.load();
  }
  CacheStats stats() const;

private:
  enum class DiskState { Missing, Valid, Corrupt };
  struct DiskRead {
    DiskState state = DiskState::Missing;
    std::shared_ptr<CacheEntry> entry;
    CacheMetadata meta;
    std::string problem;
  };

  EntryPtr findInMemory(llvm::StringRef key);
  EntryPtr insertInMemory(llvm::StringRef key, EntryPtr entry);
  llvm::Expected<EntryPtr> buildInMemory(llvm::StringRef key, BuildFn build);
  llvm::Expected<EntryPtr> buildAndStore(llvm::StringRef key,
                                         const CacheKeyInputs &inputs,
                                         BuildFn build);

  std::string entryDir(llvm::StringRef key) const;
  std::string lockPath(llvm::StringRef key) const;
  DiskRead readEntry(llvm::StringRef key) const;
  /// Writes a temporary directory and renames it into place; if another
  /// process published `key` first, keeps theirs. Errors mean the
  /// directory is unusable.
  llvm::Error publish(llvm::StringRef key, const CacheMetadata &meta,
                      const CacheEntry &entry, bool replace);
  /// Renames an entry out of sight, then deletes it.
  llvm::Error discard(llvm::StringRef key) const;
  std::string scratchName(llvm::StringRef kind, llvm::StringRef key) const;
  bool ensureDirectory();
  void disableDisk(llvm::StringRef why);
  void disableWrites(llvm::StringRef why);
  void warn(llvm::StringRef message) const;

  CacheOptions Options;
  std::atomic<bool> DiskEnabled{false};
  std::atomic<bool> WritesEnabled{false};
  std::atomic<bool> Warned{false}; ///< the one unusable-directory warning
  std::once_flag DirectoryOnce;

  mutable std::mutex MemoryMutex;
  llvm::StringMap<EntryPtr> Memory;

  mutable std::mutex WarnMutex;
  std::atomic<uint64_t> MemoryHits{0}, DiskHits{0}, Builds{0},
      CorruptEntries{0};
};

} // namespace flashjit

#endif
