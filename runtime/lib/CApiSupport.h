//===- CApiSupport.h - what every C API function is made of ------*- C++
//-*-===//
// Why: the C API spans several files (CApi.cpp, CApiBackward.cpp,
// CApiDecode.cpp, CApiVarlen.cpp); each function turns llvm::Errors into a
// status and the thread-local last error, and lets no exception out, the
// same way, and reads specs, captures and index tensors by the same rules.
// Private to libflashjit.so.
#ifndef FLASHJIT_RUNTIME_LIB_CAPISUPPORT_H
#define FLASHJIT_RUNTIME_LIB_CAPISUPPORT_H

#include "flashjit/flashjit.h"

#include "DLPackTensors.h"

#include "flashjit/Backward.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"

#include <array>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

/// A context handle: the C++ Context and its device ordinal.
struct flashjit_context {
  std::unique_ptr<flashjit::Context> context;
  int device = 0;
};

struct flashjit_kernel {
  std::shared_ptr<const flashjit::Kernel> kernel;
  int device = 0;
  std::string config;
};

struct flashjit_backward {
  std::shared_ptr<const flashjit::BackwardKernel> kernel;
  int device = 0;
};

namespace flashjit::capi {

/// The message of the last failed call on this thread.
inline std::string &lastError() {
  thread_local std::string text;
  return text;
}

inline flashjit_status_t statusOf(flashjit::ErrorCode code) {
  switch (code) {
  case ErrorCode::InvalidArgument:
    return FLASHJIT_STATUS_INVALID_ARGUMENT;
  case ErrorCode::Unsupported:
    return FLASHJIT_STATUS_UNSUPPORTED;
  case ErrorCode::NoDevice:
    return FLASHJIT_STATUS_NO_DEVICE;
  case ErrorCode::CompileError:
    return FLASHJIT_STATUS_COMPILE_ERROR;
  case ErrorCode::DriverError:
    return FLASHJIT_STATUS_DRIVER_ERROR;
  case ErrorCode::LaunchError:
    return FLASHJIT_STATUS_LAUNCH_ERROR;
  case ErrorCode::Internal:
    return FLASHJIT_STATUS_INTERNAL;
  }
  return FLASHJIT_STATUS_INTERNAL;
}

inline flashjit_status_t succeed() {
  lastError().clear();
  return FLASHJIT_STATUS_OK;
}

/// Records "<function>: <message>" as the last error.
inline flashjit_status_t fail(const char *function, flashjit_status_t status,
                              const std::string &message) {
  lastError() = std::string(function) + ": " + message;
  return status;
}

inline flashjit_status_t fail(const char *function, llvm::Error err) {
  flashjit::ErrorParts parts = flashjit::takeErrorParts(std::move(err));
  return fail(function, statusOf(parts.code), parts.message);
}

/// Runs `body`, turning any exception into FLASHJIT_STATUS_INTERNAL.
template <typename Body>
flashjit_status_t guarded(const char *function, Body &&body) noexcept {
  try {
    return body(function);
  } catch (const std::bad_alloc &) {
    return fail(function, FLASHJIT_STATUS_INTERNAL, "out of memory");
  } catch (const std::exception &e) {
    return fail(function, FLASHJIT_STATUS_INTERNAL,
                std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return fail(function, FLASHJIT_STATUS_INTERNAL, "unexpected exception");
  }
}

/// A spec's flashjit_dtype_t code as the DType it names, or an error
/// naming the codes there are.
inline llvm::Expected<DType> readDType(int32_t code) {
  if (code == FLASHJIT_DTYPE_F16)
    return DType::F16;
  if (code == FLASHJIT_DTYPE_BF16)
    return DType::BF16;
  return makeError(ErrorCode::InvalidArgument,
                   "spec dtype code " + std::to_string(code) +
                       " is not a flashjit_dtype_t: expected " +
                       std::to_string(int(FLASHJIT_DTYPE_F16)) +
                       " (FLASHJIT_DTYPE_F16) or " +
                       std::to_string(int(FLASHJIT_DTYPE_BF16)) +
                       " (FLASHJIT_DTYPE_BF16)");
}

/// Largest struct_size believed: anything above is an uninitialised field.
constexpr size_t kMaxStructSize = 4096;

/// Whether a versioned struct (its first field a size_t struct_size) may
/// be read: a size from `oldest` (the first published version's) to
/// kMaxStructSize, and every byte past the `known` bytes of this library's
/// version zero (a later field left at its default asks for nothing new).
/// `init` names the function that fills the struct, `what` the struct in
/// messages.
inline llvm::Error checkStructSize(const void *given, size_t oldest,
                                   size_t known, const char *init,
                                   const std::string &what = "spec") {
  if (!given)
    return makeError(ErrorCode::InvalidArgument, what + " is a null pointer");
  size_t size;
  std::memcpy(&size, given, sizeof(size));
  if (size < oldest || size > kMaxStructSize)
    return makeError(ErrorCode::InvalidArgument,
                     what + " struct_size is " + std::to_string(size) +
                         ", expected " + std::to_string(oldest) + " to " +
                         std::to_string(kMaxStructSize) + " bytes: fill the " +
                         what + " with " + init + "()");
  const auto *bytes = static_cast<const unsigned char *>(given);
  for (size_t i = known; i < size; ++i)
    if (bytes[i] != 0)
      return makeError(ErrorCode::Unsupported,
                       what + " sets a field at byte " + std::to_string(i) +
                           ", beyond the " + std::to_string(known) +
                           " bytes this flashjit (C API version " +
                           std::to_string(FLASHJIT_C_API_VERSION) + ") knows");
  return llvm::Error::success();
}

/// An i32 tensor of rank `rank` on `device` whose last dimension is
/// contiguous (kv_lens, block tables).
inline llvm::Expected<CapturedRef>
readIndexTensor(const char *name, const DLTensor *t, int rank, int device) {
  auto ref = toCapturedRef(name, t, device);
  if (!ref)
    return ref.takeError();
  if (ref->dtype != CaptureDType::I32 || ref->rank != rank ||
      ref->strides[rank - 1] != 1)
    return makeError(ErrorCode::InvalidArgument,
                     std::string(name) + " must be a " +
                         std::to_string(rank) +
                         "-D int32 tensor with a contiguous last dimension");
  return *ref;
}

/// The caller's spec as the C++ AttentionSpec (CApi.cpp). Fields the
/// caller's header did not have keep their defaults; fields this library
/// does not know must be zero.
llvm::Expected<flashjit::AttentionSpec>
readSpec(const flashjit_attention_spec_t *given);
/// `num_captures` DLTensors of captured tensors, appended to `out`
/// (CApi.cpp).
llvm::Error readCaptures(const DLTensor *captures, int32_t num_captures,
                         int device, std::vector<flashjit::CapturedRef> &out);

/// The block mask's four DLTensors (a null one: not given) into `mask`,
/// named `names` in messages (CApi.cpp; kBlockMaskListNames or
/// kTransposedBlockMaskListNames of ForwardChecks.h).
llvm::Error readBlockMask(const DLTensor *const *lists, int device,
                          flashjit::BlockMaskRef &mask,
                          const std::array<const char *, 4> &names);

} // namespace flashjit::capi

#endif
