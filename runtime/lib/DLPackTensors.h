//===- DLPackTensors.h - DLPack tensors as TensorRefs -----------*- C++ -*-===//
// Why: the C API takes tensors as DLPack DLTensors, the layout PyTorch,
// JAX, CuPy and TVM all export; the runtime speaks TensorRef/LseRef. The
// translation checks what DLPack can say wrong (device, dtype code, ndim,
// byte offset, null strides meaning row-major) so that forward()'s own
// checks see well-formed refs. Private to libflashjit.so (C API).
#ifndef FLASHJIT_RUNTIME_LIB_DLPACKTENSORS_H
#define FLASHJIT_RUNTIME_LIB_DLPACKTENSORS_H

#include "flashjit/FlashJIT.h"

#include <dlpack/dlpack.h>

namespace flashjit {

/// `tensor` (named `name` in messages) as a [B, H, S, D] f16/bf16 TensorRef
/// on CUDA device `deviceOrdinal`. The dtype is the tensor's own; forward()
/// compares it with the kernel's.
llvm::Expected<TensorRef> toTensorRef(const char *name, const DLTensor *tensor,
                                      int deviceOrdinal);

/// `tensor` as the f32 [B, H, S] log-sum-exp output on `deviceOrdinal`.
llvm::Expected<LseRef> toLseRef(const char *name, const DLTensor *tensor,
                                int deviceOrdinal);

/// `tensor` as a captured tensor (f32 or i32, rank 1 to 4) of a mod.
llvm::Expected<CapturedRef> toCapturedRef(const char *name,
                                          const DLTensor *tensor,
                                          int deviceOrdinal);

/// "kDLCUDA (2)", "kDLCPU (1)", ..., "device type 99" for codes it does
/// not know.
std::string deviceTypeName(int32_t deviceType);

/// "bf16", "f32", "int8", "float code 2 with 64 bits x 2 lanes", ...
std::string dataTypeName(DLDataType dtype);

} // namespace flashjit

#endif
