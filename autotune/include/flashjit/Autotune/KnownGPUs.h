//===- KnownGPUs.h - device models of the GPUs flashjit knows ----*- C++
//-*-===//
// Why: the autotuner must reason about a GPU without having one (CI, the
// `--device` option of `flashjit compile --explain`, the compiler's default
// for a chip), so the models of common GPUs live in one cited table.
#ifndef FLASHJIT_AUTOTUNE_KNOWNGPUS_H
#define FLASHJIT_AUTOTUNE_KNOWNGPUS_H

#include "flashjit/Autotune/DeviceModel.h"

#include "llvm/Support/Error.h"
#include <string>
#include <vector>

namespace flashjit::autotune {

struct KnownGPU {
  /// Short lookup key, e.g. "h100", "a100-40gb".
  std::string key;
  /// Lower-case words of the driver names it answers to, e.g. "a100 sxm4 40gb"
  /// (separators '-', '_' and spaces are equivalent).
  std::vector<std::string> driverNames;
  DeviceModel model;
};

/// The table, in the order of the rows.
const std::vector<KnownGPU> &knownGPUs();
/// "t4, a10, a100-40gb, ...".
std::string knownGPUKeys();

/// The model of a known GPU named by its key ("h100") or by the name the
/// driver reports ("NVIDIA H100 80GB HBM3", "Tesla T4"). Case-insensitive;
/// a driver name matches a row when one of the row's names appears in it as
/// whole words; the longest such match wins. Unknown names get an error
/// listing the known keys.
llvm::Expected<DeviceModel> lookupKnownGPU(llvm::StringRef name);

/// The GPU that stands for a compute capability when no device is named
/// (8.0 -> A100 80GB, 8.6 -> A10, 8.9 -> L4, 9.0 -> H100 SXM); an error for
/// other compute capabilities.
llvm::Expected<DeviceModel> referenceGPU(int major, int minor);

} // namespace flashjit::autotune

#endif
