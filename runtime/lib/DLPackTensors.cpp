//===- DLPackTensors.cpp - DLPack tensors as the runtime's TensorRefs -----===//
// Why: see DLPackTensors.h. Every message names the tensor and what was
// expected, in DLPack's own words (kDLCUDA, kDLBfloat), since that is what
// the caller's framework shows them.
#include "DLPackTensors.h"

#include "flashjit/Runtime/ErrorCode.h"

#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <cstdint>
#include <limits>

namespace flashjit {
namespace {

llvm::Error invalid(const llvm::Twine &message) {
  return makeError(ErrorCode::InvalidArgument, message);
}

/// The checks every tensor shares: present, on the context's CUDA device,
/// `ndim` dimensions each in [0, 2^31), a data pointer. `what` says what
/// the dimensions are, for the message.
llvm::Error checkCommon(const char *name, const DLTensor *t, int ndim,
                        const char *what, int deviceOrdinal) {
  if (!t)
    return invalid(llvm::formatv("{0} is a null DLTensor pointer", name));
  if (t->device.device_type != kDLCUDA)
    return invalid(llvm::formatv(
        "{0} is on {1}: flashjit needs device memory, kDLCUDA (2)", name,
        deviceTypeName(t->device.device_type)));
  if (t->device.device_id != deviceOrdinal)
    return invalid(llvm::formatv("{0} is on CUDA device {1} but the context "
                                 "uses device {2}",
                                 name, t->device.device_id, deviceOrdinal));
  if (t->ndim != ndim)
    return invalid(llvm::formatv("{0} has {1} dimensions, expected {2}: {3}",
                                 name, t->ndim, ndim, what));
  if (!t->shape)
    return invalid(llvm::formatv("{0} has a null shape pointer", name));
  for (int i = 0; i < ndim; ++i)
    if (t->shape[i] < 0 || t->shape[i] >= (int64_t(1) << 31))
      return invalid(llvm::formatv("{0} dimension {1} has extent {2}: "
                                   "expected 0 to 2^31 - 1",
                                   name, i, t->shape[i]));
  if (!t->data)
    return invalid(llvm::formatv("{0} has a null data pointer", name));
  return llvm::Error::success();
}

/// The tensor's strides in elements; null strides mean compact row-major
/// (DLPack's rule). A product past int64 (extents below 2^31 each, up to
/// four of them) saturates: the span checks then refuse the tensor.
std::array<int64_t, 4> stridesOf(const DLTensor *t, int n) {
  std::array<int64_t, 4> strides{};
  if (t->strides) {
    for (int i = 0; i < n; ++i)
      strides[i] = t->strides[i];
    return strides;
  }
  int64_t step = 1;
  for (int i = n; i-- > 0;) {
    strides[i] = step;
    if (__builtin_mul_overflow(step, t->shape[i] > 0 ? t->shape[i] : 1, &step))
      step = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

/// data + byte_offset, as DLPack defines the first element (an address:
/// never dereferenced here, so computed without pointer arithmetic).
void *firstElement(const DLTensor *t) {
  return reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(t->data) +
                                  t->byte_offset);
}

} // namespace

std::string deviceTypeName(int32_t deviceType) {
  switch (deviceType) {
  case kDLCPU:
    return "kDLCPU (1)";
  case kDLCUDA:
    return "kDLCUDA (2)";
  case kDLCUDAHost:
    return "kDLCUDAHost (3), pinned host memory";
  case kDLROCM:
    return "kDLROCM (10)";
  case kDLCUDAManaged:
    return "kDLCUDAManaged (13)";
  default:
    return "device type " + std::to_string(deviceType);
  }
}

std::string dataTypeName(DLDataType dtype) {
  std::string base;
  switch (dtype.code) {
  case kDLInt:
    base = "int";
    break;
  case kDLUInt:
    base = "uint";
    break;
  case kDLFloat:
    base = "f";
    break;
  case kDLBfloat:
    base = "bf";
    break;
  default:
    return llvm::formatv("type code {0} with {1} bits x {2} lanes",
                         unsigned(dtype.code), unsigned(dtype.bits),
                         unsigned(dtype.lanes))
        .str();
  }
  std::string text = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1)
    text += "x" + std::to_string(dtype.lanes);
  return text;
}

llvm::Expected<TensorRef> toTensorRef(const char *name, const DLTensor *tensor,
                                      int deviceOrdinal) {
  if (auto err = checkCommon(name, tensor, 4,
                             "[batch, heads, seqlen, head_dim]", deviceOrdinal))
    return std::move(err);
  const DLDataType dt = tensor->dtype;
  TensorRef ref;
  if (dt.code == kDLFloat && dt.bits == 16 && dt.lanes == 1)
    ref.dtype = DType::F16;
  else if (dt.code == kDLBfloat && dt.bits == 16 && dt.lanes == 1)
    ref.dtype = DType::BF16;
  else
    return invalid(llvm::formatv(
        "{0} has dtype {1}: expected f16 (kDLFloat, 16 bits) or bf16 "
        "(kDLBfloat, 16 bits), 1 lane",
        name, dataTypeName(dt)));
  ref.data = firstElement(tensor);
  for (int i = 0; i < 4; ++i)
    ref.shape[i] = tensor->shape[i];
  ref.strides = stridesOf(tensor, 4);
  return ref;
}

llvm::Expected<CapturedRef> toCapturedRef(const char *name,
                                          const DLTensor *tensor,
                                          int deviceOrdinal) {
  if (!tensor)
    return invalid(llvm::formatv("{0} is a null pointer", name));
  if (tensor->ndim < 1 || tensor->ndim > 4)
    return invalid(llvm::formatv("{0} has {1} dimensions: a captured tensor "
                                 "has 1 to 4",
                                 name, tensor->ndim));
  if (auto err = checkCommon(name, tensor, tensor->ndim, "its spec's shape",
                             deviceOrdinal))
    return std::move(err);
  const DLDataType dt = tensor->dtype;
  CapturedRef ref;
  if (dt.code == kDLFloat && dt.bits == 32 && dt.lanes == 1)
    ref.dtype = CaptureDType::F32;
  else if (dt.code == kDLInt && dt.bits == 32 && dt.lanes == 1)
    ref.dtype = CaptureDType::I32;
  else
    return invalid(llvm::formatv("{0} has dtype {1}: a captured tensor is "
                                 "f32 (kDLFloat, 32 bits) or i32 (kDLInt, 32 "
                                 "bits), 1 lane",
                                 name, dataTypeName(dt)));
  ref.data = firstElement(tensor);
  ref.rank = tensor->ndim;
  ref.strides = stridesOf(tensor, ref.rank);
  for (int d = 0; d < ref.rank; ++d)
    ref.shape[d] = tensor->shape[d];
  return ref;
}

llvm::Expected<LseRef> toLseRef(const char *name, const DLTensor *tensor,
                                int deviceOrdinal) {
  if (auto err =
          checkCommon(name, tensor, 3, "[batch, heads, seqlen]", deviceOrdinal))
    return std::move(err);
  const DLDataType dt = tensor->dtype;
  if (!(dt.code == kDLFloat && dt.bits == 32 && dt.lanes == 1))
    return invalid(llvm::formatv(
        "{0} has dtype {1}: expected f32 (kDLFloat, 32 bits), 1 lane", name,
        dataTypeName(dt)));
  LseRef ref;
  ref.data = static_cast<float *>(firstElement(tensor));
  for (int i = 0; i < 3; ++i)
    ref.shape[i] = tensor->shape[i];
  auto strides = stridesOf(tensor, 3);
  ref.strides = {strides[0], strides[1], strides[2]};
  return ref;
}

} // namespace flashjit
