//===- CudaCoreForwardConfig.cpp - what the CUDA-core template supports ---===//
// Why: the autotuner needs the template's limits and resource use without
// building IR; this file holds them apart from the IR builder.
#include "flashjit/Templates/CudaCoreForward.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

namespace flashjit {

llvm::Error CudaCoreForward::checkConfig(const AttentionSpec &spec,
                                         const TileConfig &config) const {
  if (config.family != family())
    return llvm::createStringError(
        llvm::formatv("config family '{0}' given to the cuda_core template",
                      config.family)
            .str());
  if (auto err = checkSparseTile(spec, config))
    return err;
  if (!llvm::isPowerOf2_64(config.blockM))
    return llvm::createStringError(
        llvm::formatv("cuda_core needs a power-of-two block_m, got {0}",
                      config.blockM)
            .str());
  TemplateResources r = resources(spec, config);
  if (config.stages != 1)
    return llvm::createStringError(
        llvm::formatv("cuda_core supports stages = 1, got {0}", config.stages)
            .str());
  if (r.threadsPerBlock > 1024 || r.threadsPerBlock < 32)
    return llvm::createStringError(
        llvm::formatv("block_m {0} with head dim {1} needs {2} threads; a "
                      "block holds 32 to 1024",
                      config.blockM, spec.headDim, r.threadsPerBlock)
            .str());
  if (config.warps * 32 != static_cast<int64_t>(r.threadsPerBlock))
    return llvm::createStringError(
        llvm::formatv("cuda_core with block_m {0} and head dim {1} runs {2} "
                      "warps, not {3}",
                      config.blockM, spec.headDim, r.threadsPerBlock / 32,
                      config.warps)
            .str());
  if (config.blockN > 128)
    return llvm::createStringError(
        llvm::formatv("cuda_core keeps a row of block_n scores in registers: "
                      "block_n must be at most 128, got {0}",
                      config.blockN)
            .str());
  return llvm::Error::success();
}

TemplateResources CudaCoreForward::resources(const AttentionSpec &spec,
                                             const TileConfig &config) const {
  TemplateResources r;
  int64_t threadsPerRow = spec.headDim / kSliceWidth;
  r.threadsPerBlock = static_cast<unsigned>(config.blockM * threadsPerRow);
  r.queryRowsPerWarp = static_cast<unsigned>(32 / threadsPerRow);
  // One K and one V tile per stage, block_n rows; each row stores its
  // head_dim/32 slices 40 elements apart (8 elements of bank padding).
  r.sharedMemoryBytes = static_cast<unsigned>(
      config.stages * 2 * config.blockN * threadsPerRow * kSharedSliceStride *
      dtypeBytes(spec.dtype));
  // Q slice and accumulator slice (32 f32 each), a row of scores, and about
  // 40 for addresses, the running max/sum and loop state.
  r.registersPerThread =
      static_cast<unsigned>(2 * kSliceWidth + config.blockN + 40);
  return r;
}

std::vector<TileConfig>
CudaCoreForward::candidates(const AttentionSpec &spec) const {
  std::vector<TileConfig> out;
  int64_t threadsPerRow = spec.headDim / kSliceWidth;
  for (int64_t blockM : {32, 64, 128})
    for (int64_t blockN : {16, 32, 64}) {
      int64_t threads = blockM * threadsPerRow;
      if (threads < 32 || threads > 1024)
        continue;
      out.push_back({family().str(), blockM, blockN, 1, threads / 32});
    }
  return out;
}

} // namespace flashjit
