//===- LoadOrBuild.h - a kernel from the cache or the compiler --*- C++ -*-===//
// Why: every kind of kernel a Context hands out (forward, block mask,
// backward, decode) comes the same way: its cache entry by the key of
// (spec, config, chip, versions, generator), compiled on a miss, then
// loaded on the device when there is one.
#ifndef FLASHJIT_RUNTIME_LIB_LOADORBUILD_H
#define FLASHJIT_RUNTIME_LIB_LOADORBUILD_H

#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Runtime/KernelCache.h"
#include "flashjit/Runtime/ModuleLoader.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace flashjit {

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
            llvm::function_ref<llvm::Expected<CompiledKernel>()> compileIt);

} // namespace flashjit

#endif
