//===- Target.cpp - chip names, compute capabilities, PTX versions --------===//
// Why: one table says which chips flashjit builds for and with which PTX ISA;
// everything else asks it, and nothing unvalidated reaches LLVM.
#include "flashjit/Templates/Target.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {
struct ChipRow {
  const char *chip;
  int cc;
  bool archSpecific;
  int ptx; ///< lowest PTX ISA version LLVM 22 accepts for the chip
};
// PTX ISA minimums from NVIDIA's PTX ISA document, "Release notes" table:
// sm_80 PTX 7.0, sm_86 7.1, sm_89 7.8, sm_90 / sm_90a 8.0.
constexpr ChipRow kChips[] = {
    {"sm_80", 80, false, 70}, {"sm_86", 86, false, 71},
    {"sm_89", 89, false, 78}, {"sm_90", 90, false, 80},
    {"sm_90a", 90, true, 80},
};
} // namespace

std::vector<std::string> Target::supportedChips() {
  std::vector<std::string> out;
  for (const ChipRow &row : kChips)
    out.push_back(row.chip);
  return out;
}

llvm::Expected<Target> Target::parse(llvm::StringRef chip) {
  for (const ChipRow &row : kChips)
    if (chip == row.chip)
      return Target{row.chip, row.cc, row.archSpecific};
  return llvm::createStringError(
      llvm::formatv("unknown arch '{0}': expected one of {1}", chip,
                    llvm::join(supportedChips(), ", "))
          .str());
}

llvm::Expected<Target> Target::fromComputeCapability(int major, int minor) {
  int cc = major * 10 + minor;
  // Hopper gets the arch-specific variant: wgmma and setmaxnreg need it.
  if (cc == 90)
    return parse("sm_90a");
  for (const ChipRow &row : kChips)
    if (row.cc == cc && !row.archSpecific)
      return parse(row.chip);
  // Newer GPUs run PTX built for an older chip through the driver's JIT.
  if (cc > 90)
    return parse("sm_90");
  if (cc > 80 && cc < 90)
    return parse("sm_80");
  return llvm::createStringError(
      llvm::formatv("compute capability {0}.{1} is not supported: flashjit "
                    "needs 8.0 (Ampere) or newer",
                    major, minor)
          .str());
}

int Target::ptxVersion() const {
  for (const ChipRow &row : kChips)
    if (chip == row.chip)
      return row.ptx;
  return 80;
}

std::string Target::ptxFeatures() const {
  return "+ptx" + std::to_string(ptxVersion());
}

} // namespace flashjit
