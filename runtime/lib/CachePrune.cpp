//===- CachePrune.cpp - drop the cache entries no build can serve ---------===//
// Why: see CachePrune.h. The versions compared are the ones the key hashes
// besides the kernel's own inputs (spec, config, chip, PTX ISA), so an
// entry is kept exactly when some call of this build could look it up.
#include "flashjit/Runtime/CachePrune.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

std::string staleReason(const CacheListing &entry,
                        const ToolchainVersions &current) {
  if (!entry.valid)
    return "damaged: " + entry.problem;
  auto differs = [](llvm::StringRef what, const std::string &had,
                    const std::string &now) {
    return llvm::formatv("{0} {1}, this build {2}", what, had, now).str();
  };
  if (entry.flashjitVersion != current.flashjit)
    return differs("flashjit", entry.flashjitVersion, current.flashjit);
  if (entry.llvmVersion != current.llvm)
    return differs("LLVM", entry.llvmVersion, current.llvm);
  if (entry.generator != current.generator)
    return differs("generator", entry.generator, current.generator);
  return "";
}

llvm::Expected<PruneReport> pruneCache(KernelCache &cache,
                                       const ToolchainVersions &current) {
  PruneReport report;
  for (CacheListing &entry : cache.list()) {
    std::string reason = staleReason(entry, current);
    if (reason.empty()) {
      ++report.kept;
      continue;
    }
    if (llvm::Error err = cache.remove(entry.key))
      return std::move(err);
    report.bytesFreed += entry.ptxBytes + entry.cubinBytes;
    report.removed.push_back({std::move(entry), std::move(reason)});
  }
  return report;
}

} // namespace flashjit
