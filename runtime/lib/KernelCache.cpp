//===- KernelCache.cpp - compiled kernels in memory and on disk -----------===//
// Why: see KernelCache.h. The protocol, in one place:
//  * An entry is the directory <dir>/<key>/ holding kernel.ptx,
//    kernel.cubin and meta.json. It appears by rename(2) of a complete
//    temporary directory <dir>/.tmp-<key>-<pid>-<random>/, so a reader sees
//    all of it or none; a crash leaves only a temporary directory, which
//    no lookup reads and clear() removes.
//  * Readers take no lock: they accept an entry only if every size and
//    checksum matches meta.json, and treat anything else as a miss.
//  * Builders take <dir>/<key>.lock, look again, and only then build,
//    remove a corrupt entry, or publish. So one process builds per key and
//    the others wait and then read its result.
//  * No disk trouble is an error: the cache warns once and goes on in
//    memory (reads continue if only writing fails).
#include "flashjit/Runtime/KernelCache.h"
#include "FileIO.h"
#include "flashjit/Runtime/Checksum.h"
#include "flashjit/Runtime/FileLock.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace flashjit {

nlohmann::json toJson(const CacheStats &s) {
  return {{"memory_hits", s.memoryHits},
          {"disk_hits", s.diskHits},
          {"builds", s.builds},
          {"corrupt_entries", s.corruptEntries}};
}

nlohmann::json toJson(const CacheListing &l) {
  nlohmann::json j = {{"key", l.key},
                      {"kernel", l.kernelName},
                      {"ptx_bytes", l.ptxBytes},
                      {"cubin_bytes", l.cubinBytes},
                      {"created", l.created},
                      {"flashjit", l.flashjitVersion},
                      {"llvm", l.llvmVersion},
                      {"generator", l.generator},
                      {"valid", l.valid}};
  if (!l.valid)
    j["problem"] = l.problem;
  return j;
}

KernelCache::KernelCache() : KernelCache(CacheOptions::fromEnvironment()) {}

KernelCache::KernelCache(CacheOptions options) : Options(std::move(options)) {
  bool useDisk = !Options.directory.empty();
  DiskEnabled = useDisk;
  WritesEnabled = useDisk;
}

std::string KernelCache::makeKey(llvm::StringRef specCanonical,
                                 llvm::StringRef configCanonical,
                                 llvm::StringRef chip,
                                 llvm::StringRef flashjitVersion,
                                 llvm::StringRef llvmVersion,
                                 llvm::StringRef ptxVersion) {
  return makeCacheKey({specCanonical.str(), configCanonical.str(), chip.str(),
                       flashjitVersion.str(), llvmVersion.str(),
                       ptxVersion.str()});
}

std::string KernelCache::makeKey(const CacheKeyInputs &inputs) {
  return makeCacheKey(inputs);
}

CacheStats KernelCache::stats() const {
  CacheStats s;
  s.memoryHits = MemoryHits.load();
  s.diskHits = DiskHits.load();
  s.builds = Builds.load();
  s.corruptEntries = CorruptEntries.load();
  return s;
}

//===----------------------------------------------------------------------===//
// Warnings and degradation
//===----------------------------------------------------------------------===//

void KernelCache::warn(llvm::StringRef message) const {
  std::lock_guard<std::mutex> guard(WarnMutex);
  if (Options.onWarning)
    Options.onWarning(message);
  else
    llvm::errs() << "flashjit: warning: " << message << "\n";
}

void KernelCache::disableDisk(llvm::StringRef why) {
  DiskEnabled = false;
  WritesEnabled = false;
  if (!Warned.exchange(true))
    warn(llvm::formatv("kernel cache directory '{0}' is unusable ({1}); "
                       "kernels will be compiled in memory only",
                       Options.directory, why)
             .str());
}

void KernelCache::disableWrites(llvm::StringRef why) {
  WritesEnabled = false;
  if (!Warned.exchange(true))
    warn(llvm::formatv("kernel cache directory '{0}' cannot be written "
                       "({1}); new kernels will be compiled in memory only",
                       Options.directory, why)
             .str());
}

bool KernelCache::ensureDirectory() {
  std::call_once(DirectoryOnce, [this] {
    if (!DiskEnabled)
      return;
    if (std::error_code ec =
            llvm::sys::fs::create_directories(Options.directory))
      disableDisk("cannot create it: " + ec.message());
    else if (!llvm::sys::fs::is_directory(Options.directory))
      disableDisk("it is not a directory");
  });
  return DiskEnabled;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

KernelCache::EntryPtr KernelCache::findInMemory(llvm::StringRef key) {
  std::lock_guard<std::mutex> guard(MemoryMutex);
  auto it = Memory.find(key);
  if (it == Memory.end())
    return nullptr;
  MemoryHits.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

KernelCache::EntryPtr KernelCache::insertInMemory(llvm::StringRef key,
                                                  EntryPtr entry) {
  // The first entry stored wins, so every thread sees the same object.
  std::lock_guard<std::mutex> guard(MemoryMutex);
  return Memory.try_emplace(key, std::move(entry)).first->second;
}

llvm::Expected<KernelCache::EntryPtr>
KernelCache::buildInMemory(llvm::StringRef key, BuildFn build) {
  auto built = build();
  if (!built)
    return built.takeError();
  Builds.fetch_add(1);
  return insertInMemory(key,
                        std::make_shared<const CacheEntry>(std::move(*built)));
}

//===----------------------------------------------------------------------===//
// Disk
//===----------------------------------------------------------------------===//

std::string KernelCache::entryDir(llvm::StringRef key) const {
  return Options.directory + "/" + key.str();
}

std::string KernelCache::lockPath(llvm::StringRef key) const {
  return Options.directory + "/" + key.str() + ".lock";
}

std::string KernelCache::scratchName(llvm::StringRef kind,
                                     llvm::StringRef key) const {
  static std::atomic<unsigned> counter{0};
  unsigned salt = llvm::sys::Process::GetRandomNumber() ^ (counter++ << 20);
  return llvm::formatv("{0}/.{1}-{2}-{3}-{4:x8}", Options.directory, kind, key,
                       static_cast<long>(::getpid()), salt)
      .str();
}

KernelCache::DiskRead KernelCache::readEntry(llvm::StringRef key) const {
  DiskRead r;
  std::string dir = entryDir(key);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return r; // Missing
  auto corrupt = [&](std::string why) {
    r.state = DiskState::Corrupt;
    r.problem = std::move(why);
    r.entry.reset();
    return r;
  };
  if (!S_ISDIR(st.st_mode))
    return corrupt("not a directory");

  auto metaText = readWholeFile(dir + "/" + kMetaFileName);
  if (!metaText)
    return corrupt(llvm::toString(metaText.takeError()));
  auto meta = parseMetadata(*metaText);
  if (!meta)
    return corrupt(llvm::toString(meta.takeError()));
  r.meta = std::move(*meta);
  if (r.meta.key != key)
    return corrupt("meta.json describes key " + r.meta.key);

  r.entry = std::make_shared<CacheEntry>();
  r.entry->info = r.meta.info;
  const std::tuple<const char *, const CacheFileInfo *, std::string *> files[] =
      {{kPtxFileName, &r.meta.ptx, &r.entry->ptx},
       {kCubinFileName, &r.meta.cubin, &r.entry->cubin}};
  for (auto [name, expected, out] : files) {
    auto data = readWholeFile(dir + "/" + name);
    if (!data)
      return corrupt(llvm::toString(data.takeError()));
    if (data->size() != expected->bytes)
      return corrupt(llvm::formatv("{0} is {1} bytes, meta.json says {2} "
                                   "(truncated or overwritten)",
                                   name, data->size(), expected->bytes));
    if (checksumHex(*data) != expected->checksum)
      return corrupt(llvm::formatv("{0} does not match its checksum "
                                   "(damaged)",
                                   name));
    *out = std::move(*data);
  }
  r.state = DiskState::Valid;
  return r;
}

llvm::Error KernelCache::publish(llvm::StringRef key, const CacheMetadata &meta,
                                 const CacheEntry &entry, bool replace) {
  std::string tmp = scratchName("tmp", key);
  if (::mkdir(tmp.c_str(), 0755) != 0)
    return llvm::createStringError(
        std::error_code(errno, std::generic_category()),
        llvm::formatv("cannot create '{0}': {1}", tmp, std::strerror(errno))
            .str());
  // meta.json last: a directory without it is never mistaken for an entry.
  llvm::Error err = writeNewFile(tmp + "/" + kPtxFileName, entry.ptx);
  if (!err)
    err = writeNewFile(tmp + "/" + kCubinFileName, entry.cubin);
  if (!err)
    err = writeNewFile(tmp + "/" + kMetaFileName, serializeMetadata(meta));
  if (err) {
    llvm::consumeError(removeTree(tmp));
    return err;
  }
  if (Options.beforePublish)
    Options.beforePublish(tmp);

  std::string target = entryDir(key);
  if (!replace) {
    if (::rename(tmp.c_str(), target.c_str()) == 0)
      return llvm::Error::success();
    int code = errno;
    llvm::consumeError(removeTree(tmp));
    // Another writer published first: theirs is as good as ours.
    if (code == EEXIST || code == ENOTEMPTY)
      return llvm::Error::success();
    return llvm::createStringError(
        std::error_code(code, std::generic_category()),
        llvm::formatv("cannot rename '{0}' to '{1}': {2}", tmp, target,
                      std::strerror(code))
            .str());
  }

#ifdef RENAME_EXCHANGE
  // Swap old and new in one step; readers never see the key missing.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(),
                  RENAME_EXCHANGE) == 0) {
    llvm::consumeError(removeTree(tmp)); // now holds the old entry
    return llvm::Error::success();
  }
#endif
  // No exchange here: move the old entry aside, then the new one in.
  // Readers that look in between see a miss and queue on the key lock.
  std::string trash = scratchName("trash", key);
  if (::rename(target.c_str(), trash.c_str()) != 0 && errno != ENOENT) {
    int code = errno;
    llvm::consumeError(removeTree(tmp));
    return llvm::createStringError(
        std::error_code(code, std::generic_category()),
        llvm::formatv("cannot move '{0}' aside: {1}", target,
                      std::strerror(code))
            .str());
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    int code = errno;
    (void)::rename(trash.c_str(), target.c_str());
    llvm::consumeError(removeTree(tmp));
    return llvm::createStringError(
        std::error_code(code, std::generic_category()),
        llvm::formatv("cannot rename '{0}' to '{1}': {2}", tmp, target,
                      std::strerror(code))
            .str());
  }
  if (llvm::sys::fs::exists(trash))
    llvm::consumeError(removeTree(trash));
  return llvm::Error::success();
}

llvm::Error KernelCache::discard(llvm::StringRef key) const {
  // Out of sight first, so no reader finds a half-deleted entry.
  std::string dir = entryDir(key);
  std::string trash = scratchName("trash", key);
  if (::rename(dir.c_str(), trash.c_str()) != 0) {
    if (errno == ENOENT)
      return llvm::Error::success();
    return removeTree(dir);
  }
  return removeTree(trash);
}

//===----------------------------------------------------------------------===//
// Lookup
//===----------------------------------------------------------------------===//

llvm::Expected<KernelCache::EntryPtr>
KernelCache::getOrBuild(const CacheKeyInputs &inputs, BuildFn build) {
  return getOrBuild(makeKey(inputs), inputs, build);
}

llvm::Expected<KernelCache::EntryPtr>
KernelCache::getOrBuild(llvm::StringRef key, const CacheKeyInputs &inputs,
                        BuildFn build) {
  if (EntryPtr hit = findInMemory(key))
    return hit;
  if (makeKey(inputs) != key)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "kernel cache key %s is not the key of its inputs (%s): compute it "
        "with KernelCache::makeKey",
        key.str().c_str(), makeKey(inputs).c_str());
  if (!ensureDirectory())
    return buildInMemory(key, build);

  // Fast path, no lock: a complete, verified entry is final.
  DiskRead read = readEntry(key);
  if (read.state == DiskState::Valid) {
    DiskHits.fetch_add(1);
    return insertInMemory(key, std::move(read.entry));
  }
  return buildAndStore(key, inputs, build);
}

llvm::Expected<KernelCache::EntryPtr>
KernelCache::buildAndStore(llvm::StringRef key, const CacheKeyInputs &inputs,
                           BuildFn build) {
  std::optional<FileLock> lock;
  if (WritesEnabled) {
    auto locked = FileLock::acquire(lockPath(key));
    if (locked)
      lock.emplace(std::move(*locked));
    else
      disableWrites(llvm::toString(locked.takeError()));
  }

  // Under the lock the disk cannot change beneath us: look again. Without
  // it (read-only): use a good entry, report a bad one, change nothing.
  DiskRead read = readEntry(key);
  if (read.state == DiskState::Valid) {
    DiskHits.fetch_add(1);
    return insertInMemory(key, std::move(read.entry));
  }
  if (read.state == DiskState::Corrupt) {
    CorruptEntries.fetch_add(1);
    warn(llvm::formatv("kernel cache entry '{0}' is corrupt ({1}){2}",
                       entryDir(key), read.problem,
                       lock ? "; removing it and compiling again"
                            : " and cannot be removed; compiling in memory")
             .str());
    if (lock)
      if (llvm::Error err = discard(key))
        disableWrites(llvm::toString(std::move(err)));
  }
  if (!lock)
    return buildInMemory(key, build);

  auto built = build();
  if (!built)
    return built.takeError();
  Builds.fetch_add(1);
  auto entry = std::make_shared<const CacheEntry>(std::move(*built));
  if (WritesEnabled) {
    CacheMetadata meta =
        makeMetadata(key, inputs, entry->info, entry->ptx, entry->cubin);
    if (llvm::Error err = publish(key, meta, *entry, /*replace=*/false))
      disableWrites(llvm::toString(std::move(err)));
  }
  return insertInMemory(key, std::move(entry));
}

KernelCache::EntryPtr KernelCache::lookup(llvm::StringRef key) {
  if (EntryPtr hit = findInMemory(key))
    return hit;
  if (!isCacheKey(key) || !ensureDirectory())
    return nullptr;
  DiskRead read = readEntry(key);
  if (read.state != DiskState::Valid)
    return nullptr;
  DiskHits.fetch_add(1);
  return insertInMemory(key, std::move(read.entry));
}

llvm::Error KernelCache::storeCubin(llvm::StringRef key,
                                    llvm::StringRef cubin) {
  bool inMemory = false;
  {
    std::lock_guard<std::mutex> guard(MemoryMutex);
    auto it = Memory.find(key);
    if (it != Memory.end()) {
      auto updated = std::make_shared<CacheEntry>(*it->second);
      updated->cubin = cubin.str();
      it->second = std::move(updated);
      inMemory = true;
    }
  }
  auto noEntry = [&]() -> llvm::Error {
    if (inMemory)
      return llvm::Error::success();
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "cannot store a cubin for kernel cache key %s: no such entry (build "
        "it with getOrBuild first)",
        key.str().c_str());
  };
  if (!isCacheKey(key) || !ensureDirectory() || !WritesEnabled)
    return noEntry();

  auto locked = FileLock::acquire(lockPath(key));
  if (!locked) {
    disableWrites(llvm::toString(locked.takeError()));
    return noEntry();
  }
  DiskRead read = readEntry(key);
  if (read.state != DiskState::Valid)
    return noEntry(); // a corrupt one is dealt with by the next getOrBuild

  CacheEntry entry{read.meta.info, std::move(read.entry->ptx), cubin.str()};
  CacheMetadata meta =
      makeMetadata(key, read.meta.inputs, entry.info, entry.ptx, entry.cubin);
  meta.created = read.meta.created;
  meta.createdUnix = read.meta.createdUnix;
  if (llvm::Error err = publish(key, meta, entry, /*replace=*/true))
    disableWrites(llvm::toString(std::move(err)));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Maintenance
//===----------------------------------------------------------------------===//

/// Names in the cache directory, read before anything is removed.
static std::vector<std::string> directoryNames(const std::string &dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    names.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<CacheListing> KernelCache::list() const {
  std::vector<CacheListing> out;
  if (Options.directory.empty())
    return out;
  for (const std::string &name : directoryNames(Options.directory)) {
    if (!isCacheKey(name) || !llvm::sys::fs::is_directory(entryDir(name)))
      continue;
    DiskRead read = readEntry(name);
    CacheListing l;
    l.key = name;
    l.valid = read.state == DiskState::Valid;
    l.problem = read.problem;
    if (!read.meta.key.empty()) {
      l.kernelName = read.meta.info.name;
      l.ptxBytes = read.meta.ptx.bytes;
      l.cubinBytes = read.meta.cubin.bytes;
      l.created = read.meta.created;
      l.flashjitVersion = read.meta.inputs.flashjitVersion;
      l.llvmVersion = read.meta.inputs.llvmVersion;
      l.generator = read.meta.inputs.generator;
    }
    out.push_back(std::move(l));
  }
  return out;
}

llvm::Error KernelCache::remove(llvm::StringRef key) {
  {
    std::lock_guard<std::mutex> guard(MemoryMutex);
    Memory.erase(key);
  }
  if (Options.directory.empty() || !isCacheKey(key))
    return llvm::Error::success();
  // Wait for a writer of this key (storeCubin) to finish first; the lock
  // file goes with the entry (a process waiting on it retries, see
  // FileLock::unlinkAndRelease).
  auto lock = FileLock::acquire(lockPath(key));
  if (!lock)
    llvm::consumeError(lock.takeError());
  llvm::Error err = discard(key);
  if (lock && !err)
    lock->unlinkAndRelease();
  return err;
}

llvm::Expected<size_t> KernelCache::clear() {
  {
    std::lock_guard<std::mutex> guard(MemoryMutex);
    Memory.clear();
  }
  if (Options.directory.empty() ||
      !llvm::sys::fs::is_directory(Options.directory))
    return 0;

  size_t removed = 0;
  std::vector<std::string> names = directoryNames(Options.directory);
  for (const std::string &name : names) {
    llvm::StringRef n(name);
    std::string path = Options.directory + "/" + name;
    if (isCacheKey(n) && llvm::sys::fs::is_directory(path)) {
      if (llvm::Error err = remove(n))
        return std::move(err);
      ++removed;
      continue;
    }
    llvm::StringRef rest;
    if (n.starts_with(".tmp-"))
      rest = n.drop_front(5);
    else if (n.starts_with(".trash-"))
      rest = n.drop_front(7);
    else
      continue;
    // A temporary directory of a live writer has its key locked.
    llvm::StringRef key = rest.take_front(32);
    if (isCacheKey(key)) {
      auto lock = FileLock::tryAcquire(lockPath(key));
      if (lock && !*lock)
        continue;
      if (!lock)
        llvm::consumeError(lock.takeError());
    }
    if (llvm::Error err = removeTree(path))
      return std::move(err);
    ++removed;
  }
  // Lock files of idle keys go too; held ones stay (see FileLock).
  for (const std::string &name : directoryNames(Options.directory)) {
    llvm::StringRef n(name);
    if (!n.consume_back(".lock") || !isCacheKey(n))
      continue;
    auto lock = FileLock::tryAcquire(lockPath(n));
    if (lock && *lock)
      (*lock)->unlinkAndRelease();
    else if (!lock)
      llvm::consumeError(lock.takeError());
  }
  return removed;
}

} // namespace flashjit
