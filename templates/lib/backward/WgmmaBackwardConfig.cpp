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
    return configError(
        llvm::formatv("config family '{0}' given to it", config.family).str());
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

WgmmaBackward::SharedLayout
WgmmaBackward::SharedLayout::of(const AttentionSpec &spec,
                                const TileConfig &config) {
  const int64_t row = spec.headDim * dtypeBytes(spec.dtype);
  const int64_t bM = config.blockM, bN = config.blockN;
  SharedLayout l;
  l.kOff = 0;
  l.vOff = bN * row;
  l.stageBytes = 2 * bM * row;
  l.qOff = 2 * bN * row;
  l.doOff = l.qOff + bM * row;
  l.dsOff = l.qOff + config.stages * l.stageBytes;
  l.lseOff = l.dsOff + bN * bM * 2;
  l.dOff = l.lseOff + bM * 4;
  l.smallStageBytes = 2 * bM * 4;
  l.dqOff = l.lseOff + config.stages * l.smallStageBytes;
  l.dqRowBytes = spec.headDim * 4 + kDqRowPadding;
  l.barOff = l.dqOff + bM * l.dqRowBytes;
  l.maskOff = (l.barOff + config.stages * 8 + 15) / 16 * 16;
  // 1024 bytes of alignment slack.
  l.bytes = 1024 + (spec.maskMod.empty() ? l.barOff + config.stages * 8
                                         : l.maskOff + config.warps * bM * 4);
  return l;
}

TemplateResources WgmmaBackward::resources(const AttentionSpec &spec,
                                           const TileConfig &config) {
  TemplateResources r;
  r.threadsPerBlock = static_cast<unsigned>(config.warps * 32);
  const int64_t bytes = SharedLayout::of(spec, config).bytes;
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
