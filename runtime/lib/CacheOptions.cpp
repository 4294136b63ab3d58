//===- CacheOptions.cpp - where the kernel cache lives --------------------===//
// Why: see CacheOptions.h. Keep every getenv of the cache here.
#include "flashjit/Runtime/CacheOptions.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

#include <cstdlib>

namespace flashjit {

std::string CacheOptions::resolveDirectory(const char *cacheDir,
                                           const char *xdgCacheHome,
                                           const char *home) {
  auto set = [](const char *v) { return v && *v; };
  if (set(cacheDir))
    return cacheDir;
  llvm::SmallString<256> path;
  if (set(xdgCacheHome))
    llvm::sys::path::append(path, xdgCacheHome, "flashjit");
  else if (set(home))
    llvm::sys::path::append(path, home, ".cache", "flashjit");
  return std::string(path.str());
}

CacheOptions CacheOptions::fromEnvironment() {
  CacheOptions options;
  options.directory =
      resolveDirectory(std::getenv("FLASHJIT_CACHE_DIR"),
                       std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
  return options;
}

} // namespace flashjit
