//===- StreamBuffers.h - device buffers kept per CUDA stream -----*- C++
//-*-===//
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

namespace flashjit {

/// Thread-safe. The buffers are freed with the object.
class StreamBuffers {
public:
  /// `deviceOrdinal`: whose primary context is made current to allocate
  /// or free when the calling thread has none.
  explicit StreamBuffers(int deviceOrdinal = 0)
      : DeviceOrdinal(deviceOrdinal) {}
  StreamBuffers(const StreamBuffers &) = delete;
  StreamBuffers &operator=(const StreamBuffers &) = delete;
  ~StreamBuffers();

  /// The stream's buffer of at least `bytes`: allocated on first use (and
  /// zeroed when `zeroed`), reallocated when a launch needs more, after
  /// the stream has finished with the old one.
  llvm::Expected<CUdeviceptr> forStream(CUstream stream, size_t bytes,
                                        bool zeroed);

private:
  std::mutex Mutex;
  std::map<CUstream, std::pair<CUdeviceptr, size_t>> ByStream;
  int DeviceOrdinal;
};

} // namespace flashjit

#endif
