//===- TensorMaps.h - the TMA tensor maps of a launch ----------*- C++ -*-===//
// Why: kernels that load tiles with the Tensor Memory Accelerator take a
// CUtensorMap of Q, K and V (KernelABI.h), encoded from the caller's tensors
// on every launch. The driver rejects a layout it cannot describe with a
// bare CUDA_ERROR_INVALID_VALUE, so each requirement is checked first, with
// no device, and the error names the tensor, the number and what to do.
#ifndef FLASHJIT_RUNTIME_TENSORMAPS_H
#define FLASHJIT_RUNTIME_TENSORMAPS_H

#include "flashjit/FlashJIT.h"

#include "llvm/Support/Error.h"
#include <array>
#include <cuda.h>

namespace flashjit {

class CudaDriver;

/// What cuTensorMapEncodeTiled gets for one tensor, laid out as KernelABI.h
/// says; the rest (element strides 1, no interleave, 128-byte swizzle and L2
/// promotion, zero fill) is the same for every map.
struct TensorMapLayout {
  const void *base = nullptr;
  CUtensorMapDataType dataType = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  /// Extents, innermost first: (head_dim, seqlen, heads, batch).
  std::array<cuuint64_t, 4> dims{};
  /// Bytes from one row, head and batch to the next (dims 1 to 3).
  std::array<cuuint64_t, 3> byteStrides{};
  /// Elements one copy moves: (cols, rows, 1, 1).
  std::array<cuuint32_t, 4> box{};
};

/// The layouts of the maps of Q, K, V and O, in kernel parameter order.
struct ForwardTensorMapLayouts {
  TensorMapLayout q, k, v, o;
};

/// The layout of `tensor`'s map with boxes of `boxRows` x `boxCols`
/// elements, or an error that names the tensor (`name`: "Q", "K" or "V"),
/// the requirement of the driver it breaks and what to pass instead to the
/// kernel of family `family`. Needs no device.
llvm::Expected<TensorMapLayout>
tensorMapLayout(const TensorRef &tensor, llvm::StringRef name, unsigned boxRows,
                unsigned boxCols, llvm::StringRef family);

/// The layouts for `args`: Q with boxes of boxes.qRows, K and V (with their
/// own kv heads and seqlen) with boxes of boxes.kvRows, O with boxes of
/// boxes.oRows.
llvm::Expected<ForwardTensorMapLayouts>
forwardTensorMapLayouts(const ForwardArgs &args, const TensorMapBoxes &boxes,
                        llvm::StringRef family);

/// The encoded maps of Q, K, V and O, in kernel parameter order. The driver
/// writes a map only at a 64-byte aligned address; cuda.h aligns CUtensorMap
/// to 64 (CUDA 12) or 128 bytes (CUDA 13), so the members need no alignas of
/// their own (alignas(64) would be ill-formed under CUDA 13's header).
struct ForwardTensorMaps {
  CUtensorMap q, k, v, o;
};
static_assert(sizeof(CUtensorMap) == kTensorMapBytes,
              "the kernel takes tensor maps of kTensorMapBytes bytes");
static_assert(alignof(CUtensorMap) >= 64,
              "cuTensorMapEncodeTiled writes 64-byte aligned maps");

/// Encodes one map with cuTensorMapEncodeTiled.
llvm::Error encodeTensorMap(const CudaDriver &driver,
                            const TensorMapLayout &layout, CUtensorMap &map);

/// Encodes the maps of Q, K, V and O; an error names the tensor and its
/// layout.
llvm::Error encodeTensorMaps(const CudaDriver &driver,
                             const ForwardTensorMapLayouts &layouts,
                             ForwardTensorMaps &maps);

} // namespace flashjit

#endif
