//===- CudaDriver.cpp - the CUDA Driver API, opened at run time -----------===//
// Why: see CudaDriver.h. Symbols are looked up by the spelling cuda.h
// gives them after macro expansion, so a header that maps cuMemAlloc to
// cuMemAlloc_v2 makes us resolve cuMemAlloc_v2, the ABI the header
// declares, never the legacy entry point of the same short name.
#include "flashjit/Runtime/CudaDriver.h"

#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <atomic>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <vector>

namespace flashjit {

char CudaError::ID = 0;

std::string missingDriverMessage(llvm::StringRef library) {
  return llvm::formatv("no CUDA driver ({0}) found: flashjit can compile PTX "
                       "here but cannot load or launch kernels",
                       library)
      .str();
}

llvm::Expected<std::unique_ptr<CudaDriver>>
CudaDriver::load(llvm::StringRef library) {
  std::string name = library.str();
  void *handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = ::dlerror();
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s (%s)",
                                   missingDriverMessage(library).c_str(),
                                   why ? why : "dlopen failed");
  }
  std::unique_ptr<CudaDriver> drv(new CudaDriver());
  drv->Handle = handle;

  std::vector<std::string> missing;
#define FLASHJIT_CUDA_DRIVER_RESOLVE(name)                                     \
  drv->name = reinterpret_cast<decltype(drv->name)>(                           \
      ::dlsym(handle, FLASHJIT_CUDA_SYMBOL(name)));                            \
  if (!drv->name)                                                              \
    missing.push_back(FLASHJIT_CUDA_SYMBOL(name));
  FLASHJIT_CUDA_DRIVER_FUNCTIONS(FLASHJIT_CUDA_DRIVER_RESOLVE)
#undef FLASHJIT_CUDA_DRIVER_RESOLVE

  if (!missing.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the CUDA driver %s lacks %s (and %zu more entry points) that the "
        "cuda.h flashjit was built with (CUDA %d.%d) declares: update the "
        "NVIDIA driver",
        name.c_str(), missing.front().c_str(), missing.size() - 1,
        CUDA_VERSION / 1000, (CUDA_VERSION % 1000) / 10);

  if (llvm::Error err = FLASHJIT_CU(*drv, cuInit, 0))
    return llvm::joinErrors(
        llvm::createStringError(llvm::inconvertibleErrorCode(),
                                "the CUDA driver %s was found but could not "
                                "start (is a GPU visible to this process?)",
                                name.c_str()),
        std::move(err));
  return std::move(drv);
}

llvm::Expected<const CudaDriver &> CudaDriver::get() {
  // The outcome of the first load, kept for the life of the process; a
  // failure is kept as text so every caller gets its own llvm::Error.
  static std::once_flag once;
  // Never destroyed: unloading libcuda at exit would race with its own
  // teardown.
  static CudaDriver *driver = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    auto loaded = load("libcuda.so.1");
    if (loaded)
      driver = loaded->release();
    else
      failure = llvm::toString(loaded.takeError());
  });
  if (!driver)
    return llvm::make_error<llvm::StringError>(failure,
                                               llvm::inconvertibleErrorCode());
  return *driver;
}

CudaDriver::~CudaDriver() {
  // Only instances from load() come here; get()'s lives until exit.
  if (Handle)
    ::dlclose(Handle);
}

llvm::Error CudaDriver::check(CUresult result, llvm::StringRef call) const {
  if (result == CUDA_SUCCESS)
    return llvm::Error::success();
  const char *name = nullptr;
  const char *text = nullptr;
  if (!cuGetErrorName || cuGetErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (!cuGetErrorString || cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  std::string message = name ? llvm::formatv("{0}: {1} ({2})", call, name,
                                             text ? text : "no description")
                                   .str()
                             : llvm::formatv("{0}: unknown CUDA error {1}",
                                             call, static_cast<int>(result))
                                   .str();
  return llvm::make_error<CudaError>(result, std::move(message));
}

llvm::Expected<int> CudaDriver::deviceCount(int ordinal) const {
  int count = 0;
  if (llvm::Error err = FLASHJIT_CU(*this, cuDeviceGetCount, &count))
    return std::move(err);
  if (ordinal < 0 || ordinal >= count)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "CUDA device %d does not exist: %d device(s) visible (check "
        "CUDA_VISIBLE_DEVICES)",
        ordinal, count);
  return count;
}

llvm::Expected<CUcontext> CudaDriver::primaryContext(int ordinal) const {
  // Lock-free for the first kMaxFast ordinals: launches look their context
  // up on every call.
  constexpr int kMaxFast = 64;
  static std::array<std::atomic<CUcontext>, kMaxFast> fast{};
  if (ordinal >= 0 && ordinal < kMaxFast)
    if (CUcontext ctx = fast[ordinal].load(std::memory_order_acquire))
      return ctx;

  static std::mutex mutex;
  static std::map<int, CUcontext> retained;
  std::lock_guard<std::mutex> guard(mutex);
  if (auto it = retained.find(ordinal); it != retained.end())
    return it->second;
  if (auto counted = deviceCount(ordinal); !counted)
    return counted.takeError();
  CUdevice device;
  if (llvm::Error err = FLASHJIT_CU(*this, cuDeviceGet, &device, ordinal))
    return std::move(err);
  CUcontext ctx = nullptr;
  if (llvm::Error err = FLASHJIT_CU(*this, cuDevicePrimaryCtxRetain, &ctx, device))
    return std::move(err);
  retained.emplace(ordinal, ctx);
  if (ordinal < kMaxFast)
    fast[ordinal].store(ctx, std::memory_order_release);
  return ctx;
}

llvm::Expected<CUcontext> CudaDriver::ensureContext(int ordinal) const {
  CUcontext current = nullptr;
  if (llvm::Error err = FLASHJIT_CU(*this, cuCtxGetCurrent, &current))
    return std::move(err);
  if (current)
    return current;
  auto primary = primaryContext(ordinal);
  if (!primary)
    return primary.takeError();
  if (llvm::Error err = FLASHJIT_CU(*this, cuCtxSetCurrent, *primary))
    return std::move(err);
  return *primary;
}

} // namespace flashjit
