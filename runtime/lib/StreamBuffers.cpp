//===- StreamBuffers.cpp - device buffers kept per CUDA stream ------------===//
// Why: see StreamBuffers.h.
#include "flashjit/Runtime/StreamBuffers.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ScopedContext.h"

namespace flashjit {

llvm::Expected<CUdeviceptr> allocateWhileCapturing(const CudaDriver &drv,
                                                   size_t bytes) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (auto err = FLASHJIT_CU(drv, cuThreadExchangeStreamCaptureMode, &mode))
    return std::move(err);
  CUdeviceptr fresh = 0;
  llvm::Error err = FLASHJIT_CU(drv, cuMemAlloc, &fresh, bytes);
  (void)drv.cuThreadExchangeStreamCaptureMode(&mode);
  if (err)
    return std::move(err);
  return fresh;
}

llvm::Expected<CUdeviceptr>
StreamBuffers::forStream(CUstream stream, size_t bytes, bool zeroed) {
  std::lock_guard<std::mutex> lock(Mutex);
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  if (OwnWhileCapturing) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (auto err = FLASHJIT_CU(*drv, cuStreamIsCapturing, stream, &capture))
      return std::move(err);
    if (capture == CU_STREAM_CAPTURE_STATUS_ACTIVE)
      return capturedBuffer(*drv, stream, bytes, zeroed);
  }
  // By the stream's id, not its handle: a destroyed stream's handle may
  // come back for a new stream while the old one's last launch still runs
  // on its buffer; ids are never reused within the process.
  unsigned long long id = 0;
  if (auto err = FLASHJIT_CU(*drv, cuStreamGetId, stream, &id))
    return std::move(err);
  auto &slot = ById[id];
  if (slot.first && slot.second >= bytes)
    return slot.first;
  // The device's own context, whatever the calling thread has current.
  auto scope = ScopedContext::enterDevice(*drv, DeviceOrdinal);
  if (!scope)
    return scope.takeError();
  if (slot.first) {
    // The last launch on this stream may still use the old buffer.
    if (auto err = FLASHJIT_CU(*drv, cuStreamSynchronize, stream))
      return std::move(err);
    (void)drv->cuMemFree(slot.first);
    slot = {0, 0};
  }
  CUdeviceptr fresh = 0;
  if (auto err = FLASHJIT_CU(*drv, cuMemAlloc, &fresh, bytes))
    return std::move(err);
  if (zeroed)
    if (auto err = FLASHJIT_CU(*drv, cuMemsetD8, fresh, 0, bytes)) {
      (void)drv->cuMemFree(fresh);
      return std::move(err);
    }
  slot = {fresh, bytes};
  return fresh;
}

llvm::Expected<CUdeviceptr>
StreamBuffers::capturedBuffer(const CudaDriver &drv, CUstream stream,
                              size_t bytes, bool zeroed) {
  auto scope = ScopedContext::enterDevice(drv, DeviceOrdinal);
  if (!scope)
    return scope.takeError();
  // Whole words, so that a 32-bit memset node can zero it.
  bytes = (bytes + 3) / 4 * 4;
  auto fresh = allocateWhileCapturing(drv, bytes);
  if (!fresh)
    return fresh.takeError();
  Captured.push_back(*fresh);
  if (zeroed)
    if (auto err = FLASHJIT_CU(drv, cuMemsetD32Async, *fresh, 0, bytes / 4,
                               stream))
      return std::move(err);
  return *fresh;
}

StreamBuffers::~StreamBuffers() {
  bool any = !Captured.empty();
  for (auto &[id, buffer] : ById)
    any |= buffer.first != 0;
  if (!any)
    return;
  auto drv = CudaDriver::get();
  if (!drv) {
    llvm::consumeError(drv.takeError());
    return;
  }
  auto scope = ScopedContext::enterDevice(*drv, DeviceOrdinal);
  if (!scope) {
    llvm::consumeError(scope.takeError());
    return;
  }
  for (auto &[id, buffer] : ById)
    if (buffer.first)
      (void)drv->cuMemFree(buffer.first);
  for (CUdeviceptr buffer : Captured)
    (void)drv->cuMemFree(buffer);
}

} // namespace flashjit
