//===- ModuleLoader.h - PTX and cubins into launchable functions --*- C++
//-*-===//
// Why: flashjit emits PTX without the CUDA toolkit; the driver's JIT
// compiles it for the GPU at hand. This header owns that step, the loading
// of the result, the shared-memory opt-in a large tile needs, and the
// module's lifetime.
//
// The PTX is compiled as a whole program (cuModuleLoadDataEx), not through
// the driver's linker (cuLinkAddData): the linker compiles PTX as
// relocatable code, and ptxas then ignores setmaxnreg ("to maintain
// compatibility across compilation units") and waits for every wgmma before
// the next (extern calls), which cost the Hopper kernels a fifth to a half
// of their speed. The driver API gives no cubin of a whole-program
// compile, so the disk cache keeps the PTX and the driver's own JIT cache
// the machine code.
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

/// One loaded CUmodule and the kernel function in it; unloaded on
/// destruction. Move-only.
class LoadedModule {
public:
  /// Loads a cubin (or any image cuModuleLoadData accepts), finds
  /// `info.name` and opts in to `info.sharedMemoryBytes` when above 48 KiB.
  /// The module lives in device `deviceOrdinal`'s primary context, whatever
  /// context the calling thread has current (ScopedContext.h).
  static llvm::Expected<LoadedModule> fromCubin(const KernelInfo &info,
                                                llvm::StringRef cubin,
                                                int deviceOrdinal = 0);
  /// JIT-compiles `ptx` as a whole program and loads it; a rejected PTX
  /// comes back as an error that includes the JIT's log. cubin() stays
  /// empty (see the file comment).
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
  /// Another kernel of the module (a backward's preprocess, a decode's
  /// combine, a block-sparse forward's tile order); an error names the
  /// missing kernel.
  llvm::Expected<CUfunction> companion(llvm::StringRef name) const;
  const KernelInfo &info() const { return Info; }
  /// The cubin the module was loaded from (empty when it was PTX).
  const std::string &cubin() const { return Cubin; }
  /// The device it was loaded for; its primary context is context().
  int deviceOrdinal() const { return DeviceOrdinal; }
  /// The context the module lives in: its launches run with it current.
  CUcontext context() const { return Context; }
  /// Blocks of this kernel the device holds at once (its SMs times the
  /// blocks per SM the occupancy allows), the grid of a persistent kernel.
  unsigned residentBlocks() const { return ResidentBlocks; }
  /// The device's SMs.
  unsigned multiprocessors() const { return Multiprocessors; }

private:
  LoadedModule(const CudaDriver &driver, KernelInfo info)
      : Driver(&driver), Info(std::move(info)) {}
  void unload();
  /// Finds the kernel in Module, opts in to its shared memory, checks
  /// that its block fits the registers it got and counts the blocks the
  /// device holds at once.
  llvm::Error bindFunction();

  const CudaDriver *Driver;
  KernelInfo Info;
  CUmodule Module = nullptr;
  CUfunction Function = nullptr;
  std::string Cubin;
  int DeviceOrdinal = 0;
  CUcontext Context = nullptr;
  unsigned ResidentBlocks = 1;
  unsigned Multiprocessors = 1;
};

} // namespace flashjit

#endif
