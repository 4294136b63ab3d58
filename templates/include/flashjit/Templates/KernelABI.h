//===- KernelABI.h - how a generated forward kernel is called ----*- C++ -*-===//
// Why: the compiler emits kernels with this parameter list and launch shape,
// and the runtime calls them with it; both include this one header so the
// two sides cannot drift apart.
#ifndef FLASHJIT_TEMPLATES_KERNELABI_H
#define FLASHJIT_TEMPLATES_KERNELABI_H

#include "flashjit/Templates/TileConfig.h"
#include <array>
#include <cstdint>
#include <string>

namespace flashjit {

/// The forward kernel's parameters, in order. Tensors are
/// [batch, heads, seqlen, head_dim] with unit stride along head_dim; strides
/// are in elements, (batch, head, row). LSE is f32 [batch, heads, seqlen].
struct ForwardKernelArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void *o = nullptr;
  float *lse = nullptr;
  std::array<int64_t, 3> qStrides{}, kStrides{}, vStrides{}, oStrides{},
      lseStrides{};
  int32_t seqlenQ = 0, seqlenK = 0;
  /// softmax scale * log2(e): the kernel works in base 2.
  float scaleLog2 = 0;
  /// Sequences in the batch: a persistent kernel (below) walks the tiles of
  /// every (batch, head) itself.
  int32_t batch = 0;
  /// Two u32, zero at launch and left zero by the kernel: the tile counter
  /// of a persistent kernel (its blocks take tiles from it) and the count
  /// of its finished blocks (the last one resets both). Kernels that are
  /// not persistent ignore it.
  uint32_t *tileCounter = nullptr;

  /// Number of kernel parameters.
  static constexpr unsigned kNumParams = 5 + 15 + 2 + 1 + 1 + 1;
  /// Pointers to each parameter, as cuLaunchKernel wants them. The array
  /// points into *this: keep *this alive until the launch returns.
  std::array<void *, kNumParams> paramPointers();
};

/// Kernels of families that load tiles with the Tensor Memory Accelerator
/// (KernelTemplate::tensorMapBoxes returns a value) take kNumTensorMaps more
/// parameters after the ones of ForwardKernelArgs: the CUtensorMap of Q, K,
/// V and O, in that order, each 128 bytes, 64-byte aligned and passed by value
/// (a grid constant). Each describes its tensor as 4-D, innermost first:
/// (head_dim, seqlen, heads, batch), with the tensor's strides in bytes (row,
/// head, batch), a box of (cols, rows, 1, 1) elements, 128-byte swizzle, no
/// interleave, L2 promotion of 128 bytes, and elements out of bounds read as
/// zero (a store drops them). The kernel asks for box (c, row, head, batch)
/// coordinates; it loads Q, K and V and stores O through its map.
struct TensorMapBoxes {
  /// Box rows of the Q map (block_m), of the K and V maps (block_n) and of
  /// the O map (the rows one store writes).
  unsigned qRows = 0, kvRows = 0, oRows = 0;
  /// Box columns: 64 two-byte elements, the 128 bytes of one swizzle row.
  unsigned cols = 64;
};
constexpr unsigned kNumTensorMaps = 4;
constexpr unsigned kTensorMapBytes = 128;

/// What the runtime must know of a compiled kernel to launch it.
struct KernelInfo {
  std::string name;              ///< entry symbol in the PTX
  TileConfig config;             ///< tile sizes it was built with
  unsigned threadsPerBlock = 0;  ///< blockDim.x
  unsigned sharedMemoryBytes = 0; ///< dynamic shared memory per block
  int64_t numHeads = 0;          ///< query heads (grid.y)
};

struct LaunchGeometry {
  unsigned gridX = 1, gridY = 1, gridZ = 1;
  unsigned blockX = 1;
  unsigned sharedMemoryBytes = 0;
};

/// grid = (ceil(seqlenQ / blockM), heads, batch), block = threads: one
/// block per tile of block_m query rows of one (batch, head). A persistent
/// kernel (`residentBlocks` > 0, the blocks the GPU holds at once) gets
/// grid = (min(tiles, residentBlocks), 1, 1) instead, and its blocks take
/// tiles from the launch's tile counter in the kernel's own order.
LaunchGeometry forwardGeometry(const KernelInfo &info, int64_t batch,
                               int64_t seqlenQ, unsigned residentBlocks = 0);

} // namespace flashjit

#endif
