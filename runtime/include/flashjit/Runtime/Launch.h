//===- Launch.h - one kernel launch on the caller's stream --------*- C++
//-*-===//
// Why: a launch with an impossible grid fails inside the driver with a bare
// CUDA_ERROR_INVALID_VALUE; checking the geometry first gives the user a
// message that says which number is wrong. The parameter array of a forward
// launch, tensor maps included, is built here and nowhere else.
#ifndef FLASHJIT_RUNTIME_LAUNCH_H
#define FLASHJIT_RUNTIME_LAUNCH_H

#include "flashjit/Runtime/TensorMaps.h"
#include "flashjit/Templates/KernelABI.h"

#include "llvm/Support/Error.h"
#include <array>
#include <cuda.h>

namespace flashjit {

/// What cuLaunchKernel gets for one forward launch: the kernel's parameters
/// and, for a kernel that loads with TMA, the tensor maps of Q, K and V.
struct ForwardLaunchParams {
  ForwardKernelArgs args;
  ForwardTensorMaps maps;
  bool hasTensorMaps = false;
  /// The captured tensors (KernelABI.h): a pointer and `rank` strides each.
  struct Capture {
    const void *data = nullptr;
    int rank = 0;
    std::array<int64_t, 4> strides{};
  };
  std::array<Capture, kMaxCaptures> captures{};
  unsigned numCaptures = 0;
  /// A block-sparse kernel's block mask, in the captures' layout (counts
  /// rank 3, indices rank 4; broadcast dimensions get stride 0).
  std::array<Capture, 4> blockMask{};
  bool hasBlockMask = false;

  static constexpr unsigned kMaxParams = ForwardKernelArgs::kNumParams +
                                         kNumTensorMaps + kMaxCaptures * 5 +
                                         4 * 5;
  /// Pointers to args' parameters, then to the maps (none without them),
  /// then to the captures and the block mask; null after the last.
  /// The array points into *this: keep *this alive until the launch returns.
  std::array<void *, kMaxParams> pointers();
};

/// Fills `params` for `args` (checked by checkForwardArgs) with softmax
/// `scale`; when `layouts` is given, encodes the tensor maps with them,
/// which needs the driver and a current context (device `deviceOrdinal`'s
/// primary one if the thread has none, as launch() does).
llvm::Error prepareForwardLaunch(const ForwardArgs &args, double scale,
                                 const ForwardTensorMapLayouts *layouts,
                                 ForwardLaunchParams &params,
                                 int deviceOrdinal = 0);

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
