//===- MmaSyncForwardConfig.cpp - what the mma_sync template supports -----===//
// Why: the autotuner needs the template's limits and resource use without
// building IR; this file holds them apart from the IR builder.
#include "flashjit/Templates/MmaSyncForward.h"

#include "llvm/Support/FormatVariadic.h"

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
  if (config.stages != 2)
    return configError(
        llvm::formatv("stages must be 2 (V of a tile loads while its scores "
                      "compute, the next K while P V computes), got {0}",
                      config.stages)
            .str());
  if (config.warps < 1 || config.blockM != config.warps * kRowsPerWarp)
    return configError(
        llvm::formatv("each warp owns {0} query rows: block_m {1} needs {2} "
                      "warps, not {3}",
                      kRowsPerWarp, config.blockM,
                      config.blockM / kRowsPerWarp, config.warps)
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
  // Q tile, one K tile and one V tile, each row padded by 8 elements.
  int64_t rowBytes = (spec.headDim + kRowPadding) * dtypeBytes(spec.dtype);
  r.sharedMemoryBytes = static_cast<unsigned>(
      (config.blockM + 2 * config.blockN) * rowBytes);
  // Per thread: O accumulator D/2 f32, scores block_n/2 f32, Q fragments
  // D/4 registers, P fragments block_n/4, and about 36 for addresses,
  // the running max/sum and loop state.
  r.registersPerThread = static_cast<unsigned>(
      spec.headDim / 2 + config.blockN / 2 + spec.headDim / 4 +
      config.blockN / 4 + 36);
  return r;
}

std::vector<TileConfig>
MmaSyncForward::candidates(const AttentionSpec &spec) const {
  std::vector<TileConfig> out;
  for (int64_t blockM : {64, 128})
    for (int64_t blockN : {32, 64, 128}) {
      // Wide score tiles next to a wide accumulator run out of registers.
      if (spec.headDim >= 256 && blockN > 64)
        continue;
      out.push_back({family().str(), blockM, blockN, 2, blockM / kRowsPerWarp});
    }
  return out;
}

} // namespace flashjit
