//===- DeviceModel.cpp - device limits, validation and JSON ---------------===//
// Why: a device model may come from a file someone wrote for a GPU the table
// does not know; it is checked here so the heuristic never divides by a zero
// limit or trusts a per-block limit above the per-SM one.
#include "flashjit/Autotune/DeviceModel.h"

#include "JsonFields.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit::autotune {

using nlohmann::json;

std::string DeviceModel::computeCapabilityText() const {
  return llvm::formatv("{0}.{1}", ccMajor, ccMinor).str();
}

llvm::Expected<std::pair<int, int>>
parseComputeCapability(llvm::StringRef text) {
  auto [majorText, minorText] = text.trim().split('.');
  unsigned major = 0, minor = 0;
  if (majorText.getAsInteger(10, major) || minorText.getAsInteger(10, minor) ||
      major < 1 || major > 99 || minor > 9)
    return llvm::createStringError(
        llvm::formatv("compute capability '{0}' is not of the form "
                      "<major>.<minor>, e.g. 8.0 or 9.0",
                      text)
            .str());
  return std::make_pair(static_cast<int>(major), static_cast<int>(minor));
}

std::string formatBytes(uint64_t bytes) {
  if (bytes < 1024)
    return llvm::formatv("{0} B", bytes).str();
  if (bytes % 1024 == 0)
    return llvm::formatv("{0} KB", bytes / 1024).str();
  return llvm::formatv("{0:f1} KB", static_cast<double>(bytes) / 1024.0).str();
}

llvm::Error DeviceModel::validate() const {
  auto fail = [&](const llvm::Twine &what) {
    return llvm::createStringError(
        ("device model '" + name + "': " + what).str());
  };
  if (name.empty())
    return llvm::createStringError("device model: the name is empty");
  if (ccMajor < 1 || ccMinor < 0 || ccMinor > 9)
    return fail(llvm::formatv("compute capability {0}.{1} is not valid",
                              ccMajor, ccMinor));
  if (smCount == 0)
    return fail("sm_count must be at least 1");
  if (sharedMemoryPerSM == 0 || sharedMemoryPerBlockOptin == 0)
    return fail("shared memory per SM and per block must be positive");
  if (sharedMemoryPerBlockOptin > sharedMemoryPerSM)
    return fail(llvm::formatv("shared memory per block ({0}) exceeds shared "
                              "memory per SM ({1})",
                              sharedMemoryPerBlockOptin, sharedMemoryPerSM));
  if (maxRegistersPerThread == 0 || registersPerSM < maxRegistersPerThread)
    return fail("registers per SM must be at least the registers per thread");
  if (maxThreadsPerBlock < 32 || maxThreadsPerSM < maxThreadsPerBlock)
    return fail(llvm::formatv("max threads per block ({0}) must be from 32 "
                              "to the max threads per SM ({1})",
                              maxThreadsPerBlock, maxThreadsPerSM));
  if (maxBlocksPerSM == 0)
    return fail("max blocks per SM must be at least 1");
  if ((memoryBandwidthGBs && *memoryBandwidthGBs <= 0) ||
      (denseTensorTflops && *denseTensorTflops <= 0))
    return fail("bandwidth and TFLOP/s, when given, must be positive");
  return llvm::Error::success();
}

json DeviceModel::toJson() const {
  json out = {
      {"name", name},
      {"compute_capability", computeCapabilityText()},
      {"sm_count", smCount},
      {"shared_memory_per_sm", sharedMemoryPerSM},
      {"shared_memory_per_block_optin", sharedMemoryPerBlockOptin},
      {"reserved_shared_memory_per_block", reservedSharedMemoryPerBlock},
      {"registers_per_sm", registersPerSM},
      {"max_registers_per_thread", maxRegistersPerThread},
      {"max_threads_per_block", maxThreadsPerBlock},
      {"max_threads_per_sm", maxThreadsPerSM},
      {"max_blocks_per_sm", maxBlocksPerSM},
      {"l2_bytes", l2Bytes},
  };
  if (memoryBandwidthGBs)
    out["memory_bandwidth_gbs"] = *memoryBandwidthGBs;
  if (denseTensorTflops)
    out["dense_tensor_tflops"] = *denseTensorTflops;
  return out;
}

llvm::Expected<DeviceModel> DeviceModel::fromJson(const json &in) {
  using namespace detail;
  constexpr int64_t kU32 = 0xffffffffLL;
  if (auto err = requireObject(in, "device model"))
    return err;
  DeviceModel m;
  auto name = readString(in, "", "name");
  if (!name)
    return name.takeError();
  m.name = *name;
  auto ccText = readString(in, "", "compute_capability");
  if (!ccText)
    return ccText.takeError();
  auto cc = parseComputeCapability(*ccText);
  if (!cc)
    return cc.takeError();
  std::tie(m.ccMajor, m.ccMinor) = *cc;

  struct UnsignedField {
    const char *key;
    unsigned *dest;
  };
  const UnsignedField fields[] = {
      {"sm_count", &m.smCount},
      {"shared_memory_per_sm", &m.sharedMemoryPerSM},
      {"shared_memory_per_block_optin", &m.sharedMemoryPerBlockOptin},
      {"reserved_shared_memory_per_block", &m.reservedSharedMemoryPerBlock},
      {"registers_per_sm", &m.registersPerSM},
      {"max_registers_per_thread", &m.maxRegistersPerThread},
      {"max_threads_per_block", &m.maxThreadsPerBlock},
      {"max_threads_per_sm", &m.maxThreadsPerSM},
      {"max_blocks_per_sm", &m.maxBlocksPerSM},
  };
  for (const UnsignedField &field : fields) {
    auto value = readInt(in, "", field.key, 0, kU32);
    if (!value)
      return value.takeError();
    *field.dest = static_cast<unsigned>(*value);
  }
  auto l2 = readInt(in, "", "l2_bytes", 0, INT64_MAX);
  if (!l2)
    return l2.takeError();
  m.l2Bytes = static_cast<uint64_t>(*l2);
  auto bandwidth = readOptionalNumber(in, "", "memory_bandwidth_gbs");
  if (!bandwidth)
    return bandwidth.takeError();
  m.memoryBandwidthGBs = *bandwidth;
  auto tflops = readOptionalNumber(in, "", "dense_tensor_tflops");
  if (!tflops)
    return tflops.takeError();
  m.denseTensorTflops = *tflops;
  if (auto err = m.validate())
    return err;
  return m;
}

} // namespace flashjit::autotune
