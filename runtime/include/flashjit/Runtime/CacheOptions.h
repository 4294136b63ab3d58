//===- CacheOptions.h - where the kernel cache lives and who hears --*- C++
//-*-===//
// Why: the cache directory comes from the environment, and the style guide
// asks for one place that reads it. fromEnvironment() is that place; the
// rest of the cache sees only this struct, so tests and embedders can set
// every knob directly.
#ifndef FLASHJIT_RUNTIME_CACHEOPTIONS_H
#define FLASHJIT_RUNTIME_CACHEOPTIONS_H

#include "llvm/ADT/StringRef.h"
#include <functional>
#include <string>

namespace flashjit {

struct CacheOptions {
  /// Root of the on-disk cache. Empty: memory only, silently.
  std::string directory;
  /// Receives each warning (unusable directory, corrupt entry) as one line
  /// of text. Unset: written to stderr as "flashjit: warning: <text>".
  std::function<void(llvm::StringRef)> onWarning;
  /// Test hook, normally unset: called with the temporary directory after
  /// an entry's files are written there and before it is renamed into
  /// place. A test can end the process here to play a crash.
  std::function<void(llvm::StringRef)> beforePublish;

  /// Reads $FLASHJIT_CACHE_DIR, $XDG_CACHE_HOME and $HOME, once per call;
  /// the only function in flashjit that reads the cache's environment.
  static CacheOptions fromEnvironment();

  /// The directory rule, without the environment: `cacheDir` if set and
  /// non-empty, else `xdgCacheHome`/flashjit, else `home`/.cache/flashjit,
  /// else "" (memory only). Null and "" both mean unset.
  static std::string resolveDirectory(const char *cacheDir,
                                      const char *xdgCacheHome,
                                      const char *home);
};

} // namespace flashjit

#endif
