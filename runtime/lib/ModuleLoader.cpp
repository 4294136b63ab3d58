//===- ModuleLoader.cpp - PTX and cubins into launchable functions --------===//
// Why: see ModuleLoader.h.
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ScopedContext.h"
#include "flashjit/Templates/KernelTemplate.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace flashjit {

llvm::Error checkSharedMemory(const KernelInfo &info, int optinLimit) {
  if (optinLimit >= 0 &&
      info.sharedMemoryBytes <= static_cast<unsigned>(optinLimit))
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "kernel %s needs %u bytes of dynamic shared memory per block but this "
      "device allows at most %d (opt-in limit): choose a tile config with "
      "smaller blocks or fewer stages",
      info.name.c_str(), info.sharedMemoryBytes, optinLimit);
}

llvm::Error checkThreadsPerBlock(const KernelInfo &info, int maxThreads,
                                 int registersPerThread) {
  if (info.threadsPerBlock > 0 && maxThreads > 0 &&
      info.threadsPerBlock <= static_cast<unsigned>(maxThreads))
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "kernel %s is launched with %u threads per block but, using %d "
      "registers per thread, can run at most %d: choose a tile config with "
      "fewer warps",
      info.name.c_str(), info.threadsPerBlock, registersPerThread, maxThreads);
}

namespace {
/// Device `ordinal`'s primary context, current while the second member
/// lives: modules load there whatever the calling thread has current.
llvm::Expected<std::pair<CUcontext, ScopedContext>>
enterPrimary(const CudaDriver &d, int ordinal) {
  auto primary = d.primaryContext(ordinal);
  if (!primary)
    return primary.takeError();
  auto scope = ScopedContext::enter(d, *primary);
  if (!scope)
    return scope.takeError();
  return std::pair<CUcontext, ScopedContext>(*primary, std::move(*scope));
}
} // namespace

llvm::Expected<LoadedModule> LoadedModule::fromCubin(const KernelInfo &info,
                                                     llvm::StringRef cubin,
                                                     int deviceOrdinal) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  const CudaDriver &d = *drv;
  auto primary = enterPrimary(d, deviceOrdinal);
  if (!primary)
    return primary.takeError();
  if (cubin.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "kernel %s: empty module image",
                                   info.name.c_str());

  LoadedModule m(d, info);
  m.DeviceOrdinal = deviceOrdinal;
  m.Context = primary->first;
  m.Cubin = cubin.str();
  // Module images are read as a C string when they are PTX; the copy in
  // m.Cubin carries std::string's terminating NUL.
  if (llvm::Error err =
          FLASHJIT_CU(d, cuModuleLoadData, &m.Module, m.Cubin.c_str()))
    return std::move(err);
  if (llvm::Error err = m.bindFunction())
    return std::move(err);
  return std::move(m);
}

llvm::Expected<CUfunction> LoadedModule::companion(llvm::StringRef name) const {
  CUfunction fn = nullptr;
  std::string text = name.str();
  if (llvm::Error err =
          FLASHJIT_CU(*Driver, cuModuleGetFunction, &fn, Module, text.c_str()))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the module of %s lacks %s: %s",
                                   Info.name.c_str(), text.c_str(),
                                   llvm::toString(std::move(err)).c_str());
  return fn;
}

llvm::Error LoadedModule::bindFunction() {
  const CudaDriver &d = *Driver;
  const KernelInfo &info = Info;
  if (llvm::Error err = FLASHJIT_CU(d, cuModuleGetFunction, &Function,
                                    Module, info.name.c_str()))
    return llvm::joinErrors(
        llvm::createStringError(llvm::inconvertibleErrorCode(),
                                "kernel %s is not in its module",
                                info.name.c_str()),
        std::move(err));

  CUdevice device;
  if (llvm::Error err = FLASHJIT_CU(d, cuCtxGetDevice, &device))
    return err;
  // Above 48 KiB the kernel must opt in, up to the device's limit.
  if (info.sharedMemoryBytes > kSharedMemoryWithoutOptin) {
    int optin = 0;
    if (llvm::Error err = FLASHJIT_CU(
            d, cuDeviceGetAttribute, &optin,
            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device))
      return err;
    if (llvm::Error err = checkSharedMemory(info, optin))
      return err;
    if (llvm::Error err =
            FLASHJIT_CU(d, cuFuncSetAttribute, Function,
                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        static_cast<int>(info.sharedMemoryBytes)))
      return err;
  }

  // Register pressure can cap the block size below what the config asks.
  int maxThreads = 0, registers = 0;
  if (llvm::Error err =
          FLASHJIT_CU(d, cuFuncGetAttribute, &maxThreads,
                      CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, Function))
    return err;
  if (llvm::Error err = FLASHJIT_CU(d, cuFuncGetAttribute, &registers,
                                    CU_FUNC_ATTRIBUTE_NUM_REGS, Function))
    return err;
  if (llvm::Error err = checkThreadsPerBlock(info, maxThreads, registers))
    return err;

  int multiprocessors = 0, blocksPerSM = 0;
  if (llvm::Error err = FLASHJIT_CU(
          d, cuDeviceGetAttribute, &multiprocessors,
          CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device))
    return err;
  if (llvm::Error err = FLASHJIT_CU(
          d, cuOccupancyMaxActiveBlocksPerMultiprocessor, &blocksPerSM,
          Function, static_cast<int>(info.threadsPerBlock),
          static_cast<size_t>(info.sharedMemoryBytes)))
    return err;
  Multiprocessors = static_cast<unsigned>(std::max(1, multiprocessors));
  ResidentBlocks =
      Multiprocessors * static_cast<unsigned>(std::max(1, blocksPerSM));
  // A kernel built for clusters runs whole clusters, and a GPC holds fewer
  // of them than its SMs over the cluster size when its SMs do not divide
  // evenly: ask the driver how many fit at once.
  const unsigned cluster = clusterSizeOf(info.config);
  if (cluster > 1) {
    CUlaunchConfig launch{};
    launch.gridDimX =
        std::max(cluster, ResidentBlocks - ResidentBlocks % cluster);
    launch.gridDimY = launch.gridDimZ = 1;
    launch.blockDimX = info.threadsPerBlock;
    launch.blockDimY = launch.blockDimZ = 1;
    launch.sharedMemBytes = info.sharedMemoryBytes;
    int clusters = 0;
    if (llvm::Error err = FLASHJIT_CU(d, cuOccupancyMaxActiveClusters,
                                      &clusters, Function, &launch))
      return err;
    if (clusters < 1)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "kernel %s: no cluster of %u blocks fits this GPU at once (%u "
          "threads and %u bytes of shared memory per block)",
          info.name.c_str(), cluster, info.threadsPerBlock,
          info.sharedMemoryBytes);
    ResidentBlocks = static_cast<unsigned>(clusters) * cluster;
  }
  return llvm::Error::success();
}

llvm::Expected<LoadedModule> LoadedModule::fromPtx(const KernelInfo &info,
                                                   llvm::StringRef ptx,
                                                   int deviceOrdinal) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  const CudaDriver &d = *drv;
  auto primary = enterPrimary(d, deviceOrdinal);
  if (!primary)
    return primary.takeError();

  // The driver writes its log into this buffer and its size back into the
  // option value.
  std::vector<char> errorLog(16384, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {
      errorLog.data(),
      reinterpret_cast<void *>(static_cast<uintptr_t>(errorLog.size() - 1))};
  LoadedModule m(d, info);
  m.DeviceOrdinal = deviceOrdinal;
  m.Context = primary->first;
  // cuModuleLoadDataEx reads PTX as a C string: pass a NUL-terminated copy.
  std::string text = ptx.str();
  if (llvm::Error err = FLASHJIT_CU(d, cuModuleLoadDataEx, &m.Module,
                                    text.c_str(), 2, options, values)) {
    std::string log(errorLog.data());
    if (log.empty())
      return std::move(err);
    return llvm::joinErrors(
        std::move(err),
        llvm::createStringError(llvm::inconvertibleErrorCode(),
                                "PTX JIT log for %s:\n%s", info.name.c_str(),
                                log.c_str()));
  }
  if (llvm::Error err = m.bindFunction())
    return std::move(err);
  return std::move(m);
}

llvm::Expected<LoadedModule> LoadedModule::load(const KernelInfo &info,
                                                llvm::StringRef ptx,
                                                llvm::StringRef cubin,
                                                int deviceOrdinal) {
  if (cubin.empty())
    return fromPtx(info, ptx, deviceOrdinal);
  auto m = fromCubin(info, cubin, deviceOrdinal);
  if (m || ptx.empty())
    return m;
  // A cubin for another GPU or driver: the PTX still works here.
  auto linked = fromPtx(info, ptx, deviceOrdinal);
  if (linked) {
    llvm::consumeError(m.takeError());
    return linked;
  }
  return llvm::joinErrors(m.takeError(), linked.takeError());
}

LoadedModule::LoadedModule(LoadedModule &&other) noexcept
    : Driver(other.Driver), Info(std::move(other.Info)), Module(other.Module),
      Function(other.Function), Cubin(std::move(other.Cubin)),
      DeviceOrdinal(other.DeviceOrdinal), Context(other.Context),
      ResidentBlocks(other.ResidentBlocks),
      Multiprocessors(other.Multiprocessors) {
  other.Module = nullptr;
  other.Function = nullptr;
}

LoadedModule &LoadedModule::operator=(LoadedModule &&other) noexcept {
  if (this != &other) {
    unload();
    Driver = other.Driver;
    Info = std::move(other.Info);
    Module = other.Module;
    Function = other.Function;
    Cubin = std::move(other.Cubin);
    DeviceOrdinal = other.DeviceOrdinal;
    Context = other.Context;
    ResidentBlocks = other.ResidentBlocks;
    Multiprocessors = other.Multiprocessors;
    other.Module = nullptr;
    other.Function = nullptr;
  }
  return *this;
}

LoadedModule::~LoadedModule() { unload(); }

void LoadedModule::unload() {
  if (Module) {
    // In the module's context, whatever the destroying thread has current;
    // nothing useful to do with a failure while tearing down.
    auto scope = ScopedContext::enter(*Driver, Context);
    if (!scope)
      llvm::consumeError(scope.takeError());
    else
      llvm::consumeError(FLASHJIT_CU(*Driver, cuModuleUnload, Module));
  }
  Module = nullptr;
  Function = nullptr;
}

} // namespace flashjit
