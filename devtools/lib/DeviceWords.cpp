//===- DeviceWords.cpp - captured tensors uploaded for a checked run ------===//
// Why: see DeviceWords.h.
#include "flashjit/DevTools/DeviceWords.h"

#include <algorithm>
#include <cstring>

namespace flashjit {

llvm::Expected<CapturedRef> DeviceWords::upload(const void *words,
                                                size_t count,
                                                CaptureDType dtype,
                                                llvm::ArrayRef<int64_t> shape) {
  auto buffer = std::make_unique<DeviceBuffer>(drv);
  if (auto err = buffer->allocate(std::max<size_t>(count, 1) * 4))
    return std::move(err);
  if (auto err =
          FLASHJIT_CU(drv, cuMemcpyHtoD, buffer->ptr(), words, count * 4))
    return std::move(err);
  CapturedRef ref = CapturedRef::contiguous(buffer->data(), dtype, shape);
  buffers.push_back(std::move(buffer));
  return ref;
}

llvm::Error DeviceWords::uploadCaptures(const AttentionSpec &spec,
                                        llvm::ArrayRef<HostCapture> captures,
                                        std::vector<CapturedRef> &out) {
  for (size_t i = 0; i < captures.size() && i < spec.captures.size(); ++i) {
    const HostCapture &c = captures[i];
    std::vector<uint32_t> words(c.values.size());
    for (size_t e = 0; e < words.size(); ++e) {
      if (spec.captures[i].dtype == CaptureDType::F32) {
        float f = static_cast<float>(c.values[e]);
        std::memcpy(&words[e], &f, 4);
      } else {
        words[e] = static_cast<uint32_t>(static_cast<int32_t>(c.values[e]));
      }
    }
    auto ref = upload(words.data(), words.size(), spec.captures[i].dtype,
                      c.shape);
    if (!ref)
      return ref.takeError();
    out.push_back(*ref);
  }
  return llvm::Error::success();
}

llvm::Error DeviceWords::uploadBlockMask(const HostBlockMask &mask,
                                         BlockMaskRef &out) {
  const std::vector<int32_t> *values[] = {
      &mask.kvNumBlocks, &mask.kvIndices, &mask.fullKvNumBlocks,
      &mask.fullKvIndices};
  auto lists = out.lists();
  for (unsigned l = 0; l < (mask.hasFullLists() ? 4u : 2u); ++l) {
    auto ref = upload(values[l]->data(), values[l]->size(), CaptureDType::I32,
                      l % 2 == 0 ? mask.countShape() : mask.indexShape());
    if (!ref)
      return ref.takeError();
    *lists[l] = *ref;
  }
  return llvm::Error::success();
}

} // namespace flashjit
