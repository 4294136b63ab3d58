//===- DeviceInfo.h - what one GPU offers, as the driver reports it -*- C++
//-*-===//
// Why: tile choices, shared-memory opt-in and `flashjit info` all need the
// same few device limits; they are queried once here, in one struct, rather
// than by scattered cuDeviceGetAttribute calls.
#ifndef FLASHJIT_RUNTIME_DEVICEINFO_H
#define FLASHJIT_RUNTIME_DEVICEINFO_H

#include "llvm/Support/Error.h"
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace flashjit {

struct DeviceInfo {
  int ordinal = 0;
  std::string name; ///< e.g. "NVIDIA H100 80GB HBM3"
  int computeMajor = 0, computeMinor = 0;
  int smCount = 0;                   ///< streaming multiprocessors
  int sharedMemoryPerSm = 0;         ///< bytes
  int sharedMemoryPerBlock = 0;      ///< bytes, without opt-in
  int sharedMemoryPerBlockOptin = 0; ///< bytes, the most a kernel can ask for
  int registersPerSm = 0, registersPerBlock = 0;
  int maxThreadsPerSm = 0, maxThreadsPerBlock = 0;
  int l2CacheBytes = 0;
  uint64_t totalMemoryBytes = 0;
  int driverVersion = 0;         ///< as the driver reports it, e.g. 13000
  std::string driverVersionText; ///< e.g. "13.0"

  /// major*10+minor, e.g. 90 for an H100 (the form Target uses).
  int computeCapability() const { return computeMajor * 10 + computeMinor; }
};

/// Queries device `ordinal` through the CUDA driver. Errors when there is
/// no driver, no such device, or a query fails.
llvm::Expected<DeviceInfo> queryDevice(int ordinal = 0);

/// 13000 -> "13.0", 12040 -> "12.4" (the driver's encoding).
std::string formatDriverVersion(int version);

/// All fields, with snake_case keys, for `--json` output.
nlohmann::json toJson(const DeviceInfo &info);

} // namespace flashjit

#endif
