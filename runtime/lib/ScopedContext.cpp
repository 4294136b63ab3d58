//===- ScopedContext.cpp - a device's primary context, current for a scope ===//
// Why: see ScopedContext.h.
#include "flashjit/Runtime/ScopedContext.h"

namespace flashjit {

llvm::Expected<ScopedContext> ScopedContext::enter(const CudaDriver &driver,
                                                   CUcontext context) {
  CUcontext current = nullptr;
  if (llvm::Error err = FLASHJIT_CU(driver, cuCtxGetCurrent, &current))
    return std::move(err);
  if (current == context)
    return ScopedContext(driver, false);
  if (!current) {
    if (llvm::Error err = FLASHJIT_CU(driver, cuCtxSetCurrent, context))
      return std::move(err);
    return ScopedContext(driver, false);
  }
  if (llvm::Error err = FLASHJIT_CU(driver, cuCtxPushCurrent, context))
    return std::move(err);
  return ScopedContext(driver, true);
}

llvm::Expected<ScopedContext> ScopedContext::enterDevice(const CudaDriver &driver,
                                                         int ordinal) {
  auto primary = driver.primaryContext(ordinal);
  if (!primary)
    return primary.takeError();
  return enter(driver, *primary);
}

ScopedContext::~ScopedContext() {
  if (!Pushed)
    return;
  CUcontext popped = nullptr;
  // Nothing useful to do with a failure here: the driver keeps its own
  // stack, and the caller's context is below ours on it.
  (void)Driver->cuCtxPopCurrent(&popped);
}

} // namespace flashjit
