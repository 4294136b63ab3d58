//===- DeviceWords.h - captured tensors for a checked run ---*- C++ -*-===//
// Why: the forward and backward checks both upload the spec's captured
// tensors and block masks as 4-byte words that must live until their
// launches are done; one small owner does it for both.
#ifndef FLASHJIT_DEVTOOLS_DEVICEWORDS_H
#define FLASHJIT_DEVTOOLS_DEVICEWORDS_H

#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/DevTools/DeviceBuffer.h"
#include "flashjit/DevTools/HostBlockMask.h"
#include "flashjit/FlashJIT.h"

#include "llvm/ADT/ArrayRef.h"

#include <memory>
#include <vector>

namespace flashjit {

/// 4-byte words in device buffers that live as long as this.
class DeviceWords {
public:
  explicit DeviceWords(const CudaDriver &drv) : drv(drv) {}

  /// `count` words (at least one allocated), shaped row-major.
  llvm::Expected<CapturedRef> upload(const void *words, size_t count,
                                     CaptureDType dtype,
                                     llvm::ArrayRef<int64_t> shape);

  /// The spec's captured tensors as f32 or i32 words, appended to `out`.
  llvm::Error uploadCaptures(const AttentionSpec &spec,
                             llvm::ArrayRef<HostCapture> captures,
                             std::vector<CapturedRef> &out);

  /// A host block mask's lists (counts, indices, then the full lists
  /// when it has them) into `out`'s fields, in their order.
  llvm::Error uploadBlockMask(const HostBlockMask &mask, BlockMaskRef &out);

private:
  const CudaDriver &drv;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
};

} // namespace flashjit

#endif
