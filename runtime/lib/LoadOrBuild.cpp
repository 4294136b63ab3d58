//===- LoadOrBuild.cpp - a kernel from the cache or the compiler --------===//
// Why: see LoadOrBuild.h.
#include "LoadOrBuild.h"

#include "flashjit/Runtime/ErrorCode.h"

namespace flashjit {

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

} // namespace flashjit
