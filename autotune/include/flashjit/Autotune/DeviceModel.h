//===- DeviceModel.h - what the autotuner knows about one GPU ----*- C++
//-*-===//
// Why: the tile choice depends on a handful of per-GPU limits (SM count,
// shared memory, registers, thread and block slots). This struct holds them so
// the heuristic runs without a GPU: from the known-GPU table, from a JSON file
// describing another GPU, or from the driver's attributes (the runtime fills
// it in).
#ifndef FLASHJIT_AUTOTUNE_DEVICEMODEL_H
#define FLASHJIT_AUTOTUNE_DEVICEMODEL_H

#include "llvm/Support/Error.h"
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace flashjit::autotune {

struct DeviceModel {
  /// The name the driver reports, e.g. "NVIDIA H100 80GB HBM3".
  std::string name;
  int ccMajor = 0;
  int ccMinor = 0;
  unsigned smCount = 0;
  /// Shared memory of one SM at the largest carveout, in bytes.
  unsigned sharedMemoryPerSM = 0;
  /// The most shared memory one block may use after opting in
  /// (cudaFuncAttributeMaxDynamicSharedMemorySize), in bytes.
  unsigned sharedMemoryPerBlockOptin = 0;
  /// Shared memory the driver keeps for itself per resident block, in bytes
  /// (1 KB from compute capability 8.0 on, 0 before).
  unsigned reservedSharedMemoryPerBlock = 0;
  /// 32-bit registers of one SM.
  unsigned registersPerSM = 65536;
  unsigned maxRegistersPerThread = 255;
  unsigned maxThreadsPerBlock = 1024;
  unsigned maxThreadsPerSM = 0;
  unsigned maxBlocksPerSM = 0;
  uint64_t l2Bytes = 0;
  /// Peak DRAM bandwidth in GB/s; for explanations only.
  std::optional<double> memoryBandwidthGBs;
  /// Dense bf16 (f16 where the GPU has no bf16) tensor-core TFLOP/s with f32
  /// accumulation; for explanations only.
  std::optional<double> denseTensorTflops;

  /// major*10+minor, as Target::computeCapability.
  int computeCapability() const { return ccMajor * 10 + ccMinor; }
  /// "9.0".
  std::string computeCapabilityText() const;
  /// Checks that the limits are present and consistent; the error names the
  /// field.
  llvm::Error validate() const;

  /// The JSON form: {"name", "compute_capability": "9.0", "sm_count", ...};
  /// the two optional figures are left out when unknown.
  nlohmann::json toJson() const;
  /// Reads toJson()'s form; every field but the optional figures is required.
  static llvm::Expected<DeviceModel> fromJson(const nlohmann::json &json);
};

/// Parses "8.6" into (8, 6); the error shows the expected form.
llvm::Expected<std::pair<int, int>>
parseComputeCapability(llvm::StringRef text);

/// "64 KB", "62.5 KB", "512 B": shared-memory sizes in messages.
std::string formatBytes(uint64_t bytes);

} // namespace flashjit::autotune

#endif
