//===- TemplateRegistry.cpp - the list of kernel families -----------------===//
// Why: one place lists the templates, so the autotuner and the compiler see
// the same set; the checks every template shares (supports, build) live
// here too. Measurement-only families are not listed: the developer tools
// register them (TemplateRegistration.h).
#include "flashjit/Templates/CudaCoreForward.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/MmaSyncForward.h"
#include "flashjit/Templates/TemplateRegistration.h"
#include "flashjit/Templates/WgmmaForward.h"

#include "mlir/IR/Location.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <atomic>

namespace flashjit {

const std::vector<const KernelTemplate *> &allTemplates() {
  // In order of preference (the heuristic's first rule): the wgmma kernel
  // in clusters offers candidates without a mask from head dim 128, the
  // persistent one for causal attention and without a mask from head dim
  // 128 (WgmmaForward.h).
  static const WgmmaForward wgmmaCluster(WgmmaForward::Grid::Cluster);
  static const WgmmaForward wgmmaPersistent(WgmmaForward::Grid::Persistent);
  static const WgmmaForward wgmma;
  static const MmaSyncForward mmaSync;
  static const CudaCoreForward cudaCore;
  static const std::vector<const KernelTemplate *> templates = {
      &wgmmaCluster, &wgmmaPersistent, &wgmma, &mmaSync, &cudaCore};
  return templates;
}

namespace {
/// The registered measurement-only templates, newest first: a list that
/// only grows, so lookups read it without a lock.
struct Registered {
  const KernelTemplate *tmpl;
  const Registered *next;
};
std::atomic<const Registered *> measurementTemplates{nullptr};
} // namespace

void registerMeasurementTemplate(const KernelTemplate &tmpl) {
  const Registered *head = measurementTemplates.load();
  auto *node = new Registered{&tmpl, head};
  do {
    for (const Registered *r = head; r; r = r->next)
      if (r->tmpl == &tmpl) {
        delete node;
        return;
      }
    node->next = head;
  } while (!measurementTemplates.compare_exchange_weak(head, node));
}

llvm::Error checkHeadDimAndTarget(const AttentionSpec &spec,
                                  const Target &target,
                                  llvm::ArrayRef<int64_t> dims,
                                  llvm::StringRef family,
                                  int minComputeCapability) {
  if (auto err = spec.validate())
    return err;
  if (!llvm::is_contained(dims, spec.headDim)) {
    std::vector<std::string> names;
    for (int64_t d : dims)
      names.push_back(std::to_string(d));
    return llvm::createStringError(
        llvm::formatv("head dim {0} is not supported by the {1} template: "
                      "supported head dims are {2}",
                      spec.headDim, family, llvm::join(names, ", "))
            .str());
  }
  if (target.computeCapability < minComputeCapability)
    return llvm::createStringError(
        llvm::formatv("the {0} template needs sm_{1} or newer, not {2}",
                      family, minComputeCapability, target.chip)
            .str());
  return llvm::Error::success();
}

llvm::Error KernelTemplate::supports(const AttentionSpec &spec,
                                    const Target &target) const {
  if (auto err = checkHeadDimAndTarget(spec, target, headDims(), family(),
                                       minComputeCapability()))
    return err;
  if (needsArchSpecificTarget() &&
      (!target.archSpecific ||
       target.computeCapability != minComputeCapability()))
    return llvm::createStringError(
        llvm::formatv("the {0} template needs the arch-specific target "
                      "sm_{1}a, not {2}",
                      family(), minComputeCapability(), target.chip)
            .str());
  if (spec.varlen && !supportsVarlen())
    return llvm::createStringError(
        llvm::formatv("the {0} template does not build varlen kernels: use "
                      "wgmma or mma_sync",
                      family())
            .str());
  return llvm::Error::success();
}

llvm::Error KernelTemplate::build(mlir::OpBuilder &builder, mlir::Location loc,
                                  const AttentionSpec &spec,
                                  const TileConfig &config,
                                  llvm::StringRef name,
                                  const ModRegions &mods) const {
  if (auto err = checkConfig(spec, config))
    return err;
  if (spec.hasMods() != (mods.scoreMod || mods.maskMod))
    return llvm::createStringError(
        "the spec's score_mod/mask_mod and the regions given to the template "
        "disagree (a flashjit bug: please report it)");
  emit(builder, loc, spec, config, name, mods);
  return llvm::Error::success();
}

const KernelTemplate *lookupTemplate(llvm::StringRef family) {
  for (const KernelTemplate *t : allTemplates())
    if (t->family() == family)
      return t;
  for (const Registered *r = measurementTemplates.load(); r; r = r->next)
    if (r->tmpl->family() == family)
      return r->tmpl;
  return nullptr;
}

llvm::Expected<const KernelTemplate *> findTemplate(llvm::StringRef family) {
  if (const KernelTemplate *t = lookupTemplate(family))
    return t;
  std::vector<std::string> names;
  for (const KernelTemplate *t : allTemplates())
    names.push_back(t->family().str());
  return llvm::createStringError(
      llvm::formatv("unknown kernel family '{0}': expected one of {1}",
                    family, llvm::join(names, ", "))
          .str());
}

llvm::Error checkSparseTile(const AttentionSpec &spec,
                            const TileConfig &config) {
  if (!spec.isBlockSparse() || (spec.sparseBlockM % config.blockM == 0 &&
                                spec.sparseBlockN % config.blockN == 0))
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::formatv("tile {0} x {1} does not divide the sparse block {2} x "
                    "{3}: a block-sparse kernel's block_m and block_n divide "
                    "the block mask's (use a tile that does, or a coarser "
                    "mask block)",
                    config.blockM, config.blockN, spec.sparseBlockM,
                    spec.sparseBlockN)
          .str());
}

unsigned clusterSizeOf(const TileConfig &config) {
  const KernelTemplate *t = lookupTemplate(config.family);
  return t ? t->clusterSize() : 1;
}

} // namespace flashjit
