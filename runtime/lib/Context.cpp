//===- Context.cpp - device, cache and compiler behind one object ---------===//
// Why: the runtime's front door. compile() resolves the tile config
// (caller's, tuning database's, heuristic's), goes memory -> disk -> JIT,
// and loads the module on the GPU once; forward() checks, then launches.
// Every error it returns carries an ErrorCode saying what kind it is.
#include "flashjit/FlashJIT.h"

#include "flashjit/Backward.h"
#include "flashjit/Decode.h"
#include "flashjit/Autotune/Candidates.h"
#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Autotune/KnownGPUs.h"
#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/KernelCache.h"
#include "flashjit/Runtime/LengthClasses.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Runtime/ScopedContext.h"
#include "flashjit/Runtime/TensorMaps.h"
#include "flashjit/Templates/BlockMaskKernel.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/MmaSyncBackward.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>

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

const char *configSourceName(ConfigSource source) {
  switch (source) {
  case ConfigSource::Explicit:
    return "explicit";
  case ConfigSource::Tuned:
    return "tuned";
  case ConfigSource::Heuristic:
    return "heuristic";
  }
  return "heuristic";
}

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
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      if (auto err = FLASHJIT_CU(drv, cuThreadExchangeStreamCaptureMode, &mode))
        return std::move(err);
      CUdeviceptr slab = 0;
      llvm::Error err = FLASHJIT_CU(drv, cuMemAlloc, &slab,
                                    kPairsPerSlab * 2 * sizeof(uint32_t));
      (void)drv.cuThreadExchangeStreamCaptureMode(&mode);
      if (err)
        return std::move(err);
      slabs.push_back(slab);
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
  // A kernel that takes tiles from a counter gets this stream's.
  if (Counters) {
    auto counter = Counters->forLaunch(args.stream);
    if (!counter)
      return withCode(ErrorCode::LaunchError, counter.takeError());
    params.args.tileCounter = *counter;
  }
  return llvm::Error::success();
}

/// The kernels of one spec's length classes, made by one Context. The
/// kernels point to it and it holds them: the Context breaks the cycle
/// when it goes (detach), after which every kernel serves all lengths.
struct Kernel::LengthChoice {
  AttentionSpec spec;
  std::vector<LengthClass> classes;
  std::mutex mutex;
  /// Null once the Context is gone.
  Context *owner = nullptr;
  std::vector<std::shared_ptr<const Kernel>> kernels;

  std::shared_ptr<const Kernel> built(size_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    return kernels[index];
  }
  void detach() {
    std::lock_guard<std::mutex> lock(mutex);
    owner = nullptr;
    for (auto &kernel : kernels)
      kernel.reset();
  }
};

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
  if (Lengths) {
    // Two compares on the common path; another class's kernel otherwise.
    int64_t length = callLength(args.q.shape[2], args.k.shape[2]);
    if (length < ServedFrom || length >= ServedTo) {
      auto other = kernelForLengths(args.q.shape[2], args.k.shape[2]);
      if (!other)
        return other.takeError();
      if (*other && other->get() != this)
        return (*other)->launchOwn(args);
    }
  }
  return launchOwn(args);
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

namespace {
/// Slots of the kernel table besides a tuned entry's index.
constexpr int64_t kHeuristicSlot = -1, kExplicitSlot = -2;

/// The seqlen that picks a bucket when the caller gives none: the
/// heuristic's hint, so both answer for the same size.
int64_t defaultSeqlen() { return autotune::ProblemShape().seqlen; }

llvm::Error checkSeqlenHint(const KernelOptions &options) {
  if (options.seqlen && *options.seqlen < 1)
    return llvm::createStringError(
        llvm::formatv("the seqlen hint must be at least 1, got {0}",
                      *options.seqlen)
            .str());
  return llvm::Error::success();
}

/// Whether a config from the database can be built for the spec here: a
/// hand-edited or older database may name a family or tile that this
/// flashjit does not build.
llvm::Error checkTunedConfig(const AttentionSpec &spec,
                             const TileConfig &config, const Target &target) {
  auto tmpl = findTemplate(config.family);
  if (!tmpl)
    return tmpl.takeError();
  if (auto err = (*tmpl)->supports(spec, target))
    return err;
  return (*tmpl)->checkConfig(spec, config);
}

/// The config of `entry`, a tuning database's (at `path`) entry of the
/// bucket a request falls in, unless `unbuildable` says it cannot be built
/// here: then none, and `why` says so. `kind` names the entries in the
/// texts ("" for the forward's, "backward " for the backward's).
std::optional<ResolvedConfig>
tunedEntryConfig(llvm::StringRef path, const autotune::TuningEntry &entry,
                 llvm::Error unbuildable, llvm::StringRef kind,
                 std::string &why) {
  std::string where = llvm::formatv("tuning database '{0}', {1}bucket {2}",
                                    path, kind, entry.bucket.describe())
                          .str();
  if (!unbuildable)
    return ResolvedConfig{entry.config, {ConfigSource::Tuned, where}};
  why = llvm::formatv("the tuned {0}config {1} ({2}) cannot be built here: "
                      "{3}",
                      kind, entry.config.canonical(), where,
                      llvm::toString(std::move(unbuildable)))
            .str();
  return std::nullopt;
}
} // namespace

/// Kernels already handed out, by the fields of the spec, its variant
/// (canonical text; empty for plain attention) and the slot of the request
/// (a tuned entry, the heuristic, or a named config): the hot path (no
/// string formatting for plain specs and the first two slots, one map
/// lookup under a mutex).
struct Context::KernelTable {
  using Key = std::tuple<int64_t, int, bool, int64_t, int64_t, std::string,
                         int64_t, int64_t, std::string>;
  /// `length`: the representative of the length class a heuristic choice
  /// was made for (0 where the length does not matter).
  static Key keyOf(const AttentionSpec &s, int64_t slot, int64_t length,
                   std::string config) {
    return {s.headDim,
            static_cast<int>(s.dtype),
            s.causal,
            s.numHeads,
            s.numKVHeads,
            s.isPlain() ? std::string() : s.canonical(),
            slot,
            length,
            std::move(config)};
  }
  std::mutex mutex;
  /// Pinned kernels (a named config or family, or perLengthConfig off).
  std::map<Key, std::shared_ptr<const Kernel>> bySpec;
  /// Each spec's kernels per length class.
  std::map<Key, std::shared_ptr<Kernel::LengthChoice>> byLength;
  /// Block-mask kernels, by the spec's canonical text.
  std::map<std::string, std::shared_ptr<const BlockMaskBuilder>> builders;
  /// Backward kernels, by the spec's and the config's canonical text.
  std::map<std::string, std::shared_ptr<const BackwardKernel>> backwards;
  /// Decode kernels, by the decode spec's canonical text.
  std::map<std::string, std::shared_ptr<const DecodeKernel>> decoders;
};

struct Context::WarnedEntries {
  std::mutex mutex;
  /// Entries of Tuned (forward and backward), by address.
  std::set<const void *> entries;
  /// Whether `entry` is warned about for the first time.
  bool first(const void *entry) {
    std::lock_guard<std::mutex> lock(mutex);
    return entries.insert(entry).second;
  }
};

Context::~Context() {
  // Kernels the caller still holds serve every length with their own
  // config from now on (and the kernel table's cycle is broken).
  for (auto &[key, choice] : Kernels->byLength)
    choice->detach();
}

/// The length class of `seqlen` among the spec's (lengthClasses).
static LengthClass classOfLength(const AttentionSpec &spec,
                                 const TunedConfigs &tuned, int64_t seqlen) {
  std::vector<LengthClass> classes = lengthClasses(spec, tuned);
  return classes[lengthClassOf(classes, seqlen)];
}

void Context::warn(llvm::StringRef message) const {
  if (Options.onWarning)
    Options.onWarning(message);
  else
    llvm::errs() << "flashjit: warning: " << message << "\n";
}

llvm::Expected<std::unique_ptr<Context>> Context::create(ContextOptions options) {
  std::unique_ptr<Context> ctx(new Context());
  ctx->Options = options;
  ctx->Kernels = std::make_unique<KernelTable>();
  ctx->Warned = std::make_unique<WarnedEntries>();
  ctx->Cache = std::make_unique<KernelCache>(options.cache);

  if (auto driver = CudaDriver::get(); !driver) {
    ctx->DeviceError = llvm::toString(driver.takeError());
  } else if (auto device = queryDevice(options.device); !device) {
    ctx->DeviceError = llvm::toString(device.takeError());
  } else {
    ctx->Device = *device;
  }

  // The GPU kernels are built and tuned for: the local one, else the one
  // the tuning options name (kernels built ahead of time).
  std::optional<autotune::GpuIdentity> gpu = options.tuning.gpu;
  if (!gpu && ctx->Device)
    gpu = gpuIdentity(*ctx->Device);
  // The heuristic reasons with the known-GPU table; a GPU it does not
  // know gets the reference GPU of its compute capability.
  std::string gpuName =
      ctx->Device ? ctx->Device->name : (gpu ? gpu->name : std::string());
  if (!gpuName.empty()) {
    if (auto model = autotune::lookupKnownGPU(gpuName))
      ctx->HeuristicDevice = gpuName;
    else
      llvm::consumeError(model.takeError());
  }

  std::string chip = options.chip;
  if (chip.empty() && (ctx->Device || gpu)) {
    auto target =
        ctx->Device ? Target::fromComputeCapability(ctx->Device->computeMajor,
                                                    ctx->Device->computeMinor)
                    : Target::fromComputeCapability(gpu->ccMajor, gpu->ccMinor);
    if (!target)
      return withCode(ErrorCode::Unsupported, target.takeError());
    chip = target->chip;
  }
  auto target = Target::parse(chip.empty() ? "sm_90a" : chip);
  if (!target)
    return withCode(ErrorCode::InvalidArgument, target.takeError());
  ctx->TargetChip = *target;

  if (options.tuning.enabled && gpu) {
    DatabaseLocation location = locateDatabase(
        options.tuning.database, options.cache.directory, gpu->name);
    const Context &self = *ctx;
    ctx->Tuned = TunedConfigs::open(
        location, *gpu, autotune::builtFlashjitVersion(),
        [&self](llvm::StringRef message) { self.warn(message); });
  }
  return std::move(ctx);
}

llvm::Expected<TileConfig>
Context::heuristicConfig(const AttentionSpec &spec, int64_t seqlen) const {
  return chooseTileConfig(spec, TargetChip, HeuristicDevice, seqlen);
}

llvm::Expected<ResolvedConfig>
Context::resolveConfig(const AttentionSpec &spec,
                       const KernelOptions &options) const {
  if (auto err = spec.validate())
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (auto err = checkSeqlenHint(options))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (options.config)
    return ResolvedConfig{*options.config, {ConfigSource::Explicit, ""}};
  int64_t seqlen = options.seqlen.value_or(defaultSeqlen());
  // The heuristic answers for the class's representative length, so that
  // every length of a class gets the same kernel.
  int64_t representative =
      classOfLength(spec, Tuned, seqlen).representative;
  if (options.family) {
    if (auto tmpl = findTemplate(*options.family); !tmpl)
      return withCode(ErrorCode::InvalidArgument, tmpl.takeError());
    auto choice = explainFamilyChoice(spec, TargetChip, HeuristicDevice,
                                      *options.family, representative);
    if (!choice)
      return withCode(ErrorCode::Unsupported, choice.takeError());
    return ResolvedConfig{
        choice->config,
        {ConfigSource::Heuristic,
         "the heuristic's choice within family " + *options.family}};
  }

  std::string why = "no tuning database";
  if (!Tuned.path().empty()) {
    if (auto index = Tuned.find(spec, seqlen)) {
      const autotune::TuningEntry &entry = Tuned.entry(*index);
      if (auto tuned = tunedEntryConfig(
              Tuned.path(), entry,
              checkTunedConfig(spec, entry.config, TargetChip), "", why))
        return *tuned;
      if (Warned->first(&entry))
        warn(why + "; using the heuristic's tile config");
    } else {
      why = llvm::formatv("the tuning database '{0}' has no bucket for {1} "
                          "at seqlen {2}",
                          Tuned.path(), spec.canonical(), seqlen)
                .str();
    }
  }
  auto config = heuristicConfig(spec, representative);
  if (!config) // no template or tile config handles this spec here
    return withCode(ErrorCode::Unsupported, config.takeError());
  return ResolvedConfig{
      *config,
      {ConfigSource::Heuristic,
       llvm::formatv("{0}; the heuristic's choice for seqlen {1}", why,
                     representative)
           .str()}};
}

llvm::Expected<std::shared_ptr<const Kernel>>
Context::compile(const AttentionSpec &spec, const TileConfig &config) {
  KernelOptions options;
  options.config = config;
  return compile(spec, options);
}

llvm::Expected<std::shared_ptr<const Kernel>>
Context::compile(const AttentionSpec &spec, const KernelOptions &options) {
  if (auto err = checkSeqlenHint(options))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  int64_t seqlen = options.seqlen.value_or(defaultSeqlen());
  if (!options.config && !options.family && options.perLengthConfig)
    return compilePerLength(spec, seqlen);
  int64_t slot = kHeuristicSlot, length = 0;
  std::string named;
  if (options.config) {
    slot = kExplicitSlot;
    named = options.config->canonical();
  } else {
    if (options.family) {
      slot = kExplicitSlot;
      named = "family " + *options.family;
    } else if (Tuned.size() > 0) {
      if (auto index = Tuned.find(spec, seqlen))
        slot = static_cast<int64_t>(*index);
    }
    if (slot < 0)
      length = classOfLength(spec, Tuned, seqlen).representative;
  }
  KernelTable::Key tableKey =
      KernelTable::keyOf(spec, slot, length, std::move(named));
  {
    std::lock_guard<std::mutex> lock(Kernels->mutex);
    auto it = Kernels->bySpec.find(tableKey);
    if (it != Kernels->bySpec.end())
      return it->second;
  }
  auto kernel = resolveAndBuild(spec, options, nullptr, {});
  if (!kernel)
    return kernel.takeError();
  std::lock_guard<std::mutex> lock(Kernels->mutex);
  return Kernels->bySpec.try_emplace(tableKey, *kernel).first->second;
}

llvm::Expected<std::shared_ptr<const Kernel>>
Context::compilePerLength(const AttentionSpec &spec, int64_t seqlen) {
  KernelTable::Key tableKey = KernelTable::keyOf(spec, 0, 0, "");
  std::shared_ptr<Kernel::LengthChoice> choice;
  {
    std::lock_guard<std::mutex> lock(Kernels->mutex);
    auto it = Kernels->byLength.find(tableKey);
    if (it != Kernels->byLength.end())
      choice = it->second;
  }
  if (!choice) {
    if (auto err = spec.validate())
      return withCode(ErrorCode::InvalidArgument, std::move(err));
    auto made = std::make_shared<Kernel::LengthChoice>();
    made->spec = spec;
    made->classes = lengthClasses(spec, Tuned);
    made->kernels.resize(made->classes.size());
    made->owner = this;
    std::lock_guard<std::mutex> lock(Kernels->mutex);
    choice = Kernels->byLength.try_emplace(tableKey, made).first->second;
  }
  size_t index = lengthClassOf(choice->classes, seqlen);
  if (auto kernel = choice->built(index))
    return kernel;
  const LengthClass &range = choice->classes[index];
  KernelOptions options;
  options.seqlen = range.representative;
  options.perLengthConfig = false;
  auto resolved = resolveConfig(spec, options);
  if (!resolved)
    return resolved.takeError();
  // A config another class already runs is the same kernel.
  {
    std::lock_guard<std::mutex> lock(choice->mutex);
    for (const auto &kernel : choice->kernels)
      if (kernel && kernel->info().config == resolved->config) {
        choice->kernels[index] = kernel;
        return kernel;
      }
  }
  auto kernel = resolveAndBuild(spec, options, choice, range);
  if (!kernel)
    return kernel.takeError();
  std::lock_guard<std::mutex> lock(choice->mutex);
  if (!choice->kernels[index])
    choice->kernels[index] = *kernel;
  return choice->kernels[index];
}

llvm::Expected<std::shared_ptr<const Kernel>>
Context::resolveAndBuild(const AttentionSpec &spec,
                         const KernelOptions &options,
                         std::shared_ptr<Kernel::LengthChoice> choice,
                         const LengthClass &range) {
  auto resolved = resolveConfig(spec, options);
  if (!resolved)
    return resolved.takeError();
  auto kernel = build(spec, *resolved, choice, range);
  if (!kernel && resolved->origin.source == ConfigSource::Tuned) {
    // A database entry must never make a compile fail: fall back, once.
    std::string why =
        llvm::formatv("the tuned config {0} ({1}) failed to build: {2}",
                      resolved->config.canonical(), resolved->origin.detail,
                      llvm::toString(kernel.takeError()))
            .str();
    warn(why + "; using the heuristic's tile config");
    int64_t length = options.seqlen.value_or(defaultSeqlen());
    auto config = heuristicConfig(
        spec, classOfLength(spec, Tuned, length).representative);
    if (!config)
      return config.takeError();
    kernel = build(spec, {*config, {ConfigSource::Heuristic, why}}, choice,
                   range);
  }
  return kernel;
}

namespace {
/// A cache entry with its module, loaded when there is a device.
struct LoadedEntry {
  std::shared_ptr<const CacheEntry> entry;
  std::unique_ptr<LoadedModule> module;
};

/// The entry of (spec, config) from the kernel cache, or built by
/// `compileIt` on a miss, then loaded on `device` when there is one.
llvm::Expected<LoadedEntry>
loadOrBuild(KernelCache &cache, const Target &target, bool hasDevice,
            int device, const std::string &specCanonical,
            const TileConfig &config,
            llvm::function_ref<llvm::Expected<CompiledKernel>()> compileIt) {
  ToolchainVersions versions = toolchainVersions();
  CacheKeyInputs inputs{specCanonical,
                        config.canonical(),
                        target.chip,
                        versions.flashjit,
                        versions.llvm,
                        std::to_string(target.ptxVersion()),
                        versions.generator};
  std::string key = KernelCache::makeKey(inputs);
  auto entry = cache.getOrBuild(key, inputs, [&]() -> llvm::Expected<CacheEntry> {
    auto compiled = compileIt();
    if (!compiled)
      return compiled.takeError();
    CacheEntry e;
    e.info = compiled->info;
    e.ptx = std::move(compiled->text);
    return e;
  });
  if (!entry)
    return withCode(ErrorCode::CompileError, entry.takeError());
  LoadedEntry loaded{*entry, nullptr};
  if (hasDevice) {
    auto module = LoadedModule::load((*entry)->info, (*entry)->ptx,
                                     (*entry)->cubin, device);
    if (!module)
      return withCode(ErrorCode::DriverError, module.takeError());
    loaded.module = std::make_unique<LoadedModule>(std::move(*module));
  }
  return std::move(loaded);
}
} // namespace

llvm::Expected<std::shared_ptr<const Kernel>>
Context::build(const AttentionSpec &spec, const ResolvedConfig &resolved,
               std::shared_ptr<Kernel::LengthChoice> choice,
               const LengthClass &range) {
  const TileConfig &config = resolved.config;
  auto loaded = loadOrBuild(
      *Cache, TargetChip, Device.has_value(), Options.device, spec.canonical(), config,
      [&]() -> llvm::Expected<CompiledKernel> {
        CompileOptions options;
        options.target = TargetChip;
        options.config = config;
        return compileAttention(spec, options);
      });
  if (!loaded)
    return loaded.takeError();
  auto kernel = std::make_shared<Kernel>(
      spec, loaded->entry->info, loaded->entry->ptx, std::move(loaded->module),
      DeviceError, resolved.origin);
  if (choice) {
    kernel->Lengths = std::move(choice);
    kernel->ServedFrom = range.first;
    kernel->ServedTo = range.end;
  }
  return std::shared_ptr<const Kernel>(std::move(kernel));
}

llvm::Expected<std::shared_ptr<const BlockMaskBuilder>>
Context::blockMaskBuilder(const AttentionSpec &spec) {
  if (auto err = spec.validate())
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (!spec.isBlockSparse())
    return makeError(ErrorCode::InvalidArgument,
                     "only a block-sparse spec has a block mask to build (set "
                     "AttentionSpec::sparseBlockM and sparseBlockN): " +
                         spec.canonical());
  std::string key = spec.canonical();
  {
    std::lock_guard<std::mutex> lock(Kernels->mutex);
    if (auto it = Kernels->builders.find(key); it != Kernels->builders.end())
      return it->second;
  }
  auto loaded = loadOrBuild(*Cache, TargetChip, Device.has_value(),
                            Options.device, spec.canonical(), blockMaskConfig(spec),
                            [&]() -> llvm::Expected<CompiledKernel> {
                              CompileOptions options;
                              options.target = TargetChip;
                              return compileBlockMaskKernel(spec, options);
                            });
  if (!loaded)
    return loaded.takeError();
  auto builder = std::make_shared<const BlockMaskBuilder>(
      spec, loaded->entry->info, loaded->entry->ptx, std::move(loaded->module),
      DeviceError);
  std::lock_guard<std::mutex> lock(Kernels->mutex);
  return Kernels->builders.try_emplace(key, builder).first->second;
}

llvm::Expected<ResolvedConfig>
Context::resolveBackwardConfig(const AttentionSpec &spec,
                               const BackwardOptions &options) const {
  if (auto err = spec.validate())
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (auto err = MmaSyncBackward::supports(spec, TargetChip))
    return withCode(ErrorCode::Unsupported, std::move(err));
  if (options.seqlen && *options.seqlen < 1)
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("the backward's seqlen hint must be at "
                                   "least 1, got {0}",
                                   *options.seqlen));
  if (options.config) {
    if (auto err = MmaSyncBackward::checkConfig(spec, *options.config,
                                                TargetChip))
      return withCode(ErrorCode::InvalidArgument, std::move(err));
    return ResolvedConfig{*options.config, {ConfigSource::Explicit, ""}};
  }
  const int64_t seqlen = options.seqlen.value_or(defaultSeqlen());
  std::string why = "no tuning database";
  if (!Tuned.path().empty()) {
    if (const autotune::TuningEntry *entry =
            Tuned.findBackward(spec, seqlen)) {
      if (auto tuned = tunedEntryConfig(
              Tuned.path(), *entry,
              MmaSyncBackward::checkConfig(spec, entry->config, TargetChip),
              "backward ", why))
        return *tuned;
      if (Warned->first(entry))
        warn(why + "; using the default backward config");
    } else {
      why = llvm::formatv("the tuning database '{0}' has no backward bucket "
                          "for {1} at seqlen {2}",
                          Tuned.path(), spec.canonical(), seqlen)
                .str();
    }
  }
  return ResolvedConfig{MmaSyncBackward::defaultConfig(spec, TargetChip),
                        {ConfigSource::Heuristic, why}};
}

llvm::Expected<std::shared_ptr<const BackwardKernel>>
Context::compileBackward(const AttentionSpec &spec,
                         const BackwardOptions &options) {
  auto resolved = resolveBackwardConfig(spec, options);
  if (!resolved)
    return resolved.takeError();
  TileConfig config = resolved->config;
  // The deterministic kernels are their own family: their own cache key.
  // What they do not build yet (windows) is unsupported, not a bad config.
  if (options.deterministic) {
    config = MmaSyncBackward::withVariant(config, /*deterministic=*/true);
    if (auto err = MmaSyncBackward::checkConfig(spec, config, TargetChip))
      return withCode(ErrorCode::Unsupported, std::move(err));
  }
  std::string key = spec.canonical() + "|" + config.canonical();
  {
    std::lock_guard<std::mutex> lock(Kernels->mutex);
    if (auto it = Kernels->backwards.find(key);
        it != Kernels->backwards.end())
      return it->second;
  }
  auto loaded = loadOrBuild(*Cache, TargetChip, Device.has_value(),
                            Options.device, spec.canonical(), config,
                            [&]() -> llvm::Expected<CompiledKernel> {
                              CompileOptions compile;
                              compile.target = TargetChip;
                              compile.config = config;
                              return flashjit::compileBackward(spec, compile);
                            });
  if (!loaded)
    return loaded.takeError();
  auto kernel = std::make_shared<const BackwardKernel>(
      spec, loaded->entry->info, loaded->entry->ptx, std::move(loaded->module),
      DeviceError);
  std::lock_guard<std::mutex> lock(Kernels->mutex);
  return Kernels->backwards.try_emplace(key, kernel).first->second;
}

llvm::Expected<std::shared_ptr<const DecodeKernel>>
Context::decodeKernel(const DecodeSpec &spec) {
  if (auto err = spec.validate())
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (TargetChip.computeCapability < 80)
    return makeError(ErrorCode::Unsupported,
                     "the decode kernels need sm_80 or newer (mma.sync, "
                     "cp.async), not " +
                         TargetChip.chip);
  // A GPU with less shared memory per block than the default stages take
  // (sm_86, sm_89: 99 KiB) gets fewer stages, down to two.
  DecodeSpec fitted = spec;
  if (Device && spec.stages == 0) {
    const int64_t limit = Device->sharedMemoryPerBlockOptin;
    // The default 128-key tiles that do not fit take 64 keys, then fewer
    // stages.
    if (spec.headDim == 128 && spec.blockN == 0 &&
        decodeTiling(spec).blockN == 128 &&
        decodeTiling(spec).sharedBytes(spec) > limit)
      fitted.blockN = 64;
    for (int64_t stages = decodeTiling(fitted).stages;
         stages > 2 && decodeTiling(fitted).sharedBytes(fitted) > limit;)
      fitted.stages = --stages;
  }
  std::string key = fitted.canonical();
  {
    std::lock_guard<std::mutex> lock(Kernels->mutex);
    if (auto it = Kernels->decoders.find(key); it != Kernels->decoders.end())
      return it->second;
  }
  // The key's spec text starts with "decode;", the config's family is
  // decode or decode_paged: never a forward kernel's key.
  auto loaded = loadOrBuild(*Cache, TargetChip, Device.has_value(),
                            Options.device, key,
                            decodeTiling(fitted).config(fitted),
                            [&]() -> llvm::Expected<CompiledKernel> {
                              CompileOptions options;
                              options.target = TargetChip;
                              return compileDecodeKernel(fitted, options);
                            });
  if (!loaded)
    return loaded.takeError();
  auto decoder = std::make_shared<DecodeKernel>(
      fitted, loaded->entry->info, loaded->entry->ptx, std::move(loaded->module),
      DeviceError);
  // A spec without tile knobs takes the tuning database's decode entries
  // (per batch and KV length bucket); one that cannot be built is skipped
  // with a warning.
  const bool knobs = spec.blockN || spec.stages || spec.l2Prefetch ||
                     spec.copyMode || spec.evictFirst;
  if (!knobs)
    for (const autotune::DecodeTuningEntry &e : Tuned.decodeEntriesFor(spec)) {
      DecodeKernel::TunedVariant v;
      v.batchMin = e.bucket.batchMin;
      v.batchMax = e.bucket.batchMax.value_or(0);
      v.kvMin = e.bucket.kvMin;
      v.kvMax = e.bucket.kvMax.value_or(0);
      v.splitWaves = e.config.splitWaves;
      DecodeSpec tuned = e.config.applied(spec);
      if (tuned.canonical() != spec.canonical()) {
        auto kernel = decodeKernel(tuned);
        if (!kernel) {
          warn("the tuned decode config " + e.config.describe() + " (" +
               e.bucket.describe() + ") failed to build: " +
               llvm::toString(kernel.takeError()) + "; using the default");
          continue;
        }
        v.kernel = *kernel;
      }
      decoder->addTunedVariant(std::move(v));
    }
  std::lock_guard<std::mutex> lock(Kernels->mutex);
  return Kernels->decoders.try_emplace(key, decoder).first->second;
}

} // namespace flashjit
