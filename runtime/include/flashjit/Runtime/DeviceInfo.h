//===- DeviceInfo.h - what one GPU offers, as the driver reports it -*- C++
//-*-===//
// Why: tile choices, shared-memory opt-in and `flashjit info` all need the
// same few device limits; they are queried once here, in one struct, rather
// than by scattered cuDeviceGetAttribute calls.
#ifndef FLASHJIT_RUNTIME_DEVICEINFO_H
#define FLASHJIT_RUNTIME_DEVICEINFO_H

#include "flashjit/Autotune/TuningDatabase.h"

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
  /// The kernel driver's release, e.g. "580.159.04", from
  /// /proc/driver/nvidia/version; empty where that file cannot be read.
  std::string driverRelease;

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

/// The release in the text of /proc/driver/nvidia/version ("NVRM version:
/// NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..." -> "580.159.04"), or
/// "" when the text has none.
std::string parseDriverRelease(llvm::StringRef versionFileText);

/// What a tuning measurement depends on besides the kernel: the device's
/// name and compute capability, and the driver's release (its CUDA version,
/// "CUDA 13.0", where the release is unknown).
autotune::GpuIdentity gpuIdentity(const DeviceInfo &info);

} // namespace flashjit

#endif
