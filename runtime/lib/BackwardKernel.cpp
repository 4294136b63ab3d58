//===- BackwardKernel.cpp - checks and launches of the backward pass ------===//
// Why: see flashjit/Backward.h. A bad stride or an output that overlaps an
// input would corrupt memory silently, so every argument is checked before
// the three kernels (MmaSyncBackward.h) are launched in order on the
// caller's stream.
#include "flashjit/Backward.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Runtime/ScopedContext.h"
#include "flashjit/Runtime/TensorMaps.h"
#include "flashjit/Templates/MmaSyncBackward.h"
#include "flashjit/Templates/WgmmaBackward.h"

#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <cmath>
#include <optional>

namespace flashjit {
namespace {

llvm::Error invalid(const llvm::Twine &message) {
  return makeError(ErrorCode::InvalidArgument, message.str());
}

/// The layouts of the TMA maps of Q and dO that the wgmma main kernel
/// takes (boxes of block_m rows x 64 columns), or an error naming the
/// tensor and the requirement it breaks.
llvm::Expected<std::array<TensorMapLayout, 2>>
backwardTensorMapLayouts(const BackwardArgs &a, const TileConfig &config) {
  const unsigned rows = static_cast<unsigned>(config.blockM);
  auto q = tensorMapLayout(a.q, "q", rows, 64, config.family);
  if (!q)
    return q.takeError();
  auto dO = tensorMapLayout(a.dO, "dO", rows, 64, config.family);
  if (!dO)
    return dO.takeError();
  return std::array<TensorMapLayout, 2>{*q, *dO};
}

std::array<int64_t, 3> first3(const std::array<int64_t, 4> &s) {
  return {s[0], s[1], s[2]};
}

} // namespace

BackwardKernel::BackwardKernel(AttentionSpec spec, KernelInfo info,
                               std::string ptx,
                               std::unique_ptr<LoadedModule> module,
                               std::string deviceError)
    : Spec(std::move(spec)), Info(std::move(info)), Ptx(std::move(ptx)),
      Module(std::move(module)), DeviceError(std::move(deviceError)) {
  if (!Module)
    return;
  // The main kernel's name is base_bwd: its module holds base_bwd_pre and
  // base_bwd_dq beside it.
  llvm::StringRef main = Info.name;
  BackwardKernelNames names =
      BackwardKernelNames::of(main.drop_back(llvm::StringRef("_bwd").size()));
  for (auto [name, fn] : {std::pair{&names.preprocess, &Preprocess},
                          std::pair{&names.convert, &Convert}}) {
    auto found = Module->companion(*name);
    if (!found) {
      DeviceError = llvm::toString(found.takeError());
      Module.reset();
      return;
    }
    *fn = *found;
  }
}

BackwardKernel::~BackwardKernel() = default;

bool BackwardKernel::deterministic() const {
  return MmaSyncBackward::isDeterministic(Info.config);
}

size_t BackwardKernel::workspaceBytes(int64_t batch, int64_t seqlenQ) const {
  return BackwardWorkspaceLayout::of(Spec, Info.config, batch, seqlenQ)
      .totalBytes;
}

namespace {
/// The TMA map layouts of Q and dO a wgmma main kernel takes (none for the
/// mma_sync kernels).
using MapLayouts = std::optional<std::array<TensorMapLayout, 2>>;

/// BackwardKernel::check()'s checks of `a` for `kernel`; on success the
/// map layouts, which backward() encodes without computing them again.
llvm::Expected<MapLayouts> checkBackwardArgs(const BackwardKernel &kernel,
                                             const BackwardArgs &a) {
  const AttentionSpec &spec = kernel.spec();
  const TileConfig &config = kernel.info().config;
  // q, k, v, o and lse as the forward took and gave them.
  ForwardArgs forward;
  forward.q = a.q;
  forward.k = a.k;
  forward.v = a.v;
  forward.o = a.o;
  forward.lse = a.lse;
  forward.scale = a.scale;
  forward.captures = a.captures;
  // The block mask is the backward's own (transposed), checked below.
  AttentionSpec tensorsOnly = spec;
  tensorsOnly.sparseBlockM = tensorsOnly.sparseBlockN = 0;
  if (auto err = checkForwardArgs(tensorsOnly, forward))
    return invalid("the forward's tensors: " + llvm::toString(std::move(err)));
  if (auto err = checkTransposedBlockMask(spec, a.blockMask, a.q.shape[0],
                                          a.q.shape[1], a.q.shape[2],
                                          a.k.shape[2]))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  const std::pair<const char *, const TensorRef *> grads[] = {
      {"dO", &a.dO}, {"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}};
  for (auto [name, t] : grads) {
    if (auto err = checkTensorRef(name, *t, spec))
      return withCode(ErrorCode::InvalidArgument, std::move(err));
    const TensorRef &like = t == &a.dk || t == &a.dv ? a.k : a.q;
    if (t->shape != like.shape)
      return invalid(llvm::formatv(
          "{0} shape [{1}, {2}, {3}, {4}] must equal {5}'s [{6}, {7}, {8}, "
          "{9}]",
          name, t->shape[0], t->shape[1], t->shape[2], t->shape[3],
          &like == &a.k ? "k" : "q", like.shape[0], like.shape[1],
          like.shape[2], like.shape[3]));
  }
  // The gradients are written: each element once, apart from each other
  // and from every input.
  const std::pair<const char *, const TensorRef *> inputs[] = {
      {"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"o", &a.o}, {"dO", &a.dO}};
  for (size_t i = 1; i < 4; ++i) {
    auto [name, out] = grads[i];
    if (!hasDistinctElements(*out))
      return invalid(llvm::formatv(
          "{0} strides make distinct gradients share memory", name));
    for (auto [inName, in] : inputs)
      if (spansOverlap(*out, *in))
        return invalid(llvm::formatv("{0} overlaps input {1} in memory: the "
                                     "kernels would read what they write",
                                     name, inName));
    if (spansOverlap(*out, a.lse))
      return invalid(llvm::formatv("{0} overlaps input lse in memory", name));
    for (size_t j = 1; j < i; ++j)
      if (spansOverlap(*out, *grads[j].second))
        return invalid(llvm::formatv("{0} and {1} overlap in memory", name,
                                     grads[j].first));
  }
  MapLayouts layouts;
  if (WgmmaBackward::owns(config)) {
    auto maps = backwardTensorMapLayouts(a, config);
    if (!maps)
      return makeError(ErrorCode::InvalidArgument,
                       llvm::toString(maps.takeError()));
    layouts = *maps;
  }
  const size_t need = kernel.workspaceBytes(a.q.shape[0], a.q.shape[2]);
  if (!a.workspace)
    return invalid(llvm::formatv("the workspace is a null pointer: allocate "
                                 "workspaceBytes(batch, seqlen_q) = {0} bytes "
                                 "of device memory",
                                 need));
  if (reinterpret_cast<uintptr_t>(a.workspace) % 256 != 0)
    return invalid("the workspace pointer is not 256-byte aligned");
  if (a.workspaceBytes < need)
    return invalid(llvm::formatv("the workspace has {0} bytes; this problem "
                                 "needs workspaceBytes(batch, seqlen_q) = {1}",
                                 a.workspaceBytes, need));
  return layouts;
}
} // namespace

namespace {
llvm::Error varlenNeedsOffsets(const KernelInfo &info) {
  return invalid(info.name +
                 " is the backward of a varlen spec (AttentionSpec::varlen): "
                 "launch it with backwardVarlen (C: "
                 "flashjit_backward_run_varlen) and the sequences' offsets, "
                 "or compile the spec without varlen for dense [batch, heads, "
                 "seqlen, head_dim] tensors");
}

/// checkVarlen's checks of what VarlenBackwardArgs adds to the packed
/// views (which checkBackwardArgs checks).
llvm::Error checkVarlenFields(const BackwardKernel &kernel,
                              const VarlenBackwardArgs &args) {
  if (!kernel.spec().varlen)
    return invalid(kernel.info().name +
                   " is not the backward of a varlen spec: compile the spec "
                   "with AttentionSpec::varlen set to run it on packed "
                   "sequences");
  if (auto err = checkVarlenBatch(
          args.batch, {{"cu_seqlens_q", args.cuSeqlensQ},
                       {"cu_seqlens_k", args.cuSeqlensK}}))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  const BackwardArgs &p = args.packed;
  if (auto err = checkPackedViews(p.q, p.k, p.captures, p.blockMask))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (args.maxSeqlenK < 1 || args.maxSeqlenK > p.k.shape[2])
    return invalid(llvm::formatv(
        "max_seqlen_k {0} is out of range: 1 to the packed key tokens ({1})",
        args.maxSeqlenK, p.k.shape[2]));
  return llvm::Error::success();
}
} // namespace

llvm::Error BackwardKernel::check(const BackwardArgs &a) const {
  if (Spec.varlen)
    return varlenNeedsOffsets(Info);
  return checkBackwardArgs(*this, a).takeError();
}

llvm::Error BackwardKernel::checkVarlen(const VarlenBackwardArgs &a) const {
  if (auto err = checkVarlenFields(*this, a))
    return err;
  return checkBackwardArgs(*this, a.packed).takeError();
}

llvm::Error BackwardKernel::backward(const BackwardArgs &a) const {
  if (Spec.varlen)
    return varlenNeedsOffsets(Info);
  auto layouts = checkBackwardArgs(*this, a);
  if (!layouts)
    return layouts.takeError();
  return launchAll(a, *layouts ? (*layouts)->data() : nullptr, nullptr);
}

llvm::Error
BackwardKernel::backwardVarlen(const VarlenBackwardArgs &args) const {
  if (auto err = checkVarlenFields(*this, args))
    return err;
  auto layouts = checkBackwardArgs(*this, args.packed);
  if (!layouts)
    return layouts.takeError();
  if (args.batch == 0)
    return llvm::Error::success();
  return launchAll(args.packed, *layouts ? (*layouts)->data() : nullptr,
                   &args);
}

llvm::Error BackwardKernel::launchAll(const BackwardArgs &a,
                                      const TensorMapLayout *mapLayouts,
                                      const VarlenBackwardArgs *varlen) const {
  if (!Module)
    return makeError(ErrorCode::NoDevice, "cannot launch " + Info.name +
                                              ": no GPU is available (" +
                                              DeviceError + ")");
  // Varlen: the packed rows are one sequence of batch 1 to the preprocess
  // and convert kernels (D and the dQ accumulator are laid out over them);
  // the main kernel narrows each block to its sequence (grid z) and its
  // grid spans the longest sequence's keys.
  const int64_t batch = a.q.shape[0], seqlenQ = a.q.shape[2],
                seqlenK = a.k.shape[2];
  const double scale = a.scale.value_or(Spec.defaultScale());
  BackwardWorkspaceLayout layout =
      BackwardWorkspaceLayout::of(Spec, Info.config, batch, seqlenQ);
  auto *base = static_cast<char *>(a.workspace);
  float *d = reinterpret_cast<float *>(base + layout.dOffset);
  float *dqAccum = reinterpret_cast<float *>(base + layout.dqAccumOffset);
  int32_t *turns = deterministic()
                       ? reinterpret_cast<int32_t *>(base + layout.turnsOffset)
                       : nullptr;
  BackwardGeometry geometry = BackwardGeometry::of(
      Spec, Info.config, batch, seqlenQ, varlen ? varlen->maxSeqlenK : seqlenK);
  if (varlen)
    geometry.main.gridZ = static_cast<unsigned>(varlen->batch);

  BackwardPreprocessArgs pre;
  pre.o = a.o.data;
  pre.dO = a.dO.data;
  pre.d = d;
  pre.dqAccum = dqAccum;
  pre.oStrides = first3(a.o.strides);
  pre.dOStrides = first3(a.dO.strides);
  pre.seqlenQ = static_cast<int32_t>(seqlenQ);
  pre.turns = turns;

  BackwardMainArgs main;
  main.q = a.q.data;
  main.k = a.k.data;
  main.v = a.v.data;
  main.dO = a.dO.data;
  main.dk = a.dk.data;
  main.dv = a.dv.data;
  main.lse = a.lse.data;
  main.d = d;
  main.dqAccum = dqAccum;
  main.qStrides = first3(a.q.strides);
  main.kStrides = first3(a.k.strides);
  main.vStrides = first3(a.v.strides);
  main.dOStrides = first3(a.dO.strides);
  main.dkStrides = first3(a.dk.strides);
  main.dvStrides = first3(a.dv.strides);
  main.lseStrides = a.lse.strides;
  main.seqlenQ = static_cast<int32_t>(seqlenQ);
  main.seqlenK = static_cast<int32_t>(seqlenK);
  main.scaleLog2 = static_cast<float>(scale * M_LOG2E);
  main.scale = static_cast<float>(scale);
  main.turns = turns;

  BackwardConvertArgs convert;
  convert.dqAccum = dqAccum;
  convert.dq = a.dq.data;
  convert.dqStrides = first3(a.dq.strides);
  convert.seqlenQ = static_cast<int32_t>(seqlenQ);
  convert.scale = static_cast<float>(scale);

  const int device = Module->deviceOrdinal();
  // The wgmma kernel takes the maps of Q and dO after the other
  // parameters (after the turn counters when deterministic); the mods'
  // captured tensors come last.
  auto mainPointers = main.paramPointers();
  std::array<void *, BackwardMainArgs::kNumParams + 2 +
                         VariantLaunchParams::kMaxParams>
      mainParams{};
  std::copy(mainPointers.begin(), mainPointers.end(), mainParams.begin());
  size_t variantAt = BackwardMainArgs::kNumParams - (deterministic() ? 0 : 1);
  VariantLaunchParams variant;
  variant.fill(a.captures, a.blockMask);
  if (varlen) {
    variant.varlen = true;
    variant.cuSeqlens = {varlen->cuSeqlensQ, varlen->cuSeqlensK};
  }
  std::array<CUtensorMap, 2> maps{};
  if (mapLayouts) {
    auto drv = CudaDriver::get();
    if (!drv)
      return withCode(ErrorCode::LaunchError, drv.takeError());
    auto scope = ScopedContext::enterDevice(*drv, device);
    if (!scope)
      return withCode(ErrorCode::LaunchError, scope.takeError());
    for (size_t i = 0; i < maps.size(); ++i)
      if (auto err = encodeTensorMap(*drv, mapLayouts[i], maps[i]))
        return withCode(ErrorCode::LaunchError, std::move(err));
    mainParams[variantAt] = &maps[0];
    mainParams[variantAt + 1] = &maps[1];
    variantAt += 2;
  }
  variant.appendPointers(mainParams.data(), static_cast<unsigned>(variantAt));
  auto prePointers = pre.paramPointers();
  if (auto err = launch(Preprocess, geometry.preprocess, prePointers.data(),
                        a.stream, device))
    return withCode(ErrorCode::LaunchError, std::move(err));
  if (auto err = launch(Module->function(), geometry.main, mainParams.data(),
                        a.stream, device))
    return withCode(ErrorCode::LaunchError, std::move(err));
  auto convertPointers = convert.paramPointers();
  return withCode(ErrorCode::LaunchError,
                  launch(Convert, geometry.convert, convertPointers.data(),
                         a.stream, device));
}

} // namespace flashjit
