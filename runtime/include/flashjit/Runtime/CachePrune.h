//===- CachePrune.h - drop the cache entries no build can serve -*- C++ -*-===//
// Why: an entry's key hashes the flashjit, LLVM and generator versions, so
// after an upgrade the old entries are never read again, yet they stay on
// disk. Pruning removes those and the damaged ones, and keeps every entry
// this build may still serve (other chips' included).
#ifndef FLASHJIT_RUNTIME_CACHEPRUNE_H
#define FLASHJIT_RUNTIME_CACHEPRUNE_H

#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Runtime/KernelCache.h"

#include "llvm/Support/Error.h"
#include <cstdint>
#include <string>
#include <vector>

namespace flashjit {

/// Why a build of `current` can never serve `entry` (another flashjit,
/// LLVM or generator wrote it, or it is damaged); empty when it may.
std::string staleReason(const CacheListing &entry,
                        const ToolchainVersions &current);

/// What pruneCache removed and kept.
struct PruneReport {
  struct Removed {
    CacheListing entry;
    std::string reason;
  };
  std::vector<Removed> removed;
  size_t kept = 0;
  uint64_t bytesFreed = 0; ///< PTX and cubin of the removed entries
};

/// Removes every entry of `cache` that staleReason names, in memory and on
/// disk. Errors name the directory that could not be removed; what was
/// removed before it stays removed.
llvm::Expected<PruneReport> pruneCache(KernelCache &cache,
                                       const ToolchainVersions &current);

} // namespace flashjit

#endif
