//===- ConfigChoice.cpp - the default tile config of a spec ---------------===//
// Why: one call from the compiler into the autotuner's heuristic.
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/Templates/KernelTemplate.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

llvm::Expected<TileConfig> chooseTileConfig(const AttentionSpec &spec,
                                            const Target &target,
                                            llvm::StringRef device) {
  (void)device;
  std::string reasons;
  for (const KernelTemplate *t : allTemplates()) {
    if (auto err = t->supports(spec, target)) {
      reasons += "\n  " + t->family().str() + ": " + llvm::toString(std::move(err));
      continue;
    }
    for (const TileConfig &c : t->candidates(spec))
      if (c.blockM == 64 && c.blockN == 32)
        return c;
    return t->candidates(spec).front();
  }
  return llvm::createStringError(
      llvm::formatv("no kernel template supports {0} on {1}:{2}",
                    spec.canonical(), target.chip, reasons)
          .str());
}

} // namespace flashjit
