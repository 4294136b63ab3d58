//===- ConfigChoice.cpp - the default tile config of a spec ---------------===//
// Why: one call from the compiler into the autotuner's heuristic: a named
// known GPU, or the reference GPU of the target's compute capability.
#include "flashjit/Compiler/ConfigChoice.h"

#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Autotune/KnownGPUs.h"
#include "flashjit/Templates/KernelTemplate.h"

namespace flashjit {

llvm::Expected<autotune::DeviceModel>
heuristicDeviceModel(const Target &target, llvm::StringRef device) {
  if (device.empty())
    return autotune::referenceGPU(target.computeCapability / 10,
                                  target.computeCapability % 10);
  auto model = autotune::lookupKnownGPU(device);
  if (!model)
    return model.takeError();
  // Kernels built for an older chip than the GPU's (an H100 context asked
  // for sm_80) may use only that chip's templates: the GPU's SMs and SRAM
  // still size the tiles, the target's compute capability picks templates.
  if (target.computeCapability < model->computeCapability()) {
    model->ccMajor = target.computeCapability / 10;
    model->ccMinor = target.computeCapability % 10;
  }
  return model;
}

namespace {
autotune::HeuristicOptions optionsForSeqlen(int64_t seqlen) {
  autotune::HeuristicOptions options;
  options.shape = autotune::shapeForSeqlen(seqlen);
  return options;
}
} // namespace

llvm::Expected<autotune::Choice> explainTileConfig(const AttentionSpec &spec,
                                                   const Target &target,
                                                   llvm::StringRef device,
                                                   int64_t seqlen) {
  auto model = heuristicDeviceModel(target, device);
  if (!model)
    return model.takeError();
  return autotune::chooseConfig(spec, *model, optionsForSeqlen(seqlen));
}

llvm::Expected<autotune::Choice>
explainFamilyChoice(const AttentionSpec &spec, const Target &target,
                    llvm::StringRef device, llvm::StringRef family,
                    int64_t seqlen) {
  auto tmpl = findTemplate(family);
  if (!tmpl)
    return tmpl.takeError();
  if (auto err = (*tmpl)->supports(spec, target))
    return std::move(err);
  auto model = heuristicDeviceModel(target, device);
  if (!model)
    return model.takeError();
  return autotune::chooseConfigForTemplate(**tmpl, spec, *model,
                                           optionsForSeqlen(seqlen));
}

llvm::Expected<TileConfig> chooseTileConfig(const AttentionSpec &spec,
                                            const Target &target,
                                            llvm::StringRef device,
                                            int64_t seqlen) {
  auto choice = explainTileConfig(spec, target, device, seqlen);
  if (!choice)
    return choice.takeError();
  return choice->config;
}

} // namespace flashjit
