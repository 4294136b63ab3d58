//===- CApiBackward.cpp - the backward part of flashjit.h -----------------===//
// Why: flashjit_backward_* over Context::compileBackward and
// BackwardKernel::backward, in the C API's manner: DLTensors become
// TensorRefs, errors a status and the last error.
#include "CApiSupport.h"
#include "DLPackTensors.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

namespace {

using flashjit::ErrorCode;
using namespace flashjit::capi;

/// flashjit_backward_compile and its _with_options form, reported as `fn`.
flashjit_status_t compileBackward(const char *fn, flashjit_context_t ctx,
                                  const flashjit_attention_spec_t *spec,
                                  const flashjit_backward_options_t *given,
                                  flashjit_backward_t *out) {
  if (!out)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT, "out is a null pointer");
  *out = nullptr;
  if (!ctx)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT, "ctx is a null handle");
  auto parsed = readSpec(spec);
  if (!parsed)
    return fail(fn, parsed.takeError());
  flashjit_backward_options_t o;
  flashjit_backward_options_init(&o);
  if (given) {
    // API version 7's struct ends before seqlen.
    if (auto err = checkStructSize(
            given, offsetof(flashjit_backward_options_t, seqlen), sizeof(o),
            "flashjit_backward_options_init", "backward options"))
      return fail(fn, std::move(err));
    std::memcpy(&o, given, std::min(given->struct_size, sizeof(o)));
  }
  if (o.seqlen < 0)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                "backward options seqlen is " + std::to_string(o.seqlen) +
                    ": expected 0 (the default, 2048) or a length of at "
                    "least 1");
  if (o.deterministic != 0 && o.deterministic != 1)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                "backward options deterministic is " +
                    std::to_string(o.deterministic) + ": expected 0 or 1");
  flashjit::BackwardOptions options;
  options.deterministic = o.deterministic == 1;
  if (o.seqlen > 0)
    options.seqlen = o.seqlen;
  if (o.config && *o.config) {
    auto tile = flashjit::TileConfig::parse(o.config);
    if (!tile)
      return fail(
          fn, flashjit::withCode(ErrorCode::InvalidArgument, tile.takeError()));
    options.config = *tile;
  }
  auto kernel = ctx->context->compileBackward(*parsed, options);
  if (!kernel)
    return fail(fn, kernel.takeError());
  *out = new flashjit_backward{*kernel, ctx->device};
  return succeed();
}
} // namespace

extern "C" {

flashjit_status_t
flashjit_backward_compile(flashjit_context_t ctx,
                          const flashjit_attention_spec_t *spec,
                          const char *config, flashjit_backward_t *out) {
  return guarded(__func__, [&](const char *fn) {
    flashjit_backward_options_t options;
    flashjit_backward_options_init(&options);
    options.config = config;
    return compileBackward(fn, ctx, spec, &options, out);
  });
}

flashjit_status_t flashjit_backward_compile_with_options(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const flashjit_backward_options_t *options, flashjit_backward_t *out) {
  return guarded(__func__, [&](const char *fn) {
    return compileBackward(fn, ctx, spec, options, out);
  });
}

flashjit_status_t flashjit_backward_release(flashjit_backward_t backward) {
  return guarded(__func__, [&](const char *) {
    delete backward;
    return succeed();
  });
}

flashjit_status_t flashjit_backward_workspace_size(
    flashjit_backward_t backward, int64_t batch, int64_t seqlen_q,
    uint64_t *bytes) {
  return guarded(__func__, [&](const char *fn) {
    if (!backward || !bytes)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "backward and bytes must not be null");
    if (batch < 1 || seqlen_q < 1)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "batch and seqlen_q must be at least 1");
    *bytes = backward->kernel->workspaceBytes(batch, seqlen_q);
    return succeed();
  });
}

} // extern "C"

namespace {
/// flashjit_backward_run(_captures) once inside guarded(), reported as
/// `fn`.
flashjit_status_t runBackward(
    const char *fn, flashjit_backward_t backward, const DLTensor *q,
    const DLTensor *k, const DLTensor *v, const DLTensor *o,
    const DLTensor *lse, const DLTensor *dout, DLTensor *dq, DLTensor *dk,
    DLTensor *dv, void *workspace, uint64_t workspace_bytes, double scale,
    const DLTensor *captures, int32_t num_captures,
    const DLTensor *const *qLists, void *stream) {
  if (!backward)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                "backward is a null handle");
  flashjit::BackwardArgs args;
  const std::pair<const char *, const DLTensor *> tensors[] = {
      {"q", q},       {"k", k},   {"v", v},   {"o", o},  {"dout", dout},
      {"dq", dq},     {"dk", dk}, {"dv", dv}};
  flashjit::TensorRef *refs[] = {&args.q,  &args.k,  &args.v, &args.o,
                                 &args.dO, &args.dq, &args.dk, &args.dv};
  for (size_t i = 0; i < 8; ++i) {
    auto ref = flashjit::toTensorRef(tensors[i].first, tensors[i].second,
                                     backward->device);
    if (!ref)
      return fail(fn, ref.takeError());
    *refs[i] = *ref;
  }
  auto lseRef = flashjit::toLseRef("lse", lse, backward->device);
  if (!lseRef)
    return fail(fn, lseRef.takeError());
  args.lse = *lseRef;
  args.workspace = workspace;
  args.workspaceBytes = static_cast<size_t>(workspace_bytes);
  if (!std::isnan(scale))
    args.scale = scale;
  if (llvm::Error err = readCaptures(captures, num_captures,
                                     backward->device, args.captures))
    return fail(fn, std::move(err));
  if (qLists)
    if (llvm::Error err =
            readBlockMask(qLists, backward->device, args.blockMask,
                          flashjit::kTransposedBlockMaskListNames))
      return fail(fn, std::move(err));
  args.stream = static_cast<CUstream>(stream);
  if (llvm::Error err = backward->kernel->backward(args))
    return fail(fn, std::move(err));
  return succeed();
}
} // namespace

extern "C" {

flashjit_status_t flashjit_backward_run(
    flashjit_backward_t backward, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *o, const DLTensor *lse,
    const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
    void *workspace, uint64_t workspace_bytes, double scale, void *stream) {
  return guarded(__func__, [&](const char *fn) {
    return runBackward(fn, backward, q, k, v, o, lse, dout, dq, dk, dv,
                       workspace, workspace_bytes, scale, nullptr, 0, nullptr,
                       stream);
  });
}

flashjit_status_t flashjit_backward_run_captures(
    flashjit_backward_t backward, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *o, const DLTensor *lse,
    const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
    void *workspace, uint64_t workspace_bytes, double scale,
    const DLTensor *captures, int32_t num_captures, void *stream) {
  return guarded(__func__, [&](const char *fn) {
    return runBackward(fn, backward, q, k, v, o, lse, dout, dq, dk, dv,
                       workspace, workspace_bytes, scale, captures,
                       num_captures, nullptr, stream);
  });
}

flashjit_status_t flashjit_backward_run_block_sparse(
    flashjit_backward_t backward, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *o, const DLTensor *lse,
    const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
    void *workspace, uint64_t workspace_bytes, double scale,
    const DLTensor *captures, int32_t num_captures,
    const DLTensor *q_num_blocks, const DLTensor *q_indices,
    const DLTensor *full_q_num_blocks, const DLTensor *full_q_indices,
    void *stream) {
  return guarded(__func__, [&](const char *fn) {
    const DLTensor *lists[] = {q_num_blocks, q_indices, full_q_num_blocks,
                               full_q_indices};
    return runBackward(fn, backward, q, k, v, o, lse, dout, dq, dk, dv,
                       workspace, workspace_bytes, scale, captures,
                       num_captures, lists, stream);
  });
}

} // extern "C"
