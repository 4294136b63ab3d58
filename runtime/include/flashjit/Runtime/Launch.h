//===- Launch.h - one kernel launch on the caller's stream --------*- C++
//-*-===//
// Why: a launch with an impossible grid fails inside the driver with a bare
// CUDA_ERROR_INVALID_VALUE; checking the geometry first gives the user a
// message that says which number is wrong.
#ifndef FLASHJIT_RUNTIME_LAUNCH_H
#define FLASHJIT_RUNTIME_LAUNCH_H

#include "flashjit/Templates/KernelABI.h"

#include "llvm/Support/Error.h"
#include <cuda.h>

namespace flashjit {

/// Error unless every grid and block dimension is positive and within the
/// CUDA limits (grid y, z <= 65535, block <= 1024 threads).
llvm::Error validateGeometry(const LaunchGeometry &geometry);

/// Launches `function` with `params` (cuLaunchKernel's array of pointers
/// to each argument) on `stream` (null: the legacy default stream). If the
/// calling thread has no current context, device `deviceOrdinal`'s primary
/// context (the one the module was loaded for) is made current first
/// (CudaDriver::ensureContext). Asynchronous: errors of the kernel itself
/// surface at the next synchronization.
llvm::Error launch(CUfunction function, const LaunchGeometry &geometry,
                   void **params, CUstream stream, int deviceOrdinal = 0);

} // namespace flashjit

#endif
