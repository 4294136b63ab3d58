//===- Kernel.cpp - a compiled forward kernel and its launches ----------===//
// Why: forward() is the hot path: it checks the arguments against the
// spec, picks the kernel of the call's length class (two compares when the
// call stays in the handle's own class), encodes the tensor maps, takes a
// tile counter for persistent kernels (and, block-sparse, sorts their
// query blocks longest first: TileOrderKernel.h) and launches on the
// caller's stream with the module's context current. Every error carries
// an ErrorCode.
#include "flashjit/FlashJIT.h"

#include "KernelLengthChoice.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Runtime/ScopedContext.h"
#include "flashjit/Runtime/StreamBuffers.h"
#include "flashjit/Runtime/TensorMaps.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/TileOrderKernel.h"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace flashjit {

namespace {
/// The checks of forward(): the arguments against the spec and, for a
/// kernel that takes tensor maps, what the maps can describe. Returns the
/// maps' layouts, which the launch encodes.
llvm::Expected<std::optional<ForwardTensorMapLayouts>>
checkForward(const AttentionSpec &spec, const KernelInfo &info,
             const std::optional<TensorMapBoxes> &boxes, bool persistent,
             const ForwardArgs &args) {
  if (auto err = checkForwardArgs(spec, args))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (auto err = checkGridLimits(info, persistent, args))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (!boxes)
    return std::nullopt;
  auto layouts = forwardTensorMapLayouts(args, *boxes, info.config.family);
  if (!layouts)
    return withCode(ErrorCode::InvalidArgument, layouts.takeError());
  return *layouts;
}
} // namespace

/// A persistent kernel's tile counters (KernelABI.h): a pair of u32 that
/// must be zero when a launch starts, which the launch's last block leaves
/// zero again. Launches in one stream run in turn and share the stream's
/// pair; launches in different streams may overlap and get different pairs.
/// A launch captured into a CUDA graph gets a pair of its own, zeroed by a
/// memset node before it, so replays of the graph on any stream never share
/// a pair with direct launches (replays of one graph executable are
/// serialized by the driver).
struct Kernel::TileCounters {
  /// Pairs come from slabs of this many, allocated as needed.
  static constexpr unsigned kPairsPerSlab = 512;
  std::mutex mutex;
  /// By the driver's stream id: unique for the life of the process (a
  /// handle may be reused by a later stream while an earlier launch still
  /// runs) and distinct for each thread's per-thread default stream.
  std::unordered_map<unsigned long long, CUdeviceptr> byStream;
  std::vector<CUdeviceptr> slabs;
  unsigned usedInSlab = kPairsPerSlab;
  /// The module's context, where the slabs live.
  CUcontext context = nullptr;

  /// A fresh pair, zeroed on `stream` ahead of the launch that takes it.
  /// Allocates in relaxed capture mode: allowed while this or another
  /// thread captures a graph.
  llvm::Expected<CUdeviceptr> freshPair(const CudaDriver &drv,
                                        CUstream stream) {
    if (usedInSlab == kPairsPerSlab) {
      auto scope = ScopedContext::enter(drv, context);
      if (!scope)
        return scope.takeError();
      auto slab =
          allocateWhileCapturing(drv, kPairsPerSlab * 2 * sizeof(uint32_t));
      if (!slab)
        return slab.takeError();
      slabs.push_back(*slab);
      usedInSlab = 0;
    }
    CUdeviceptr pair = slabs.back() + usedInSlab * 2 * sizeof(uint32_t);
    if (auto err = FLASHJIT_CU(drv, cuMemsetD32Async, pair, 0, 2, stream))
      return std::move(err);
    ++usedInSlab;
    return pair;
  }

  /// The pair a launch on `stream` takes.
  llvm::Expected<uint32_t *> forLaunch(CUstream stream) {
    auto drv = CudaDriver::get();
    if (!drv)
      return drv.takeError();
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (auto err = FLASHJIT_CU(*drv, cuStreamIsCapturing, stream, &capture))
      return std::move(err);
    if (capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      std::lock_guard<std::mutex> lock(mutex);
      auto pair = freshPair(*drv, stream);
      if (!pair)
        return pair.takeError();
      return reinterpret_cast<uint32_t *>(*pair);
    }
    unsigned long long id = 0;
    if (auto err = FLASHJIT_CU(*drv, cuStreamGetId, stream, &id))
      return std::move(err);
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = byStream.find(id); it != byStream.end())
      return reinterpret_cast<uint32_t *>(it->second);
    auto pair = freshPair(*drv, stream);
    if (!pair)
      return pair.takeError();
    byStream.emplace(id, *pair);
    return reinterpret_cast<uint32_t *>(*pair);
  }

  ~TileCounters() {
    if (slabs.empty())
      return;
    auto drv = CudaDriver::get();
    if (!drv) {
      llvm::consumeError(drv.takeError());
      return;
    }
    auto scope = ScopedContext::enter(*drv, context);
    if (!scope) {
      llvm::consumeError(scope.takeError());
      return;
    }
    for (CUdeviceptr slab : slabs)
      (void)drv->cuMemFree(slab);
  }
};

/// The order kernel of a block-sparse persistent kernel's module and the
/// orders it writes, one buffer per stream (StreamBuffers: launches on one
/// stream run in turn, the forward reading the order its launch wrote),
/// and one per launch captured into a CUDA graph, as the tile counters.
struct Kernel::TileOrder {
  explicit TileOrder(int deviceOrdinal)
      : buffers(deviceOrdinal, /*ownWhileCapturing=*/true) {}
  CUfunction function = nullptr;
  StreamBuffers buffers;
};

Kernel::Kernel(AttentionSpec spec, KernelInfo info, std::string ptx,
               std::unique_ptr<LoadedModule> module, std::string deviceError,
               ConfigOrigin origin)
    : Spec(spec), Info(std::move(info)), Ptx(std::move(ptx)),
      Origin(std::move(origin)), Module(std::move(module)),
      DeviceError(std::move(deviceError)) {
  // The tensor maps it takes, its grid, and whether it takes tiles from
  // a counter. Kernels come from their family's template; a Kernel made by
  // hand with a family no template has launches without maps or counter.
  bool takesTiles = false;
  if (const KernelTemplate *tmpl = lookupTemplate(Info.config.family)) {
    MapBoxes = tmpl->tensorMapBoxes(Spec, Info.config);
    Persistent = tmpl->persistent();
    takesTiles = tmpl->takesTilesFromCounter();
  }
  if (!takesTiles)
    return;
  Counters = std::make_unique<TileCounters>();
  if (Module)
    Counters->context = Module->context();
  if (!usesTileOrder(Spec, Info.config))
    return;
  Order = std::make_unique<TileOrder>(Module ? Module->deviceOrdinal() : 0);
  if (!Module)
    return;
  auto sort = Module->companion(tileOrderKernelName(Info.name));
  if (!sort) {
    DeviceError = llvm::toString(sort.takeError());
    Module.reset();
    return;
  }
  Order->function = *sort;
}

Kernel::~Kernel() = default;

llvm::Error Kernel::check(const ForwardArgs &args) const {
  if (Spec.varlen)
    return varlenNeedsOffsets();
  return checkForward(Spec, Info, MapBoxes, Persistent, args).takeError();
}

llvm::Error Kernel::prepareLaunch(const ForwardArgs &args,
                                  ForwardLaunchParams &params) const {
  auto layouts = checkForward(Spec, Info, MapBoxes, Persistent, args);
  if (!layouts)
    return layouts.takeError();
  if (!Module)
    return makeError(ErrorCode::NoDevice, "cannot launch " + Info.name +
                                              ": no GPU is available (" +
                                              DeviceError + ")");
  if (auto err = prepareForwardLaunch(args,
                                      args.scale.value_or(Spec.defaultScale()),
                                      *layouts ? &**layouts : nullptr, params,
                                      Module->deviceOrdinal()))
    return withCode(ErrorCode::LaunchError, std::move(err));
  // A kernel that takes a tile order takes the natural one until
  // launchTileOrder says otherwise.
  params.variant.hasTileOrder = Order != nullptr;
  // A kernel that takes tiles from a counter gets this stream's.
  if (Counters) {
    auto counter = Counters->forLaunch(args.stream);
    if (!counter)
      return withCode(ErrorCode::LaunchError, counter.takeError());
    params.args.tileCounter = *counter;
  }
  return llvm::Error::success();
}

llvm::Error Kernel::launchTileOrder(const ForwardArgs &args,
                                    ForwardLaunchParams &params) const {
  // One order row per list row (the lists' batch and heads: each the
  // problem's, or 1 for lists shared by every sequence or head).
  const auto &counts = args.blockMask.kvNumBlocks;
  const int64_t listBatch = counts.shape[0], listHeads = counts.shape[1];
  const int64_t rowElements =
      tileOrderRowElements(args.q.shape[2], Info.config.blockM);
  const size_t bytes = static_cast<size_t>(listBatch * listHeads *
                                           rowElements) *
                       sizeof(int32_t);
  auto order = Order->buffers.forStream(args.stream, bytes, /*zeroed=*/false);
  if (!order)
    return withCode(ErrorCode::LaunchError, order.takeError());
  TileOrderLaunchParams sorting;
  sorting.seqlenQ = params.args.seqlenQ;
  sorting.seqlenK = params.args.seqlenK;
  sorting.lists.fill({}, args.blockMask);
  sorting.order = reinterpret_cast<void *>(*order);
  auto pointers = sorting.pointers();
  auto drv = CudaDriver::get();
  if (!drv)
    return withCode(ErrorCode::LaunchError, drv.takeError());
  if (auto err = launchInCurrentContext(
          *drv, Order->function, tileOrderGeometry(listBatch, listHeads),
          pointers.data(), args.stream))
    return withCode(ErrorCode::LaunchError, std::move(err));
  params.variant.tileOrder = reinterpret_cast<const void *>(*order);
  params.variant.tileOrderStrides = {
      listBatch == 1 ? 0 : listHeads * rowElements,
      listHeads == 1 ? 0 : rowElements};
  return llvm::Error::success();
}

llvm::Expected<std::shared_ptr<const Kernel>>
Kernel::kernelForLengths(int64_t seqlenQ, int64_t seqlenK) const {
  std::shared_ptr<LengthChoice> choice = Lengths;
  int64_t length = callLength(seqlenQ, seqlenK);
  if (!choice || (length >= ServedFrom && length < ServedTo))
    return weak_from_this().lock();
  size_t index = lengthClassOf(choice->classes, length);
  if (auto kernel = choice->built(index))
    return kernel;
  Context *owner;
  {
    std::lock_guard<std::mutex> lock(choice->mutex);
    owner = choice->owner;
  }
  if (!owner) // the Context is gone: serve every length here
    return weak_from_this().lock();
  KernelOptions options;
  options.seqlen = choice->classes[index].representative;
  return owner->compile(Spec, options);
}

llvm::Error Kernel::forward(const ForwardArgs &args) const {
  if (Spec.varlen)
    return varlenNeedsOffsets();
  return launchForLengths(args.q.shape[2], args.k.shape[2], args);
}

llvm::Error Kernel::launchForLengths(int64_t seqlenQ, int64_t seqlenK,
                                     const ForwardArgs &args,
                                     const VarlenForwardArgs *varlen) const {
  if (Lengths) {
    // Two compares on the common path; another class's kernel otherwise.
    int64_t length = callLength(seqlenQ, seqlenK);
    if (length < ServedFrom || length >= ServedTo) {
      auto other = kernelForLengths(seqlenQ, seqlenK);
      if (!other)
        return other.takeError();
      if (*other && other->get() != this)
        return (*other)->launchOwn(args, varlen);
    }
  }
  return launchOwn(args, varlen);
}

llvm::Error Kernel::launchOwn(const ForwardArgs &args,
                              const VarlenForwardArgs *varlen) const {
  // The module's context is current from the tensor maps to the launch,
  // whatever context the calling thread has (ScopedContext.h).
  std::optional<ScopedContext> scope;
  const CudaDriver *drv = nullptr;
  if (Module) {
    auto driver = CudaDriver::get();
    if (!driver)
      return withCode(ErrorCode::LaunchError, driver.takeError());
    drv = &*driver;
    auto entered = ScopedContext::enter(*drv, Module->context());
    if (!entered)
      return withCode(ErrorCode::LaunchError, entered.takeError());
    scope.emplace(std::move(*entered));
  }
  ForwardLaunchParams params;
  if (auto err = prepareLaunch(args, params))
    return err;
  if (Order)
    if (auto err = launchTileOrder(args, params))
      return err;
  LaunchGeometry geometry;
  if (varlen) {
    if (varlen->batch == 0)
      return llvm::Error::success();
    // The kernel reads its sequence's rows from the offsets; the packed
    // lengths in the seqlens bound them. The grid covers the longest.
    params.args.batch = static_cast<int32_t>(varlen->batch);
    params.variant.varlen = true;
    params.variant.cuSeqlens = {varlen->cuSeqlensQ, varlen->cuSeqlensK};
    if (Spec.paged()) {
      params.variant.cuSeqlens[1] = varlen->kvLens;
      params.variant.blockTable = varlen->blockTable;
      params.variant.maxPages = varlen->maxPages;
      params.variant.paged = true;
    }
    geometry = forwardGeometry(Info, varlen->batch, varlen->maxSeqlenQ,
                               Persistent ? Module->residentBlocks() : 0);
  } else {
    geometry = forwardGeometry(Info, args.q.shape[0], args.q.shape[2],
                               Persistent ? Module->residentBlocks() : 0);
  }
  auto pointers = params.pointers();
  return withCode(ErrorCode::LaunchError,
                  launchInCurrentContext(*drv, Module->function(), geometry,
                                         pointers.data(), args.stream));
}

} // namespace flashjit
