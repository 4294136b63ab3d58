//===- Target.h - the GPU architecture a kernel is built for ------*- C++ -*-===//
// Why: chip names and PTX features are validated here, before they reach
// LLVM, which aborts the process on a chip/feature pair it does not accept.
#ifndef FLASHJIT_TEMPLATES_TARGET_H
#define FLASHJIT_TEMPLATES_TARGET_H

#include "llvm/Support/Error.h"
#include <string>
#include <vector>

namespace flashjit {

struct Target {
  /// NVPTX chip name, e.g. "sm_80", "sm_90a".
  std::string chip;
  /// Compute capability as major*10+minor, e.g. 80, 90.
  int computeCapability = 0;
  /// True for the architecture-specific "a" variants (sm_90a: wgmma, setmaxnreg).
  bool archSpecific = false;

  /// Accepts the chips flashjit builds for; the error lists them.
  static llvm::Expected<Target> parse(llvm::StringRef chip);
  /// The chip for a device of this compute capability (9.0 -> sm_90a).
  static llvm::Expected<Target> fromComputeCapability(int major, int minor);
  /// The chips parse() accepts.
  static std::vector<std::string> supportedChips();

  /// PTX ISA version emitted for this chip, e.g. 80 for PTX 8.0.
  int ptxVersion() const;
  /// LLVM NVPTX feature string selecting that PTX version, e.g. "+ptx80".
  std::string ptxFeatures() const;
};

} // namespace flashjit

#endif
