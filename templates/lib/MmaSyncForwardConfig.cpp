//===- MmaSyncForwardConfig.cpp - what the mma_sync template supports -----===//
// Why: the autotuner needs the template's limits and resource use without
// building IR; this file holds them apart from the IR builder.
#include "flashjit/Templates/MmaSyncForward.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

namespace flashjit {
namespace {

llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError("mma_sync: " + message.str());
}

} // namespace

llvm::Error MmaSyncForward::checkConfig(const AttentionSpec &spec,
                                        const TileConfig &config) const {
  if (config.family != family())
    return configError(llvm::formatv("config family '{0}' given to it",
                                     config.family)
                           .str());
  if (auto err = checkSparseTile(spec, config))
    return err;
  if (config.stages != 1 && config.stages != 2)
    return configError(
        llvm::formatv("stages must be 1 (one K/V buffer) or 2 (double-"
                      "buffered: the next tile loads while this one "
                      "computes), got {0}",
                      config.stages)
            .str());
  if (!llvm::isPowerOf2_64(config.blockM) ||
      !llvm::isPowerOf2_64(config.warps))
    return configError(
        llvm::formatv("block_m and warps must be powers of two, got block_m "
                      "{0} and {1} warps",
                      config.blockM, config.warps)
            .str());
  if (config.warps < 1 || (config.blockM != config.warps * kRowsPerTile &&
                           config.blockM != config.warps * 2 * kRowsPerTile))
    return configError(
        llvm::formatv("each warp owns {0} or {1} query rows: block_m {2} "
                      "needs {3} or {4} warps, not {5}",
                      kRowsPerTile, 2 * kRowsPerTile, config.blockM,
                      config.blockM / kRowsPerTile,
                      config.blockM / (2 * kRowsPerTile), config.warps)
            .str());
  if (config.warps > 16)
    return configError(
        llvm::formatv("at most 16 warps (block_m 256), got {0}", config.warps)
            .str());
  if (config.blockN < 16 || config.blockN > 128 || config.blockN % 16 != 0)
    return configError(
        llvm::formatv("block_n must be a multiple of 16 from 16 to 128, got "
                      "{0}",
                      config.blockN)
            .str());
  return llvm::Error::success();
}

TemplateResources MmaSyncForward::resources(const AttentionSpec &spec,
                                            const TileConfig &config) const {
  TemplateResources r;
  r.threadsPerBlock = static_cast<unsigned>(config.warps * 32);
  // Q tile, then `stages` buffers of a K and a V tile, each row padded by 8
  // elements.
  int64_t rowBytes = (spec.headDim + kRowPadding) * dtypeBytes(spec.dtype);
  r.sharedMemoryBytes = static_cast<unsigned>(
      (config.blockM + config.stages * 2 * config.blockN) * rowBytes);
  // Per thread: the O accumulators (D/2 f32 per m tile) and the scores
  // (block_n/2 f32 per m tile) dominate. One m tile also keeps Q in
  // registers (D/4) plus packed P (block_n/4) and about 36 for addresses
  // and loop state. Two m tiles re-read Q and need about 88 beyond the
  // accumulators; below 192 accumulator registers ptxas fits them in its
  // 255 without spilling on sm_80 and sm_90a; at 192 it spills on sm_80.
  // Fitted to ptxas -v (CUDA 13.0) for head dims 64/96/128/256, within 25
  // registers.
  int64_t mTiles = config.blockM / (config.warps * kRowsPerTile);
  r.queryRowsPerWarp = static_cast<unsigned>(mTiles * kRowsPerTile);
  int64_t accumulators = mTiles * (spec.headDim / 2 + config.blockN / 2);
  int64_t estimate =
      mTiles == 1
          ? accumulators + config.blockN / 4 + spec.headDim / 4 + 36
          : (accumulators < 192 ? std::min<int64_t>(255, accumulators + 88)
                                : accumulators + 88);
  r.registersPerThread = static_cast<unsigned>(estimate);
  return r;
}

std::vector<TileConfig>
MmaSyncForward::candidates(const AttentionSpec &spec) const {
  std::vector<TileConfig> out;
  for (int64_t blockM : {64, 128})
    for (int64_t blockN : {32, 48, 64, 128}) {
      // Wide score tiles next to a wide accumulator run out of registers.
      if (spec.headDim >= 256 && blockN > 64)
        continue;
      for (int64_t rowsPerWarp : {kRowsPerTile, 2 * kRowsPerTile})
        for (int64_t stages : {2, 1})
          out.push_back({family().str(), blockM, blockN, stages,
                         blockM / rowsPerWarp});
    }
  return out;
}

} // namespace flashjit
