//===- DeviceInfo.cpp - what one GPU offers, as the driver reports it -----===//
// Why: see DeviceInfo.h.
#include "flashjit/Runtime/DeviceInfo.h"
#include "flashjit/Runtime/CudaDriver.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <nlohmann/json.hpp>

namespace flashjit {

std::string formatDriverVersion(int version) {
  return std::to_string(version / 1000) + "." +
         std::to_string((version % 1000) / 10);
}

llvm::Expected<DeviceInfo> queryDevice(int ordinal) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  const CudaDriver &d = *drv;

  if (auto counted = d.deviceCount(ordinal); !counted)
    return counted.takeError();

  DeviceInfo info;
  info.ordinal = ordinal;
  CUdevice device;
  if (llvm::Error err = FLASHJIT_CU(d, cuDeviceGet, &device, ordinal))
    return std::move(err);

  char name[256] = {0};
  if (llvm::Error err =
          FLASHJIT_CU(d, cuDeviceGetName, name, sizeof(name) - 1, device))
    return std::move(err);
  info.name = name;

  struct Query {
    int *field;
    CUdevice_attribute attribute;
  };
  const Query queries[] = {
      {&info.computeMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {&info.computeMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
      {&info.smCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {&info.sharedMemoryPerSm,
       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR},
      {&info.sharedMemoryPerBlock,
       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
      {&info.sharedMemoryPerBlockOptin,
       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
      {&info.registersPerSm,
       CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR},
      {&info.registersPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK},
      {&info.maxThreadsPerSm,
       CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR},
      {&info.maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {&info.l2CacheBytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE},
  };
  for (const Query &q : queries)
    if (llvm::Error err =
            FLASHJIT_CU(d, cuDeviceGetAttribute, q.field, q.attribute, device))
      return std::move(err);

  size_t total = 0;
  if (llvm::Error err = FLASHJIT_CU(d, cuDeviceTotalMem, &total, device))
    return std::move(err);
  info.totalMemoryBytes = total;

  if (llvm::Error err = FLASHJIT_CU(d, cuDriverGetVersion, &info.driverVersion))
    return std::move(err);
  info.driverVersionText = formatDriverVersion(info.driverVersion);
  // procfs files report size 0: read them as a stream.
  if (auto text =
          llvm::MemoryBuffer::getFileAsStream("/proc/driver/nvidia/version"))
    info.driverRelease = parseDriverRelease((*text)->getBuffer());
  return info;
}

std::string parseDriverRelease(llvm::StringRef text) {
  llvm::StringRef line = text.split('\n').first;
  size_t module = line.find("Kernel Module");
  if (module == llvm::StringRef::npos)
    return "";
  llvm::SmallVector<llvm::StringRef, 8> words;
  line.drop_front(module + llvm::StringRef("Kernel Module").size())
      .split(words, ' ', -1, false);
  // The release is the first word made of digits and dots ("580.159.04");
  // open kernel modules write "Open Kernel Module for x86_64  580.159.04".
  for (llvm::StringRef word : words)
    if (word.contains('.') &&
        llvm::all_of(word, [](char c) { return llvm::isDigit(c) || c == '.'; }))
      return word.str();
  return "";
}

autotune::GpuIdentity gpuIdentity(const DeviceInfo &info) {
  autotune::GpuIdentity gpu;
  gpu.name = info.name;
  gpu.ccMajor = info.computeMajor;
  gpu.ccMinor = info.computeMinor;
  gpu.driver = info.driverRelease.empty() ? "CUDA " + info.driverVersionText
                                          : info.driverRelease;
  return gpu;
}

nlohmann::json toJson(const DeviceInfo &info) {
  return nlohmann::json{
      {"ordinal", info.ordinal},
      {"name", info.name},
      {"compute_capability", std::to_string(info.computeMajor) + "." +
                                 std::to_string(info.computeMinor)},
      {"compute_major", info.computeMajor},
      {"compute_minor", info.computeMinor},
      {"sm_count", info.smCount},
      {"shared_memory_per_sm", info.sharedMemoryPerSm},
      {"shared_memory_per_block", info.sharedMemoryPerBlock},
      {"shared_memory_per_block_optin", info.sharedMemoryPerBlockOptin},
      {"registers_per_sm", info.registersPerSm},
      {"registers_per_block", info.registersPerBlock},
      {"max_threads_per_sm", info.maxThreadsPerSm},
      {"max_threads_per_block", info.maxThreadsPerBlock},
      {"l2_cache_bytes", info.l2CacheBytes},
      {"total_memory_bytes", info.totalMemoryBytes},
      {"driver_version", info.driverVersion},
      {"driver_version_text", info.driverVersionText},
      {"driver_release", info.driverRelease},
  };
}

} // namespace flashjit
