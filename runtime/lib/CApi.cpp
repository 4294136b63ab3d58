//===- CApi.cpp - flashjit.h over the C++ Context and Kernel --------------===//
// Why: the C ABI is a thin shell around the C++ API. Each function checks
// its C arguments, calls Context/Kernel, and turns the result into a
// status: an llvm::Error's ErrorCode picks the status and its text becomes
// the thread-local last error. Nothing may cross the C boundary as an
// exception or an abort, so every body runs inside guarded().
#include "flashjit/flashjit.h"

#include "CApiSupport.h"
#include "DLPackTensors.h"

#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/ErrorCode.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>

namespace {

using flashjit::ErrorCode;
using namespace flashjit::capi;

/// flashjit_kernel_forward(_captures) once inside guarded(): `fn` names
/// the entry point in messages.
flashjit_status_t forwardKernel(const char *fn, flashjit_kernel_t kernel,
                                const DLTensor *q, const DLTensor *k,
                                const DLTensor *v, DLTensor *o, DLTensor *lse,
                                double scale, const DLTensor *captures,
                                int32_t num_captures, void *stream,
                                const DLTensor *const *blockMask = nullptr) {
  if (!kernel)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                "kernel is a null handle");
  flashjit::ForwardArgs args;
  const std::pair<const char *, const DLTensor *> tensors[] = {
      {"q", q}, {"k", k}, {"v", v}, {"o", o}};
  flashjit::TensorRef *refs[] = {&args.q, &args.k, &args.v, &args.o};
  for (size_t i = 0; i < 4; ++i) {
    auto ref = flashjit::toTensorRef(tensors[i].first, tensors[i].second,
                                     kernel->device);
    if (!ref)
      return fail(fn, ref.takeError());
    *refs[i] = *ref;
  }
  auto lseRef = flashjit::toLseRef("lse", lse, kernel->device);
  if (!lseRef)
    return fail(fn, lseRef.takeError());
  args.lse = *lseRef;
  if (llvm::Error err = readCaptures(captures, num_captures, kernel->device,
                                    args.captures))
    return fail(fn, std::move(err));
  if (blockMask)
    if (llvm::Error err = readBlockMask(blockMask, kernel->device,
                                        args.blockMask,
                                        flashjit::kBlockMaskListNames))
      return fail(fn, std::move(err));
  if (!std::isnan(scale))
    args.scale = scale;
  args.stream = static_cast<CUstream>(stream);
  if (llvm::Error err = kernel->kernel->forward(args))
    return fail(fn, std::move(err));
  return succeed();
}

} // namespace

namespace flashjit::capi {

/// The size of the first published flashjit_attention_spec_t.
constexpr size_t kSpecV1Size =
    offsetof(flashjit_attention_spec_t, num_kv_heads) + sizeof(int64_t);

/// The caller's spec as the C++ AttentionSpec. Fields the caller's header
/// did not have keep their defaults; fields this library does not know must
/// be zero (then they ask for nothing new).
llvm::Expected<flashjit::AttentionSpec>
readSpec(const flashjit_attention_spec_t *given) {
  auto invalid = [](const llvm::Twine &message) {
    return flashjit::makeError(ErrorCode::InvalidArgument, message);
  };
  if (auto err = checkStructSize(given, kSpecV1Size,
                                 sizeof(flashjit_attention_spec_t),
                                 "flashjit_attention_spec_init"))
    return std::move(err);
  const size_t size = given->struct_size;

  flashjit_attention_spec_t s;
  flashjit_attention_spec_init(&s);
  std::memcpy(&s, given, std::min(size, sizeof(s)));

  flashjit::AttentionSpec spec;
  auto dtype = readDType(s.dtype);
  if (!dtype)
    return dtype.takeError();
  spec.dtype = *dtype;
  if (s.causal != 0 && s.causal != 1)
    return invalid(
        llvm::formatv("spec causal is {0}: expected 0 or 1", s.causal));
  spec.headDim = s.head_dim;
  spec.causal = s.causal == 1;
  spec.numHeads = s.num_heads;
  spec.numKVHeads = s.num_kv_heads;
  if (s.causal_align != 0 && s.causal_align != 1)
    return invalid(llvm::formatv(
        "spec causal_align is {0}: expected 0 (top-left) or 1 (bottom-right)",
        s.causal_align));
  spec.causalAlign = s.causal_align == 1 ? flashjit::CausalAlign::BottomRight
                                         : flashjit::CausalAlign::TopLeft;
  spec.windowLeft = s.window_left;
  spec.windowRight = s.window_right;
  if (s.score_mod)
    spec.scoreMod = s.score_mod;
  if (s.mask_mod)
    spec.maskMod = s.mask_mod;
  if (s.varlen != 0 && s.varlen != 1)
    return invalid(
        llvm::formatv("spec varlen is {0}: expected 0 or 1", s.varlen));
  spec.varlen = s.varlen == 1;
  spec.pageSize = s.page_size;
  if (s.num_captures < 0 || s.num_captures > 8)
    return invalid(llvm::formatv("spec num_captures is {0}: expected 0 to 8",
                                 s.num_captures));
  for (int i = 0; i < s.num_captures; ++i) {
    flashjit::CapturedTensor c;
    c.name = "capture" + std::to_string(i);
    if (s.capture_dtype[i] == FLASHJIT_CAPTURE_F32)
      c.dtype = flashjit::CaptureDType::F32;
    else if (s.capture_dtype[i] == FLASHJIT_CAPTURE_I32)
      c.dtype = flashjit::CaptureDType::I32;
    else
      return invalid(llvm::formatv(
          "spec capture_dtype[{0}] is {1}: expected {2} "
          "(FLASHJIT_CAPTURE_F32) or {3} (FLASHJIT_CAPTURE_I32)",
          i, s.capture_dtype[i], int(FLASHJIT_CAPTURE_F32),
          int(FLASHJIT_CAPTURE_I32)));
    if (s.capture_rank[i] < 1 || s.capture_rank[i] > 4)
      return invalid(llvm::formatv(
          "spec capture_rank[{0}] is {1}: expected 1 to 4", i,
          s.capture_rank[i]));
    c.shape.assign(s.capture_shape[i], s.capture_shape[i] + s.capture_rank[i]);
    spec.captures.push_back(c);
  }
  spec.sparseBlockM = s.sparse_block_m;
  spec.sparseBlockN = s.sparse_block_n;
  return spec;
}

/// `num_captures` DLTensors of captured tensors, appended to `out`.
llvm::Error readCaptures(const DLTensor *captures, int32_t num_captures,
                         int device, std::vector<flashjit::CapturedRef> &out) {
  if (num_captures < 0 || num_captures > 8 ||
      (num_captures > 0 && !captures))
    return flashjit::makeError(
        ErrorCode::InvalidArgument,
        llvm::formatv("num_captures is {0} with captures {1}: expected 0 to "
                      "8 DLTensors",
                      num_captures, captures ? "given" : "null"));
  for (int32_t i = 0; i < num_captures; ++i) {
    std::string name = "captures[" + std::to_string(i) + "]";
    auto ref = flashjit::toCapturedRef(name.c_str(), &captures[i], device);
    if (!ref)
      return ref.takeError();
    out.push_back(*ref);
  }
  return llvm::Error::success();
}

llvm::Error readBlockMask(const DLTensor *const *lists, int device,
                          flashjit::BlockMaskRef &mask,
                          const std::array<const char *, 4> &names) {
  auto refs = mask.lists();
  for (int l = 0; l < 4; ++l) {
    if (!lists[l])
      continue;
    auto ref = flashjit::toCapturedRef(names[l], lists[l], device);
    if (!ref)
      return ref.takeError();
    *refs[l] = *ref;
  }
  return llvm::Error::success();
}

} // namespace flashjit::capi

extern "C" {

const char *flashjit_last_error(void) { return lastError().c_str(); }

const char *flashjit_status_name(flashjit_status_t status) {
  // A C caller may pass any int: read it as one (loading an enum of C++
  // outside its values is undefined behaviour).
  static_assert(sizeof(status) == sizeof(int), "the C enum is an int");
  int code = 0;
  std::memcpy(&code, &status, sizeof(code));
  switch (code) {
  case FLASHJIT_STATUS_OK:
    return "ok";
  case FLASHJIT_STATUS_INVALID_ARGUMENT:
    return flashjit::errorCodeName(ErrorCode::InvalidArgument);
  case FLASHJIT_STATUS_UNSUPPORTED:
    return flashjit::errorCodeName(ErrorCode::Unsupported);
  case FLASHJIT_STATUS_NO_DEVICE:
    return flashjit::errorCodeName(ErrorCode::NoDevice);
  case FLASHJIT_STATUS_COMPILE_ERROR:
    return flashjit::errorCodeName(ErrorCode::CompileError);
  case FLASHJIT_STATUS_DRIVER_ERROR:
    return flashjit::errorCodeName(ErrorCode::DriverError);
  case FLASHJIT_STATUS_LAUNCH_ERROR:
    return flashjit::errorCodeName(ErrorCode::LaunchError);
  case FLASHJIT_STATUS_INTERNAL:
    return flashjit::errorCodeName(ErrorCode::Internal);
  }
  return "unknown status";
}

flashjit_status_t flashjit_get_version(int32_t *major, int32_t *minor,
                                       int32_t *patch, int32_t *api_version) {
  // The numbers come from CMake's project(VERSION ...).
  if (major)
    *major = FLASHJIT_VERSION_MAJOR;
  if (minor)
    *minor = FLASHJIT_VERSION_MINOR;
  if (patch)
    *patch = FLASHJIT_VERSION_PATCH;
  if (api_version)
    *api_version = FLASHJIT_C_API_VERSION;
  return succeed();
}

flashjit_status_t flashjit_context_create(int32_t device, const char *cache_dir,
                                          const char *chip,
                                          flashjit_context_t *out) {
  return guarded(__func__, [&](const char *fn) {
    if (!out)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "out is a null pointer");
    *out = nullptr;
    if (device < 0)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "device ordinal " + std::to_string(device) + " is negative");
    flashjit::ContextOptions options;
    options.device = device;
    if (chip)
      options.chip = chip;
    if (cache_dir)
      options.cache.directory = cache_dir;
    auto context = flashjit::Context::create(std::move(options));
    if (!context)
      return fail(fn, context.takeError());
    *out = new flashjit_context{std::move(*context), device};
    return succeed();
  });
}

flashjit_status_t flashjit_context_destroy(flashjit_context_t ctx) {
  return guarded(__func__, [&](const char *) {
    delete ctx;
    return succeed();
  });
}

flashjit_status_t flashjit_context_chip(flashjit_context_t ctx,
                                        const char **chip) {
  return guarded(__func__, [&](const char *fn) {
    if (!ctx || !chip)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  !ctx ? "ctx is a null handle" : "chip is a null pointer");
    *chip = ctx->context->target().chip.c_str();
    return succeed();
  });
}

flashjit_status_t flashjit_context_device(flashjit_context_t ctx,
                                          int32_t *has_device,
                                          const char **reason) {
  return guarded(__func__, [&](const char *fn) {
    if (!ctx || !has_device)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  !ctx ? "ctx is a null handle"
                       : "has_device is a null pointer");
    *has_device = ctx->context->device().has_value() ? 1 : 0;
    if (reason)
      *reason = ctx->context->deviceError().c_str();
    return succeed();
  });
}

namespace {
/// The three compile entry points: `config` is null or "" (the default
/// choice), a whole tile config, or a family name (that family's heuristic
/// choice); `seqlen` is the tuning-bucket hint, 0 for the default. A
/// negative one is refused here: Context::compile's own check reads 0 as
/// wrong too, while the C API takes it as "no hint".
flashjit_status_t compileKernel(const char *fn, flashjit_context_t ctx,
                                const flashjit_attention_spec_t *spec,
                                const char *config, int64_t seqlen,
                                flashjit_kernel_t *out) {
  if (!out)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT, "out is a null pointer");
  *out = nullptr;
  if (!ctx)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT, "ctx is a null handle");
  if (seqlen < 0)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                "seqlen must be 0 (the default hint) or positive, got " +
                    std::to_string(seqlen));
  auto parsed = readSpec(spec);
  if (!parsed)
    return fail(fn, parsed.takeError());
  auto request = flashjit::ConfigRequest::parse(config ? config : "");
  if (!request)
    return fail(fn, flashjit::withCode(flashjit::ErrorCode::InvalidArgument,
                                       request.takeError()));
  flashjit::KernelOptions options;
  options.config = request->config;
  options.family = request->family;
  if (seqlen > 0)
    options.seqlen = seqlen;
  auto kernel = ctx->context->compile(*parsed, options);
  if (!kernel)
    return fail(fn, kernel.takeError());
  *out = new flashjit_kernel{*kernel, ctx->device,
                             (*kernel)->info().config.canonical()};
  return succeed();
}
} // namespace

flashjit_status_t flashjit_kernel_compile(flashjit_context_t ctx,
                                          const flashjit_attention_spec_t *spec,
                                          flashjit_kernel_t *out) {
  return guarded(__func__, [&](const char *fn) {
    return compileKernel(fn, ctx, spec, nullptr, 0, out);
  });
}

flashjit_status_t flashjit_kernel_compile_config(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const char *config, flashjit_kernel_t *out) {
  return guarded(__func__, [&](const char *fn) {
    return compileKernel(fn, ctx, spec, config, 0, out);
  });
}

flashjit_status_t flashjit_kernel_compile_for_seqlen(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const char *config, int64_t seqlen, flashjit_kernel_t *out) {
  return guarded(__func__, [&](const char *fn) {
    return compileKernel(fn, ctx, spec, config, seqlen, out);
  });
}

flashjit_status_t flashjit_kernel_release(flashjit_kernel_t kernel) {
  return guarded(__func__, [&](const char *) {
    delete kernel;
    return succeed();
  });
}

flashjit_status_t flashjit_kernel_describe(flashjit_kernel_t kernel,
                                           const char **name,
                                           const char **config) {
  return guarded(__func__, [&](const char *fn) {
    if (!kernel)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "kernel is a null handle");
    if (name)
      *name = kernel->kernel->info().name.c_str();
    if (config)
      *config = kernel->config.c_str();
    return succeed();
  });
}

flashjit_status_t flashjit_kernel_forward_captures(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse, double scale,
    const DLTensor *captures, int32_t num_captures, void *stream) {
  return guarded(__func__, [&](const char *fn) {
    return forwardKernel(fn, kernel, q, k, v, o, lse, scale, captures,
                         num_captures, stream);
  });
}

flashjit_status_t flashjit_kernel_forward_block_sparse(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse, double scale,
    const DLTensor *captures, int32_t num_captures,
    const DLTensor *kv_num_blocks, const DLTensor *kv_indices,
    const DLTensor *full_kv_num_blocks, const DLTensor *full_kv_indices,
    void *stream) {
  return guarded(__func__, [&](const char *fn) {
    const DLTensor *lists[] = {kv_num_blocks, kv_indices, full_kv_num_blocks,
                               full_kv_indices};
    return forwardKernel(fn, kernel, q, k, v, o, lse, scale, captures,
                         num_captures, stream, lists);
  });
}

flashjit_status_t flashjit_context_build_block_mask(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const DLTensor *captures, int32_t num_captures, int64_t seqlen_q,
    int64_t seqlen_k, DLTensor *kv_num_blocks, DLTensor *kv_indices,
    DLTensor *full_kv_num_blocks, DLTensor *full_kv_indices, void *stream) {
  return guarded(__func__, [&](const char *fn) {
    if (!ctx)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT, "ctx is a null handle");
    auto parsed = readSpec(spec);
    if (!parsed)
      return fail(fn, parsed.takeError());
    flashjit::BlockMaskBuildArgs args;
    args.seqlenQ = seqlen_q;
    args.seqlenK = seqlen_k;
    args.stream = static_cast<CUstream>(stream);
    if (llvm::Error err =
            readCaptures(captures, num_captures, ctx->device, args.captures))
      return fail(fn, std::move(err));
    const DLTensor *lists[] = {kv_num_blocks, kv_indices, full_kv_num_blocks,
                               full_kv_indices};
    if (llvm::Error err =
            readBlockMask(lists, ctx->device, args.blockMask,
                          flashjit::kBlockMaskListNames))
      return fail(fn, std::move(err));
    auto builder = ctx->context->blockMaskBuilder(*parsed);
    if (!builder)
      return fail(fn, builder.takeError());
    if (llvm::Error err = (*builder)->build(args))
      return fail(fn, std::move(err));
    return succeed();
  });
}

flashjit_status_t flashjit_kernel_forward(flashjit_kernel_t kernel,
                                          const DLTensor *q, const DLTensor *k,
                                          const DLTensor *v, DLTensor *o,
                                          DLTensor *lse, double scale,
                                          void *stream) {
  return guarded(__func__, [&](const char *fn) {
    return forwardKernel(fn, kernel, q, k, v, o, lse, scale, nullptr, 0,
                         stream);
  });
}


// ---- the backward pass ------------------------------------------------------

} // extern "C"
