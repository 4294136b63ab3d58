//===- WgmmaBackwardConfig.cpp - what the wgmma backward supports ---------===//
// Why: the runtime checks configs and sizes the main kernel's block
// without building IR; the template's limits and its shared layout's size
// live here, apart from the IR builder (WgmmaBackwardMain.cpp).
#include "flashjit/Templates/WgmmaBackward.h"

#include "flashjit/Templates/MmaSyncBackward.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError("wgmma_bwd: " + message.str());
}

} // namespace

llvm::Error WgmmaBackward::supports(const AttentionSpec &spec,
                                    const Target &target) {
  if (auto err = checkHeadDimAndTarget(spec, target, headDims(), family(),
                                       kComputeCapability))
    return err;
  if (!target.archSpecific || target.computeCapability != kComputeCapability)
    return llvm::createStringError(
        llvm::formatv("the {0} template needs the arch-specific target "
                      "sm_90a, not {1}",
                      family(), target.chip)
            .str());
  // The rest of the spec (windows, mods, block masks, varlen) it builds
  // as MmaSyncBackward::supports says.
  return llvm::Error::success();
}

llvm::Error WgmmaBackward::checkConfig(const AttentionSpec &spec,
                                       const TileConfig &config) {
  if (!owns(config))
    return configError(llvm::formatv("config family '{0}' given to it",
                                     config.family)
                           .str());
  if (config.blockN != kBlockN || config.warps != kWarps)
    return configError(
        llvm::formatv("two warpgroups own 64 key rows each: block_n must be "
                      "{0} and warps {1}, got block_n {2} and {3} warps",
                      kBlockN, kWarps, config.blockN, config.warps)
            .str());
  if (config.stages < 1 || config.stages > 3)
    return configError(
        llvm::formatv("stages must be 1 (one Q and dO buffer), 2 or 3 (the "
                      "next one or two query blocks load during this one), "
                      "got {0}",
                      config.stages)
            .str());
  const bool wide = config.blockM == 128 && spec.headDim == 64;
  if (config.blockM != 64 && !wide)
    return configError(
        llvm::formatv("block_m must be 64, or 128 at head dim 64 (dK, dV, "
                      "S^T and dP^T share 255 registers), got {0} at head "
                      "dim {1}",
                      config.blockM, spec.headDim)
            .str());
  const unsigned bytes = resources(spec, config).sharedMemoryBytes;
  if (bytes > kMaxSharedBytes)
    return configError(
        llvm::formatv("{0} stages at block_m {1}, head dim {2} need {3} bytes "
                      "of shared memory, more than sm_90a's {4}: use fewer "
                      "stages",
                      config.stages, config.blockM, spec.headDim, bytes,
                      kMaxSharedBytes)
            .str());
  return llvm::Error::success();
}

TemplateResources WgmmaBackward::resources(const AttentionSpec &spec,
                                           const TileConfig &config) {
  TemplateResources r;
  r.threadsPerBlock = static_cast<unsigned>(config.warps * 32);
  const int64_t tileRow = spec.headDim * dtypeBytes(spec.dtype);
  // 1024 bytes of alignment slack; K and V; per stage Q and dO, then dS^T
  // [block_n][block_m]; per stage the query rows' LSE and D (f32); the dQ
  // staging rows (f32 [block_m][d], padded); an mbarrier per stage; with
  // a mask_mod, 16-byte aligned, 4 bytes per query of a step per warp
  // (the mask_mod's staged reads).
  int64_t bytes = 1024 + 2 * config.blockN * tileRow +
                  config.stages * 2 * config.blockM * tileRow +
                  config.blockN * config.blockM * 2 +
                  config.stages * 2 * config.blockM * 4 +
                  config.blockM * (spec.headDim * 4 + kDqRowPadding) +
                  config.stages * 8;
  if (!spec.maskMod.empty())
    bytes = (bytes + 15) / 16 * 16 + config.warps * config.blockM * 4;
  r.sharedMemoryBytes = static_cast<unsigned>(bytes);
  // dK and dV (d / 2 f32 each), S^T and dP^T (block_m / 2 each).
  r.registersPerThread =
      static_cast<unsigned>(spec.headDim + config.blockM + 40);
  r.queryRowsPerWarp = 16;
  return r;
}

std::vector<TileConfig> WgmmaBackward::candidates(const AttentionSpec &spec) {
  std::vector<TileConfig> out;
  out.push_back(defaultConfig(spec));
  for (int64_t blockM : {64, 128})
    for (int64_t stages : {1, 2, 3}) {
      TileConfig c{family().str(), blockM, kBlockN, stages, kWarps};
      if (llvm::Error err = checkConfig(spec, c))
        llvm::consumeError(std::move(err));
      else if (c != out.front())
        out.push_back(c);
    }
  return out;
}

TileConfig WgmmaBackward::defaultConfig(const AttentionSpec &spec) {
  // Head dim 64: 128 query rows per step halve the steps (and their
  // barriers) for the same registers as 64 rows at head dim 128, and ran
  // faster than 64 rows on an H100 (docs/backward.md).
  return {family().str(), spec.headDim == 64 ? 128 : 64, kBlockN, 2, kWarps};
}

} // namespace flashjit
