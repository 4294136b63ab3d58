//===- TensorRefs.cpp - tensor views of the usual layouts ----------------===//
// Why: FlashJIT.h names the memory of a call by shape and strides
// (TensorRef, CapturedRef, LseRef); these helpers give the strides of the
// common dense layouts, so callers need not spell them out.
#include "flashjit/FlashJIT.h"

#include <algorithm>

namespace flashjit {

TensorRef TensorRef::bhsd(void *data, DType dtype, int64_t b, int64_t h,
                          int64_t s, int64_t d) {
  return {data, dtype, {b, h, s, d}, {h * s * d, s * d, d, 1}};
}

TensorRef TensorRef::bshd(void *data, DType dtype, int64_t b, int64_t h,
                          int64_t s, int64_t d) {
  return {data, dtype, {b, h, s, d}, {s * h * d, d, h * d, 1}};
}

CapturedRef CapturedRef::contiguous(const void *data, CaptureDType dtype,
                                    llvm::ArrayRef<int64_t> shape) {
  CapturedRef c;
  c.data = data;
  c.dtype = dtype;
  c.rank = static_cast<int>(std::min<size_t>(shape.size(), 4));
  int64_t stride = 1;
  for (int d = c.rank - 1; d >= 0; --d) {
    c.shape[d] = shape[d];
    c.strides[d] = stride;
    stride *= shape[d];
  }
  return c;
}

LseRef LseRef::contiguous(float *data, int64_t b, int64_t h, int64_t s) {
  return {data, {b, h, s}, {h * s, s, 1}};
}

} // namespace flashjit
