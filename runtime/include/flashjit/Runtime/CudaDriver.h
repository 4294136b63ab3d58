//===- CudaDriver.h - the CUDA Driver API, opened at run time -----*- C++
//-*-===//
// Why: flashjit must build, compile PTX and run its CPU tests where no GPU
// driver exists, so libcuda is never linked: it is dlopen'ed on first use
// and every entry point is resolved by the versioned symbol name that
// cuda.h maps it to (cuMemAlloc -> cuMemAlloc_v2). Every call goes through
// one check that turns a CUresult into an llvm::Error naming the call and
// the driver's own description of the failure.
#ifndef FLASHJIT_RUNTIME_CUDADRIVER_H
#define FLASHJIT_RUNTIME_CUDADRIVER_H

#include "llvm/Support/Error.h"
#include <cuda.h>
#include <memory>
#include <string>

namespace flashjit {

/// The driver entry points flashjit uses, each under the name cuda.h gives
/// it. X(name) is expanded once per entry; the argument is macro-expanded
/// first, so X sees the versioned spelling (cuMemAlloc_v2).
#define FLASHJIT_CUDA_DRIVER_FUNCTIONS(X)                                      \
  X(cuInit)                                                                    \
  X(cuDriverGetVersion)                                                        \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuDeviceGetCount)                                                          \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetName)                                                           \
  X(cuDeviceGetAttribute)                                                      \
  X(cuDeviceTotalMem)                                                          \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuCtxSetCurrent)                                                           \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxPushCurrent)                                                          \
  X(cuCtxPopCurrent)                                                           \
  X(cuCtxGetDevice)                                                            \
  X(cuCtxSynchronize)                                                          \
  X(cuModuleLoadData)                                                          \
  X(cuModuleLoadDataEx)                                                        \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuFuncSetAttribute)                                                        \
  X(cuFuncGetAttribute)                                                        \
  X(cuLaunchKernel)                                                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                               \
  X(cuOccupancyMaxActiveClusters)                                             \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemcpyHtoD)                                                              \
  X(cuMemcpyDtoH)                                                              \
  X(cuMemsetD8)                                                                \
  X(cuMemsetD32)                                                               \
  X(cuMemsetD32Async)                                                          \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamGetId)                                                             \
  X(cuStreamIsCapturing)                                                       \
  X(cuThreadExchangeStreamCaptureMode)                                         \
  X(cuEventCreate)                                                             \
  X(cuEventRecord)                                                             \
  X(cuEventSynchronize)                                                        \
  X(cuEventElapsedTime)                                                        \
  X(cuEventDestroy)                                                            \
  X(cuPointerGetAttribute)                                                     \
  X(cuTensorMapEncodeTiled)

/// The symbol libcuda exports for `fn` under this cuda.h: the argument is
/// macro-expanded before it is stringified (cuMemAlloc -> "cuMemAlloc_v2").
#define FLASHJIT_CUDA_SYMBOL(fn) FLASHJIT_CUDA_SYMBOL_TEXT(fn)
#define FLASHJIT_CUDA_SYMBOL_TEXT(fn) #fn

/// A failed driver call: the CUresult, the call and the driver's message.
/// Callers that must react to one code (say CUDA_ERROR_NO_BINARY_FOR_GPU)
/// can llvm::handleErrors on this type; everyone else just prints it.
class CudaError : public llvm::ErrorInfo<CudaError> {
public:
  static char ID;
  CudaError(CUresult result, std::string message)
      : Result(result), Message(std::move(message)) {}
  CUresult result() const { return Result; }
  void log(llvm::raw_ostream &os) const override { os << Message; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  CUresult Result;
  std::string Message;
};

/// The loaded driver: one function pointer per entry of the list above.
/// Members carry the versioned names, so `drv.cuMemAlloc(...)` compiles to
/// a call through `drv.cuMemAlloc_v2` exactly as cuda.h intends.
class CudaDriver {
public:
  /// The process-wide driver, loaded and cuInit'ed once (thread-safe). On
  /// a machine without libcuda.so.1 this is an error saying that flashjit
  /// can compile PTX but cannot load or launch kernels; it never crashes.
  /// The same error is returned on every later call.
  static llvm::Expected<const CudaDriver &> get();

  /// Opens `library`, resolves every entry and calls cuInit(0). get() uses
  /// this with "libcuda.so.1"; tests use it to exercise the failure paths.
  static llvm::Expected<std::unique_ptr<CudaDriver>>
  load(llvm::StringRef library);

  /// Success for CUDA_SUCCESS, else a CudaError reading
  /// "<call>: <CUDA_ERROR_NAME> (<driver's description>)".
  llvm::Error check(CUresult result, llvm::StringRef call) const;

  /// The primary context of device `ordinal`, retained on first use and
  /// kept for the life of the process (so the modules and memory flashjit
  /// hands out stay valid). Every module, allocation and launch of a
  /// flashjit Context bound to that device lives in it (ScopedContext.h).
  llvm::Expected<CUcontext> primaryContext(int ordinal) const;

  /// Makes sure the calling thread has a current context. If it has none,
  /// device `ordinal`'s primary context is made current. A context the
  /// caller made current, primary or not, of any device, is left alone.
  /// Returns the current context. For the harness and benchmarks, which
  /// work in whatever context the caller set up; kernels of a Context use
  /// ScopedContext instead.
  llvm::Expected<CUcontext> ensureContext(int ordinal = 0) const;
  /// The number of visible devices, or an error when `ordinal` is not one
  /// of them.
  llvm::Expected<int> deviceCount(int ordinal) const;

  ~CudaDriver();
  CudaDriver(const CudaDriver &) = delete;
  CudaDriver &operator=(const CudaDriver &) = delete;

#define FLASHJIT_CUDA_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  FLASHJIT_CUDA_DRIVER_FUNCTIONS(FLASHJIT_CUDA_DRIVER_MEMBER)
#undef FLASHJIT_CUDA_DRIVER_MEMBER

private:
  CudaDriver() = default;
  void *Handle = nullptr;
};

/// The message CudaDriver::load gives when `library` cannot be opened.
std::string missingDriverMessage(llvm::StringRef library);

/// Calls `drv.fn(args...)` and checks it: an llvm::Error naming `fn` as
/// written (cuMemAlloc, not cuMemAlloc_v2). Use as
///   if (llvm::Error e = FLASHJIT_CU(drv, cuMemAlloc, &ptr, bytes)) return e;
#define FLASHJIT_CU(drv, fn, ...) (drv).check((drv).fn(__VA_ARGS__), #fn)

} // namespace flashjit

#endif
