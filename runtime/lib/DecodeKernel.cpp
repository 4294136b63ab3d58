//===- DecodeKernel.cpp - checks and launches of the decode kernels -------===//
// Why: see flashjit/Decode.h. The host checks what it can see (shapes,
// dtypes, strides, alignment, workspace), picks the splits, and launches
// the split kernel and, when it split the KV length, the combine kernel,
// both on the caller's stream.
#include "flashjit/Decode.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Runtime/StreamBuffers.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>

namespace flashjit {

TensorRef decodeTensor(void *data, DType dtype, int64_t d0, int64_t d1,
                       int64_t d2, int64_t d3) {
  return {data, dtype, {d0, d1, d2, d3}, {d1 * d2 * d3, d2 * d3, d3, 1}};
}

/// Per-stream scratch for the partials.
struct DecodeKernel::Workspaces {
  explicit Workspaces(int deviceOrdinal) : buffers(deviceOrdinal) {}
  StreamBuffers buffers;
};

DecodeKernel::DecodeKernel(DecodeSpec spec, KernelInfo info, std::string ptx,
                           std::unique_ptr<LoadedModule> module,
                           std::string deviceError)
    : Spec(spec), Info(std::move(info)), Ptx(std::move(ptx)),
      Module(std::move(module)), DeviceError(std::move(deviceError)),
      Scratch(
          std::make_unique<Workspaces>(Module ? Module->deviceOrdinal() : 0)) {
  if (!Module)
    return;
  auto combine = Module->companion(Info.name + "_combine");
  if (!combine) {
    DeviceError = llvm::toString(combine.takeError());
    Module.reset();
    return;
  }
  Combine = *combine;
}

DecodeKernel::~DecodeKernel() = default;

size_t DecodeKernel::workspaceBytes(int64_t batch, int64_t numSplits) const {
  return static_cast<size_t>(decodeWorkspaceFloats(Spec, batch, numSplits)) *
         sizeof(float);
}

int64_t DecodeKernel::capacity(const DecodeArgs &args) const {
  return Spec.paged() ? args.maxPages * Spec.pageSize : args.k.shape[1];
}

namespace {
llvm::Error invalid(const llvm::Twine &message) {
  return makeError(ErrorCode::InvalidArgument, message.str());
}

std::string shapeText(const std::array<int64_t, 4> &shape) {
  return llvm::formatv("[{0}, {1}, {2}, {3}]", shape[0], shape[1], shape[2],
                       shape[3])
      .str();
}

/// A tensor of `dtype` with `shape`, head dim contiguous, the other strides
/// positive multiples of `strideMultiple` and the pointer aligned to
/// `alignment` bytes.
llvm::Error checkTensor(const char *name, const TensorRef &t, DType dtype,
                        const std::array<int64_t, 4> &shape,
                        int64_t strideMultiple, uintptr_t alignment,
                        const char *layout) {
  if (!t.data)
    return invalid(llvm::Twine(name) + " is a null pointer");
  if (t.dtype != dtype)
    return invalid(llvm::formatv("{0} is {1} but the decode spec is {2}", name,
                                 dtypeName(t.dtype), dtypeName(dtype)));
  if (t.shape != shape)
    return invalid(llvm::formatv("{0} has shape {1}, expected {2} ({3})", name,
                                 shapeText(t.shape), shapeText(shape), layout));
  if (t.strides[3] != 1)
    return invalid(llvm::formatv("{0}'s head dim must be contiguous (stride "
                                 "1), not {1}",
                                 name, t.strides[3]));
  for (int i = 0; i < 3; ++i)
    if (t.strides[i] < 0 || t.strides[i] % strideMultiple != 0)
      return invalid(llvm::formatv(
          "{0}'s stride {1} is {2}: it must be a non-negative multiple of "
          "{3} elements",
          name, i, t.strides[i], strideMultiple));
  if (reinterpret_cast<uintptr_t>(t.data) % alignment != 0)
    return invalid(
        llvm::formatv("{0} must be {1}-byte aligned", name, alignment));
  return llvm::Error::success();
}
} // namespace

llvm::Error DecodeKernel::check(const DecodeArgs &args) const {
  const DecodeSpec &s = Spec;
  const int64_t batch = args.q.shape[0];
  if (batch < 1)
    return invalid(llvm::formatv("the batch (q's first dimension) must be at "
                                 "least 1, not {0}",
                                 batch));
  const std::array<int64_t, 4> qShape{batch, s.qLen, s.numHeads, s.headDim};
  const char *qLayout = "batch, q_len, heads, head_dim";
  // cp.async reads 16 bytes: Q, K and V rows start 16-byte aligned; O is
  // written in pairs.
  if (auto err = checkTensor("q", args.q, s.dtype, qShape, 8, 16, qLayout))
    return err;
  if (auto err = checkTensor("o", args.o, s.dtype, qShape, 2, 4, qLayout))
    return err;
  std::array<int64_t, 4> kvShape = args.k.shape;
  if (s.paged()) {
    if (!args.blockTable)
      return invalid("a paged decode spec needs a block table");
    if (args.maxPages < 1)
      return invalid(llvm::formatv("maxPages (the block table's columns) "
                                   "must be at least 1, not {0}",
                                   args.maxPages));
    if (args.blockTableStride != 0 && args.blockTableStride < args.maxPages)
      return invalid(llvm::formatv("the block table's row stride {0} is "
                                   "less than its {1} columns",
                                   args.blockTableStride, args.maxPages));
    if (kvShape[0] < 1)
      return invalid("the page pool (k's first dimension) is empty");
    kvShape[1] = s.pageSize;
  } else {
    kvShape[0] = batch;
  }
  kvShape[2] = s.numKVHeads;
  kvShape[3] = s.headDim;
  const char *kvLayout = s.paged() ? "pages, page_size, kv_heads, head_dim"
                                   : "batch, capacity, kv_heads, head_dim";
  if (auto err = checkTensor("k", args.k, s.dtype, kvShape, 8, 16, kvLayout))
    return err;
  if (auto err = checkTensor("v", args.v, s.dtype, kvShape, 8, 16, kvLayout))
    return err;
  const int64_t cap = capacity(args);
  if (cap < 1 || cap > std::numeric_limits<int32_t>::max())
    return invalid(llvm::formatv("the cache holds {0} tokens per sequence: "
                                 "it must be 1 to 2^31 - 1",
                                 cap));
  if (s.paged() && args.k.shape[0] > std::numeric_limits<int32_t>::max())
    return invalid("the page pool has more than 2^31 - 1 pages");
  if (!args.kvLens)
    return invalid("kvLens (i32 [batch], the KV length of each sequence) is "
                   "a null pointer");
  if (!args.lse.data)
    return invalid("lse is a null pointer: decode returns the log-sum-exp");
  const std::array<int64_t, 3> lseShape{batch, s.numHeads, s.qLen};
  if (args.lse.shape != lseShape)
    return invalid(llvm::formatv(
        "lse has shape [{0}, {1}, {2}], expected [{3}, {4}, {5}] (batch, "
        "heads, q_len)",
        args.lse.shape[0], args.lse.shape[1], args.lse.shape[2], lseShape[0],
        lseShape[1], lseShape[2]));
  for (int64_t stride : args.lse.strides)
    if (stride < 0)
      return invalid("lse strides must be non-negative");
  if (auto err = checkOutputsApart(
          args.o, args.lse, {{"q", &args.q}, {"k", &args.k}, {"v", &args.v}}))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (args.numSplits < 0 || args.numSplits > kMaxDecodeSplits)
    return invalid(llvm::formatv("numSplits must be 0 (the rule) to {0}, "
                                 "not {1}",
                                 kMaxDecodeSplits, args.numSplits));
  if (args.maxKvLen < 0)
    return invalid("maxKvLen must be 0 (the capacity) or a length");
  if (args.scale && !(std::isfinite(*args.scale) && *args.scale > 0))
    return invalid("the softmax scale must be a positive finite number");
  if (args.workspace) {
    size_t need = workspaceBytes(batch, splitsFor(args));
    if (args.workspaceBytes < need)
      return invalid(llvm::formatv("the workspace holds {0} bytes; this "
                                   "launch needs {1}",
                                   args.workspaceBytes, need));
    if (reinterpret_cast<uintptr_t>(args.workspace) % 16 != 0)
      return invalid("the workspace must be 16-byte aligned");
  }
  return llvm::Error::success();
}

void DecodeKernel::addTunedVariant(TunedVariant variant) {
  Tuned.push_back(std::move(variant));
}

int64_t DecodeKernel::longest(const DecodeArgs &args) const {
  const int64_t cap = capacity(args);
  return args.maxKvLen > 0 ? std::min(args.maxKvLen, cap) : cap;
}

const DecodeKernel::TunedVariant *
DecodeKernel::variantFor(const DecodeArgs &args) const {
  const int64_t batch = args.q.shape[0], kvLen = longest(args);
  for (const TunedVariant &v : Tuned)
    if (batch >= v.batchMin && (v.batchMax == 0 || batch < v.batchMax) &&
        kvLen >= v.kvMin && (v.kvMax == 0 || kvLen < v.kvMax))
      return &v;
  return nullptr;
}

int64_t DecodeKernel::ruleSplits(int64_t batch, int64_t longest,
                                 int64_t splitWaves) const {
  // Without a GPU the rule reasons with an H100's two blocks on 132 SMs;
  // a tiling may plan for fewer blocks per SM than fit
  // (DecodeTiling::splitBlocksPerSM).
  const int64_t sms = Module ? Module->multiprocessors() : 132;
  int64_t resident = Module ? Module->residentBlocks() : 2 * sms;
  const int64_t planned = decodeTiling(Spec).splitBlocksPerSM;
  if (planned > 0)
    resident = std::min<int64_t>(resident, planned * sms);
  return chooseDecodeSplits(Spec, std::max<int64_t>(batch, 1), longest,
                            resident, splitWaves);
}

int64_t DecodeKernel::splitsWith(const DecodeArgs &args,
                                 int64_t splitWaves) const {
  if (args.numSplits > 0)
    return args.numSplits;
  return ruleSplits(args.q.shape[0], longest(args), splitWaves);
}

int64_t DecodeKernel::splitsFor(const DecodeArgs &args) const {
  if (const TunedVariant *v = variantFor(args))
    return v->kernel ? v->kernel->splitsWith(args, v->splitWaves)
                     : splitsWith(args, v->splitWaves);
  return splitsWith(args, 1);
}

llvm::Error DecodeKernel::decode(const DecodeArgs &args) const {
  if (auto err = check(args))
    return err;
  if (const TunedVariant *v = variantFor(args))
    return v->kernel ? v->kernel->launchWith(args, v->splitWaves)
                     : launchWith(args, v->splitWaves);
  return launchWith(args, 1);
}

llvm::Error DecodeKernel::launchWith(const DecodeArgs &args,
                                     int64_t splitWaves) const {
  if (!Module)
    return makeError(ErrorCode::NoDevice, "cannot launch " + Info.name +
                                              ": no GPU is available (" +
                                              DeviceError + ")");
  const int64_t batch = args.q.shape[0];
  const int64_t splits = splitsWith(args, splitWaves);
  const double scale = args.scale.value_or(Spec.defaultScale());

  DecodeKernelArgs k;
  k.q = args.q.data;
  k.k = args.k.data;
  k.v = args.v.data;
  k.o = args.o.data;
  k.lse = args.lse.data;
  k.kvLens = args.kvLens;
  k.blockTable = args.blockTable;
  k.qStrides = {args.q.strides[0], args.q.strides[1], args.q.strides[2]};
  // K and V: (batch or page, head, row).
  k.kStrides = {args.k.strides[0], args.k.strides[2], args.k.strides[1]};
  k.vStrides = {args.v.strides[0], args.v.strides[2], args.v.strides[1]};
  k.oStrides = {args.o.strides[0], args.o.strides[1], args.o.strides[2]};
  k.lseStrides = args.lse.strides;
  k.blockTableStride =
      args.blockTableStride > 0 ? args.blockTableStride : args.maxPages;
  k.kvCapacity = static_cast<int32_t>(capacity(args));
  k.numPages = Spec.paged() ? static_cast<int32_t>(args.k.shape[0]) : 0;
  k.numSplits = static_cast<int32_t>(splits);
  k.scaleLog2 = static_cast<float>(scale * M_LOG2E);
  if (splits > 1) {
    void *workspace = args.workspace;
    if (!workspace) {
      auto scratch = Scratch->buffers.forStream(
          args.stream, workspaceBytes(batch, splits), /*zeroed=*/false);
      if (!scratch)
        return withCode(ErrorCode::LaunchError, scratch.takeError());
      workspace = reinterpret_cast<void *>(*scratch);
    }
    k.oPartial = static_cast<float *>(workspace);
    k.lsePartial =
        k.oPartial + batch * Spec.numHeads * Spec.qLen * splits * Spec.headDim;
  }
  auto params = k.paramPointers();
  if (auto err = launch(Module->function(), decodeGeometry(Spec, batch, splits),
                        params.data(), args.stream, Module->deviceOrdinal()))
    return withCode(ErrorCode::LaunchError, std::move(err));
  if (splits == 1)
    return llvm::Error::success();
  DecodeCombineArgs c;
  c.oPartial = k.oPartial;
  c.lsePartial = k.lsePartial;
  c.o = args.o.data;
  c.lse = args.lse.data;
  c.oStrides = k.oStrides;
  c.lseStrides = k.lseStrides;
  c.rows = static_cast<int32_t>(batch * Spec.numHeads * Spec.qLen);
  c.numSplits = static_cast<int32_t>(splits);
  auto combineParams = c.paramPointers();
  return withCode(ErrorCode::LaunchError,
                  launch(Combine, decodeCombineGeometry(Spec, batch),
                         combineParams.data(), args.stream,
                         Module->deviceOrdinal()));
}

} // namespace flashjit
