//===- DeviceBuffer.h - device memory freed on scope exit ---------*- C++
//-*-===//
// Why: the harness and the autotuner's benchmark allocate inputs and
// outputs on the GPU and may leave early on any failed driver call; owning
// each allocation in one small object frees it on every path.
#ifndef FLASHJIT_DEVTOOLS_DEVICEBUFFER_H
#define FLASHJIT_DEVTOOLS_DEVICEBUFFER_H

#include "flashjit/Runtime/CudaDriver.h"

#include <cstddef>
#include <initializer_list>

namespace flashjit {

class DeviceBuffer {
public:
  explicit DeviceBuffer(const CudaDriver &drv) : Drv(&drv) {}
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { release(); }

  /// Frees what the buffer held, then allocates `bytes` (at least 1).
  llvm::Error allocate(size_t bytes) {
    release();
    CUdeviceptr fresh = 0;
    if (llvm::Error err =
            FLASHJIT_CU(*Drv, cuMemAlloc, &fresh, bytes ? bytes : 1))
      return err;
    Ptr = fresh;
    Bytes = bytes;
    return llvm::Error::success();
  }
  void release() {
    if (Ptr)
      (void)Drv->cuMemFree(Ptr);
    Ptr = 0;
    Bytes = 0;
  }
  /// Fills the buffer with 0xFF bytes: NaN in f16, bf16 and f32, so that
  /// an output a launch does not write fails a check.
  llvm::Error poison() const {
    return FLASHJIT_CU(*Drv, cuMemsetD8, Ptr, 0xFF, Bytes);
  }
  void *data() const { return reinterpret_cast<void *>(Ptr); }
  CUdeviceptr ptr() const { return Ptr; }
  size_t bytes() const { return Bytes; }

private:
  const CudaDriver *Drv;
  CUdeviceptr Ptr = 0;
  size_t Bytes = 0;
};

/// DeviceBuffer::poison of each buffer; the first failure.
inline llvm::Error poison(std::initializer_list<const DeviceBuffer *> buffers) {
  for (const DeviceBuffer *buffer : buffers)
    if (llvm::Error err = buffer->poison())
      return err;
  return llvm::Error::success();
}

} // namespace flashjit

#endif
