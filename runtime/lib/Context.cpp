//===- Context.cpp - device, cache and compiler behind one object ---------===//
// Why: the runtime's front door. compile() resolves the tile config
// (caller's, tuning database's, heuristic's), goes memory -> disk -> JIT,
// and loads the module on the GPU once; the Kernel it returns launches
// (Kernel.cpp). Every error it returns carries an ErrorCode saying what
// kind it is. The backward's and decode's kernels: ContextBackwardDecode.cpp.
#include "ContextInternals.h"

#include "flashjit/Autotune/Candidates.h"
#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Autotune/KnownGPUs.h"
#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/LengthClasses.h"
#include "flashjit/Runtime/ScopedContext.h"
#include "flashjit/Templates/BlockMaskKernel.h"
#include "flashjit/Templates/KernelTemplate.h"

#include "llvm/Support/FormatVariadic.h"

#include <mutex>

namespace flashjit {

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
/// Slots of the kernel table besides a tuned entry's index.
constexpr int64_t kHeuristicSlot = -1, kExplicitSlot = -2;

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

} // namespace

/// The seqlen that picks a bucket when the caller gives none: the
/// heuristic's hint, so both answer for the same size.
int64_t defaultSeqlen() { return autotune::ProblemShape().seqlen; }

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

llvm::Expected<LoadedEntry> Context::loadOrCompile(
    const std::string &key, const TileConfig &config,
    llvm::function_ref<llvm::Expected<CompiledKernel>(CompileOptions)>
        compile) {
  return loadOrBuild(*Cache, TargetChip, Device.has_value(), Options.device,
                     key, config, [&] {
                       CompileOptions options;
                       options.target = TargetChip;
                       return compile(options);
                     });
}

llvm::Expected<std::shared_ptr<const Kernel>>
Context::build(const AttentionSpec &spec, const ResolvedConfig &resolved,
               std::shared_ptr<Kernel::LengthChoice> choice,
               const LengthClass &range) {
  const TileConfig &config = resolved.config;
  auto loaded =
      loadOrCompile(spec.canonical(), config, [&](CompileOptions options) {
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
  return Kernels->memoized<BlockMaskBuilder>(
      Kernels->builders, spec.canonical(),
      [&]() -> llvm::Expected<std::shared_ptr<const BlockMaskBuilder>> {
        auto loaded = loadOrCompile(
            spec.canonical(), blockMaskConfig(spec),
            [&](CompileOptions options) {
              return compileBlockMaskKernel(spec, options);
            });
        if (!loaded)
          return loaded.takeError();
        return std::make_shared<const BlockMaskBuilder>(
            spec, loaded->entry->info, loaded->entry->ptx,
            std::move(loaded->module), DeviceError);
      });
}

} // namespace flashjit
