//===- Context.cpp - device, cache and compiler behind one object ---------===//
// Why: the runtime's front door. compile() goes memory -> disk -> JIT, and
// loads the module on the GPU once; forward() checks, then launches.
// Every error it returns carries an ErrorCode saying what kind it is.
#include "flashjit/FlashJIT.h"

#include "flashjit/Autotune/KnownGPUs.h"
#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/KernelCache.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"

#include <map>
#include <mutex>
#include <tuple>

namespace flashjit {

TensorRef TensorRef::bhsd(void *data, DType dtype, int64_t b, int64_t h,
                          int64_t s, int64_t d) {
  return {data, dtype, {b, h, s, d}, {h * s * d, s * d, d, 1}};
}

TensorRef TensorRef::bshd(void *data, DType dtype, int64_t b, int64_t h,
                          int64_t s, int64_t d) {
  return {data, dtype, {b, h, s, d}, {s * h * d, d, h * d, 1}};
}

LseRef LseRef::contiguous(float *data, int64_t b, int64_t h, int64_t s) {
  return {data, {b, h, s}, {h * s, s, 1}};
}

Kernel::Kernel(AttentionSpec spec, KernelInfo info, std::string ptx,
               std::unique_ptr<LoadedModule> module, std::string deviceError)
    : Spec(spec), Info(std::move(info)), Ptx(std::move(ptx)),
      Module(std::move(module)), DeviceError(std::move(deviceError)) {}

Kernel::~Kernel() = default;

llvm::Error Kernel::check(const ForwardArgs &args) const {
  return withCode(ErrorCode::InvalidArgument, checkForwardArgs(Spec, args));
}

llvm::Error Kernel::forward(const ForwardArgs &args) const {
  if (auto err = check(args))
    return err;
  if (!Module)
    return makeError(ErrorCode::NoDevice, "cannot launch " + Info.name +
                                              ": no GPU is available (" +
                                              DeviceError + ")");
  ForwardKernelArgs kernelArgs =
      toKernelArgs(args, args.scale.value_or(Spec.defaultScale()));
  auto params = kernelArgs.paramPointers();
  LaunchGeometry geometry =
      forwardGeometry(Info, args.q.shape[0], args.q.shape[2]);
  return withCode(ErrorCode::LaunchError, launch(Module->function(), geometry,
                                                 params.data(), args.stream));
}

/// Kernels already handed out, by the fields of the spec: the hot path
/// (no string formatting, one map lookup under a mutex).
struct Context::KernelTable {
  using Key = std::tuple<int64_t, int, bool, int64_t, int64_t>;
  static Key keyOf(const AttentionSpec &s) {
    return {s.headDim, static_cast<int>(s.dtype), s.causal, s.numHeads,
            s.numKVHeads};
  }
  std::mutex mutex;
  std::map<Key, std::shared_ptr<const Kernel>> bySpec;
};

Context::~Context() = default;

llvm::Expected<std::unique_ptr<Context>> Context::create(ContextOptions options) {
  std::unique_ptr<Context> ctx(new Context());
  ctx->Options = options;
  ctx->Kernels = std::make_unique<KernelTable>();
  ctx->Cache = std::make_unique<KernelCache>(options.cache);

  if (auto driver = CudaDriver::get(); !driver) {
    ctx->DeviceError = llvm::toString(driver.takeError());
  } else if (auto device = queryDevice(options.device); !device) {
    ctx->DeviceError = llvm::toString(device.takeError());
  } else {
    ctx->Device = *device;
    // The heuristic reasons with the known-GPU table; a GPU it does not
    // know gets the reference GPU of its compute capability.
    if (auto model = autotune::lookupKnownGPU(device->name))
      ctx->HeuristicDevice = device->name;
    else
      llvm::consumeError(model.takeError());
  }

  std::string chip = options.chip;
  if (chip.empty() && ctx->Device) {
    auto target = Target::fromComputeCapability(ctx->Device->computeMajor,
                                                ctx->Device->computeMinor);
    if (!target)
      return withCode(ErrorCode::Unsupported, target.takeError());
    chip = target->chip;
  }
  auto target = Target::parse(chip.empty() ? "sm_90a" : chip);
  if (!target)
    return withCode(ErrorCode::InvalidArgument, target.takeError());
  ctx->TargetChip = *target;
  return std::move(ctx);
}

llvm::Expected<std::shared_ptr<const Kernel>>
Context::compile(const AttentionSpec &spec) {
  const KernelTable::Key tableKey = KernelTable::keyOf(spec);
  {
    std::lock_guard<std::mutex> lock(Kernels->mutex);
    auto it = Kernels->bySpec.find(tableKey);
    if (it != Kernels->bySpec.end())
      return it->second;
  }
  if (auto err = spec.validate())
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  std::string canonical = spec.canonical();
  auto config = chooseTileConfig(spec, TargetChip, HeuristicDevice);
  if (!config) // no template or tile config handles this spec here
    return withCode(ErrorCode::Unsupported, config.takeError());

  ToolchainVersions versions = toolchainVersions();
  CacheKeyInputs inputs{canonical,        config->canonical(),
                        TargetChip.chip,  versions.flashjit,
                        versions.llvm,    std::to_string(TargetChip.ptxVersion())};
  std::string key = KernelCache::makeKey(inputs);
  auto entry = Cache->getOrBuild(
      key, inputs, [&]() -> llvm::Expected<CacheEntry> {
        CompileOptions options;
        options.target = TargetChip;
        options.config = *config;
        auto compiled = compileAttention(spec, options);
        if (!compiled)
          return compiled.takeError();
        CacheEntry e;
        e.info = compiled->info;
        e.ptx = std::move(compiled->text);
        return e;
      });
  if (!entry)
    return withCode(ErrorCode::CompileError, entry.takeError());

  std::unique_ptr<LoadedModule> module;
  if (Device) {
    auto loaded = LoadedModule::load((*entry)->info, (*entry)->ptx,
                                     (*entry)->cubin, Options.device);
    if (!loaded)
      return withCode(ErrorCode::DriverError, loaded.takeError());
    if (loaded->linkedFromPtx() && !loaded->cubin().empty())
      if (auto err = Cache->storeCubin(key, loaded->cubin()))
        llvm::consumeError(std::move(err)); // the PTX entry stays usable
    module = std::make_unique<LoadedModule>(std::move(*loaded));
  }
  auto kernel = std::make_shared<const Kernel>(
      spec, (*entry)->info, (*entry)->ptx, std::move(module), DeviceError);
  std::lock_guard<std::mutex> lock(Kernels->mutex);
  return Kernels->bySpec.try_emplace(tableKey, kernel).first->second;
}

} // namespace flashjit
