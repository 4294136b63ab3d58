//===- DeviceBuffer.h - device memory freed on scope exit ---------*- C++
//-*-===//
// Why: the harness and the autotuner's benchmark allocate inputs and
// outputs on the GPU and may leave early on any failed driver call; owning
// each allocation in one small object frees it on every path.
#ifndef FLASHJIT_DEVTOOLS_DEVICEBUFFER_H
#define FLASHJIT_DEVTOOLS_DEVICEBUFFER_H

#include "flashjit/Runtime/CudaDriver.h"

#include <cstddef>

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
  void *data() const { return reinterpret_cast<void *>(Ptr); }
  CUdeviceptr ptr() const { return Ptr; }
  size_t bytes() const { return Bytes; }

private:
  const CudaDriver *Drv;
  CUdeviceptr Ptr = 0;
  size_t Bytes = 0;
};

} // namespace flashjit

#endif
