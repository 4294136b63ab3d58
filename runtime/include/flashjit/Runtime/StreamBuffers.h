//===- StreamBuffers.h - device buffers kept per CUDA stream ---*- C++ -*-===//
// Why: a kernel that needs scratch memory between launches (a persistent
// kernel's tile counters, the decode kernels' partial results) keeps one
// buffer per stream: launches on one stream run in turn, each done with the
// buffer before the next starts, while launches on different streams may
// overlap and must not share it.
#ifndef FLASHJIT_RUNTIME_STREAMBUFFERS_H
#define FLASHJIT_RUNTIME_STREAMBUFFERS_H

#include "llvm/Support/Error.h"
#include <cuda.h>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace flashjit {

class CudaDriver;

/// `bytes` of device memory in the calling thread's current context,
/// allocated in relaxed capture mode: allowed while this or another thread
/// captures a CUDA graph (a captured launch's own scratch).
llvm::Expected<CUdeviceptr> allocateWhileCapturing(const CudaDriver &drv,
                                                   size_t bytes);

/// Thread-safe. The buffers are freed with the object.
class StreamBuffers {
public:
  /// `deviceOrdinal`: whose primary context is made current to allocate
  /// or free when the calling thread has none.
  /// With `ownWhileCapturing`, a launch captured into a CUDA graph gets a
  /// buffer of its own (forStream); for small buffers, since each captured
  /// launch keeps its own until this object goes.
  explicit StreamBuffers(int deviceOrdinal = 0, bool ownWhileCapturing = false)
      : DeviceOrdinal(deviceOrdinal), OwnWhileCapturing(ownWhileCapturing) {}
  StreamBuffers(const StreamBuffers &) = delete;
  StreamBuffers &operator=(const StreamBuffers &) = delete;
  ~StreamBuffers();

  /// The stream's buffer of at least `bytes`: allocated on first use (and
  /// zeroed when `zeroed`), reallocated when a launch needs more, after
  /// the stream has finished with the old one (so the first call on a
  /// stream must not be captured). With ownWhileCapturing, while `stream`
  /// captures a CUDA graph, a buffer of the captured launch's own instead
  /// (zeroed by a memset node ahead of it when `zeroed`), kept until this
  /// object goes: replays of the graph on any stream never share a buffer
  /// with direct launches.
  llvm::Expected<CUdeviceptr> forStream(CUstream stream, size_t bytes,
                                        bool zeroed);

private:
  llvm::Expected<CUdeviceptr> capturedBuffer(const CudaDriver &drv,
                                             CUstream stream, size_t bytes,
                                             bool zeroed);

  std::mutex Mutex;
  /// Buffer and size by stream id (cuStreamGetId). A destroyed stream's
  /// buffer stays until this object goes.
  std::map<unsigned long long, std::pair<CUdeviceptr, size_t>> ById;
  std::vector<CUdeviceptr> Captured;
  int DeviceOrdinal;
  bool OwnWhileCapturing;
};

} // namespace flashjit

#endif
