//===- ScopedContext.h - a device's primary context, current for a scope -*- C++ -*-===//
// Why: a CUDA context is current per thread, and a server with one thread
// per GPU, or a framework that switches devices, calls flashjit with any
// context current. Modules, allocations and launches of a flashjit Context
// bound to device N belong to device N's primary context, so each of them
// runs with that context current and leaves the caller's as it was. The
// common case (the right context is already current) costs one
// cuCtxGetCurrent, a read of the driver's thread-local state.
#ifndef FLASHJIT_RUNTIME_SCOPEDCONTEXT_H
#define FLASHJIT_RUNTIME_SCOPEDCONTEXT_H

#include "flashjit/Runtime/CudaDriver.h"

namespace flashjit {

/// Makes `context` current for the life of the object:
///  - already current: nothing to do, nothing to undo;
///  - no context current on the thread: `context` is made current and
///    stays so afterwards (as the CUDA runtime does on first use);
///  - another context current: `context` is pushed, and popped when the
///    object dies, so the caller's context is current again.
class ScopedContext {
public:
  static llvm::Expected<ScopedContext> enter(const CudaDriver &driver,
                                             CUcontext context);
  /// enter() with the primary context of device `ordinal`.
  static llvm::Expected<ScopedContext> enterDevice(const CudaDriver &driver,
                                                   int ordinal);
  ScopedContext(ScopedContext &&other) noexcept
      : Driver(other.Driver), Pushed(other.Pushed) {
    other.Pushed = false;
  }
  ScopedContext(const ScopedContext &) = delete;
  ScopedContext &operator=(const ScopedContext &) = delete;
  ScopedContext &operator=(ScopedContext &&) = delete;
  ~ScopedContext();
  /// Whether the context was pushed over another one (popped at the end).
  bool pushed() const { return Pushed; }

private:
  ScopedContext(const CudaDriver &driver, bool pushed)
      : Driver(&driver), Pushed(pushed) {}
  const CudaDriver *Driver;
  bool Pushed;
};

} // namespace flashjit

#endif
