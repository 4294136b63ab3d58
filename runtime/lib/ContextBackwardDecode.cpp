//===- ContextBackwardDecode.cpp - a Context's backward and decode kernels ===//
// Why: the backward pass and decode steps have kernels of their own, with
// their own configs (caller's, tuning database's, default) and the
// Context's one cache and kernel table, so that each is compiled once.
#include "ContextInternals.h"

#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Templates/MmaSyncBackward.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

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
  return Kernels->memoized<BackwardKernel>(
      Kernels->backwards, spec.canonical() + "|" + config.canonical(),
      [&]() -> llvm::Expected<std::shared_ptr<const BackwardKernel>> {
        auto loaded = loadOrCompile(
            spec.canonical(), config, [&](CompileOptions options) {
              options.config = config;
              return flashjit::compileBackward(spec, options);
            });
        if (!loaded)
          return loaded.takeError();
        return std::make_shared<const BackwardKernel>(
            spec, loaded->entry->info, loaded->entry->ptx,
            std::move(loaded->module), DeviceError);
      });
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
  const std::string key = fitted.canonical();
  return Kernels->memoized<DecodeKernel>(
      Kernels->decoders, key,
      [&]() -> llvm::Expected<std::shared_ptr<const DecodeKernel>> {
        return makeDecodeKernel(spec, fitted, key);
      });
}

llvm::Expected<std::shared_ptr<const DecodeKernel>>
Context::makeDecodeKernel(const DecodeSpec &spec, const DecodeSpec &fitted,
                          const std::string &key) {
  // The key's spec text starts with "decode;", the config's family is
  // decode or decode_paged: never a forward kernel's key.
  auto loaded = loadOrCompile(key, decodeTiling(fitted).config(fitted),
                              [&](CompileOptions options) {
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
  return std::shared_ptr<const DecodeKernel>(std::move(decoder));
}

} // namespace flashjit
