//===- ModuleLoader.h - PTX and cubins into launchable functions --*- C++
//-*-===//
// Why: flashjit emits PTX without the CUDA toolkit; the driver's own JIT
// linker turns it into a cubin for the GPU at hand. This header owns that
// step, the loading of the result, the shared-memory opt-in a large tile
// needs, and the module's lifetime.
#ifndef FLASHJIT_RUNTIME_MODULELOADER_H
#define FLASHJIT_RUNTIME_MODULELOADER_H

#include "flashjit/Templates/KernelABI.h"

#include "llvm/Support/Error.h"
#include <cuda.h>
#include <string>

namespace flashjit {

class CudaDriver;

/// Dynamic shared memory a kernel gets without opting in (48 KiB).
constexpr unsigned kSharedMemoryWithoutOptin = 48 * 1024;

/// Error unless `info.sharedMemoryBytes` fits `optinLimit`, the device's
/// per-block opt-in maximum; the message names the kernel and both numbers.
llvm::Error checkSharedMemory(const KernelInfo &info, int optinLimit);

/// Error unless a kernel that uses `registersPerThread` registers can run
/// `info.threadsPerBlock` threads per block (`maxThreads`, as the driver
/// reports for the loaded function).
llvm::Error checkThreadsPerBlock(const KernelInfo &info, int maxThreads,
                                 int registersPerThread);

/// JIT-links PTX into a cubin for the current context's device with
/// cuLinkCreate / cuLinkAddData / cuLinkComplete. A rejected PTX comes back
/// as an error that includes the linker's log. Makes a context current
/// (see CudaDriver::ensureContext) if none is.
llvm::Expected<std::string>
linkPtxToCubin(llvm::StringRef ptx, llvm::StringRef inputName = "kernel.ptx");

/// One loaded CUmodule and the kernel function in it; unloaded on
/// destruction. Move-only.
class LoadedModule {
public:
  /// Loads a cubin (or any image cuModuleLoadData accepts), finds
  /// `info.name` and opts in to `info.sharedMemoryBytes` when above 48 KiB.
  /// If no context is current, device `deviceOrdinal`'s primary context is
  /// made current first.
  static llvm::Expected<LoadedModule> fromCubin(const KernelInfo &info,
                                                llvm::StringRef cubin,
                                                int deviceOrdinal = 0);
  /// Links `ptx` to a cubin with linkPtxToCubin and loads that; cubin()
  /// then holds the result so the cache can keep it (KernelCache::storeCubin).
  static llvm::Expected<LoadedModule>
  fromPtx(const KernelInfo &info, llvm::StringRef ptx, int deviceOrdinal = 0);
  /// The cubin when there is one and this device accepts it, else the PTX.
  static llvm::Expected<LoadedModule> load(const KernelInfo &info,
                                           llvm::StringRef ptx,
                                           llvm::StringRef cubin,
                                           int deviceOrdinal = 0);

  LoadedModule(LoadedModule &&other) noexcept;
  LoadedModule &operator=(LoadedModule &&other) noexcept;
  LoadedModule(const LoadedModule &) = delete;
  LoadedModule &operator=(const LoadedModule &) = delete;
  ~LoadedModule();

  CUmodule module() const { return Module; }
  CUfunction function() const { return Function; }
  const KernelInfo &info() const { return Info; }
  /// The cubin the module was loaded from.
  const std::string &cubin() const { return Cubin; }
  /// True when load() or fromPtx() had to JIT-link the PTX.
  bool linkedFromPtx() const { return LinkedFromPtx; }
  /// The device whose primary context is made current to launch when the
  /// calling thread has none (the ordinal it was loaded for).
  int deviceOrdinal() const { return DeviceOrdinal; }

private:
  LoadedModule(const CudaDriver &driver, KernelInfo info)
      : Driver(&driver), Info(std::move(info)) {}
  void unload();

  const CudaDriver *Driver;
  KernelInfo Info;
  CUmodule Module = nullptr;
  CUfunction Function = nullptr;
  std::string Cubin;
  bool LinkedFromPtx = false;
  int DeviceOrdinal = 0;
};

} // namespace flashjit

#endif
