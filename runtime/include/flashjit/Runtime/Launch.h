//===- Launch.h - one kernel launch on the caller's stream --------*- C++
//-*-===//
// Why: a launch with an impossible grid fails inside the driver with a bare
// CUDA_ERROR_INVALID_VALUE; checking the geometry first gives the user a
// message that says which number is wrong. The parameter array of a forward
// launch, tensor maps included, is built here and nowhere else.
#ifndef FLASHJIT_RUNTIME_LAUNCH_H
#define FLASHJIT_RUNTIME_LAUNCH_H

#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/TensorMaps.h"
#include "flashjit/Templates/KernelABI.h"

#include "llvm/Support/Error.h"
#include <array>
#include <cuda.h>

namespace flashjit {

class CudaDriver;

/// The parameters a kernel takes after its own (KernelABI.h): the
/// captured tensors of the spec's mods, then a block-sparse spec's block
/// mask, a pointer and `rank` strides each.
struct VariantLaunchParams {
  struct Capture {
    const void *data = nullptr;
    int rank = 0;
    std::array<int64_t, 4> strides{};
  };
  std::array<Capture, kMaxCaptures> captures{};
  unsigned numCaptures = 0;
  /// Counts rank 3, indices rank 4; broadcast dimensions (size 1) get
  /// stride 0, absent full lists a null pointer.
  std::array<Capture, 4> blockMask{};
  bool hasBlockMask = false;
  /// A kernel that takes a tile order (TileOrderKernel.h), after the block
  /// mask: the order (null: the natural order) and its batch and head
  /// strides.
  const void *tileOrder = nullptr;
  std::array<int64_t, 2> tileOrderStrides{};
  bool hasTileOrder = false;
  /// A varlen kernel's cumulative offsets of Q and K (the last parameters).
  std::array<const void *, 2> cuSeqlens{};
  bool varlen = false;
  /// A paged kernel's block table and its row length (after the offsets;
  /// cuSeqlens[1] then holds the key counts).
  const void *blockTable = nullptr;
  int64_t maxPages = 0;
  bool paged = false;

  static constexpr unsigned kMaxParams =
      kMaxCaptures * 5 + 4 * 5 + 3 + 2 + 2;
  /// Copies `captures` (at most kMaxCaptures, as checked before) and, when
  /// its kv_num_blocks is given, `mask`.
  void fill(llvm::ArrayRef<CapturedRef> captures, const BlockMaskRef &mask);
  /// Stores pointers to each parameter at p[at], p[at + 1], ...; returns
  /// the index after the last.
  unsigned appendPointers(void **p, unsigned at);
};

/// What cuLaunchKernel gets for one forward launch: the kernel's parameters
/// and, for a kernel that loads with TMA, the tensor maps of Q, K and V.
struct ForwardLaunchParams {
  ForwardKernelArgs args;
  ForwardTensorMaps maps;
  bool hasTensorMaps = false;
  VariantLaunchParams variant;

  static constexpr unsigned kMaxParams = ForwardKernelArgs::kNumParams +
                                         kNumTensorMaps +
                                         VariantLaunchParams::kMaxParams;
  /// Pointers to args' parameters, then to the maps (none without them),
  /// then to the captures and the block mask; null after the last.
  /// The array points into *this: keep *this alive until the launch returns.
  std::array<void *, kMaxParams> pointers();
};

/// What cuLaunchKernel gets for one launch of a block-mask kernel
/// (BlockMaskKernel.h): the seqlens, the captures and the lists it writes.
struct BlockMaskLaunchParams {
  int32_t seqlenQ = 0, seqlenK = 0;
  VariantLaunchParams variant;

  static constexpr unsigned kMaxParams = 2 + VariantLaunchParams::kMaxParams;
  /// As ForwardLaunchParams::pointers.
  std::array<void *, kMaxParams> pointers();
};

/// What cuLaunchKernel gets for one launch of a tile-order kernel
/// (TileOrderKernel.h): the seqlens, the block mask's lists and the order.
struct TileOrderLaunchParams {
  int32_t seqlenQ = 0, seqlenK = 0;
  /// Its block mask only.
  VariantLaunchParams lists;
  void *order = nullptr;

  static constexpr unsigned kMaxParams = 2 + (1 + 3) * 2 + (1 + 4) * 2 + 1;
  /// As ForwardLaunchParams::pointers.
  std::array<void *, kMaxParams> pointers();
};

/// Fills `params` for `args` (checked by checkForwardArgs) with softmax
/// `scale`; when `layouts` is given, encodes the tensor maps with them,
/// which needs the driver (with device `deviceOrdinal`'s primary context
/// current meanwhile, as launch() does).
llvm::Error prepareForwardLaunch(const ForwardArgs &args, double scale,
                                 const ForwardTensorMapLayouts *layouts,
                                 ForwardLaunchParams &params,
                                 int deviceOrdinal = 0);

/// Error unless every grid and block dimension is positive and within the
/// CUDA limits (grid y, z <= 65535, block <= 1024 threads).
llvm::Error validateGeometry(const LaunchGeometry &geometry);

/// Launches `function` with `params` (cuLaunchKernel's array of pointers
/// to each argument) on `stream` (null: the legacy default stream of the
/// device's primary context). Device `deviceOrdinal`'s primary context (the
/// one its module was loaded in) is current during the launch, whatever
/// context the calling thread has (ScopedContext.h); `stream` must belong
/// to it. Asynchronous: errors of the kernel itself surface at the next
/// synchronization.
llvm::Error launch(CUfunction function, const LaunchGeometry &geometry,
                   void **params, CUstream stream, int deviceOrdinal = 0);

/// launch() for a caller that has made the function's context current.
llvm::Error launchInCurrentContext(const CudaDriver &driver,
                                   CUfunction function,
                                   const LaunchGeometry &geometry,
                                   void **params, CUstream stream);

} // namespace flashjit

#endif
