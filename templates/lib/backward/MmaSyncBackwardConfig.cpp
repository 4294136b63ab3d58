//===- MmaSyncBackwardConfig.cpp - what the backward template supports ----===//
// Why: the runtime sizes workspaces, checks configs and launches the three
// backward kernels without building IR; their ABI (parameter pointers,
// grids, workspace layout) and the template's limits live here, apart
// from the IR builders.
#include "flashjit/Templates/MmaSyncBackward.h"

#include "flashjit/Templates/MmaSyncForward.h"
#include "flashjit/Templates/WgmmaBackward.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

namespace flashjit {
namespace {

llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError("mma_sync_bwd: " + message.str());
}

uint64_t alignUp(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

unsigned ceilDiv(int64_t x, int64_t y) {
  return static_cast<unsigned>((x + y - 1) / y);
}

} // namespace

bool MmaSyncBackward::isDeterministic(const TileConfig &config) {
  return config.family == deterministicFamily() ||
         config.family == WgmmaBackward::deterministicFamily();
}

TileConfig MmaSyncBackward::withVariant(TileConfig config,
                                        bool deterministic) {
  if (WgmmaBackward::owns(config))
    config.family = (deterministic ? WgmmaBackward::deterministicFamily()
                                   : WgmmaBackward::family())
                        .str();
  else
    config.family = (deterministic ? deterministicFamily() : family()).str();
  return config;
}

BackwardKernelNames BackwardKernelNames::of(llvm::StringRef base) {
  return {(base + "_bwd_pre").str(), (base + "_bwd").str(),
          (base + "_bwd_dq").str()};
}

DqAccumLayout DqAccumLayout::of(const AttentionSpec &spec,
                               const TileConfig &config) {
  if (!WgmmaBackward::owns(config))
    return {spec.headDim, 1};
  return {spec.headDim + WgmmaBackward::kDqRowPadding /
                             static_cast<int64_t>(sizeof(float)),
          config.blockM, spec.varlen ? config.blockM : 0};
}

BackwardWorkspaceLayout BackwardWorkspaceLayout::of(const AttentionSpec &spec,
                                                    const TileConfig &config,
                                                    int64_t batch,
                                                    int64_t seqlenQ) {
  BackwardWorkspaceLayout w;
  const uint64_t heads = static_cast<uint64_t>(batch) * spec.numHeads;
  const uint64_t rows = heads * seqlenQ;
  const DqAccumLayout dq = DqAccumLayout::of(spec, config);
  w.dOffset = 0;
  w.dqAccumOffset = alignUp(rows * sizeof(float));
  w.totalBytes = w.dqAccumOffset +
                 alignUp(heads * dq.rowsPerHead(seqlenQ) *
                         static_cast<uint64_t>(dq.rowFloats) * sizeof(float));
  if (MmaSyncBackward::isDeterministic(config)) {
    w.turnsOffset = w.totalBytes;
    w.totalBytes +=
        alignUp(heads * ceilDiv(seqlenQ, config.blockM) * sizeof(int32_t));
  }
  return w;
}

std::array<void *, BackwardPreprocessArgs::kNumParams>
BackwardPreprocessArgs::paramPointers() {
  std::array<void *, kNumParams> p{};
  unsigned i = 0;
  p[i++] = &o;
  p[i++] = &dO;
  p[i++] = &d;
  p[i++] = &dqAccum;
  for (auto *strides : {&oStrides, &dOStrides})
    for (int64_t &s : *strides)
      p[i++] = &s;
  p[i++] = &seqlenQ;
  p[i++] = &turns;
  return p;
}

std::array<void *, BackwardMainArgs::kNumParams>
BackwardMainArgs::paramPointers() {
  std::array<void *, kNumParams> p{};
  unsigned i = 0;
  for (void *ptr : {static_cast<void *>(&q), static_cast<void *>(&k),
                    static_cast<void *>(&v), static_cast<void *>(&dO),
                    static_cast<void *>(&dk), static_cast<void *>(&dv),
                    static_cast<void *>(&lse), static_cast<void *>(&d),
                    static_cast<void *>(&dqAccum)})
    p[i++] = ptr;
  for (auto *strides : {&qStrides, &kStrides, &vStrides, &dOStrides,
                        &dkStrides, &dvStrides, &lseStrides})
    for (int64_t &s : *strides)
      p[i++] = &s;
  p[i++] = &seqlenQ;
  p[i++] = &seqlenK;
  p[i++] = &scaleLog2;
  p[i++] = &scale;
  p[i++] = &turns;
  return p;
}

std::array<void *, BackwardConvertArgs::kNumParams>
BackwardConvertArgs::paramPointers() {
  std::array<void *, kNumParams> p{};
  unsigned i = 0;
  p[i++] = &dqAccum;
  p[i++] = &dq;
  for (int64_t &s : dqStrides)
    p[i++] = &s;
  p[i++] = &seqlenQ;
  p[i++] = &scale;
  return p;
}

BackwardGeometry BackwardGeometry::of(const AttentionSpec &spec,
                                      const TileConfig &config, int64_t batch,
                                      int64_t seqlenQ, int64_t seqlenK) {
  BackwardGeometry g;
  const int64_t chunks = spec.headDim / 8;
  const int64_t lanesPerRow =
      static_cast<int64_t>(llvm::PowerOf2Ceil(static_cast<uint64_t>(chunks)));
  const int64_t rowsPerBlock = kBackwardAuxThreads / lanesPerRow;
  auto aux = [&](unsigned gridX) {
    LaunchGeometry l;
    l.gridX = gridX;
    l.gridY = static_cast<unsigned>(spec.numHeads);
    l.gridZ = static_cast<unsigned>(batch);
    l.blockX = kBackwardAuxThreads;
    return l;
  };
  g.preprocess = aux(ceilDiv(seqlenQ, rowsPerBlock));
  g.convert = aux(ceilDiv(seqlenQ * chunks, kBackwardAuxThreads));
  TemplateResources r = MmaSyncBackward::resources(spec, config);
  g.main.gridX = ceilDiv(seqlenK, config.blockN);
  g.main.gridY = static_cast<unsigned>(spec.numKVHeads);
  g.main.gridZ = static_cast<unsigned>(batch);
  g.main.blockX = r.threadsPerBlock;
  g.main.sharedMemoryBytes = r.sharedMemoryBytes;
  return g;
}

llvm::Error MmaSyncBackward::supports(const AttentionSpec &spec,
                                      const Target &target) {
  if (auto err = checkHeadDimAndTarget(spec, target, headDims(), family(),
                                       minComputeCapability()))
    return err;
  if (spec.paged())
    return llvm::createStringError(
        "the backward takes packed K and V (cu_seqlens_k), not a paged KV "
        "cache: compile the spec without a page size for training");
  // Packed sequences: only the wgmma kernels narrow each block to its
  // sequence (WgmmaBackwardMain.cpp).
  if (spec.varlen)
    if (llvm::Error err = WgmmaBackward::supports(spec, target))
      return llvm::createStringError(
          "the backward of varlen attention runs on the wgmma_bwd kernels "
          "only (sm_90a, head dims 64 and 128; or run it on padded [batch, "
          "heads, seqlen, head_dim] tensors): " +
          llvm::toString(std::move(err)));
  return llvm::Error::success();
}

llvm::Error MmaSyncBackward::checkConfig(const AttentionSpec &spec,
                                         const TileConfig &config) {
  if (spec.varlen && !WgmmaBackward::owns(config))
    return configError("the backward of varlen attention runs on the "
                       "wgmma_bwd kernels only (sm_90a, head dims 64 and "
                       "128)");
  if (spec.varlen && isDeterministic(config))
    return configError("the deterministic backward does not take varlen "
                       "batches yet: leave BackwardOptions::deterministic "
                       "off for a varlen spec");
  // dQ's turns (BackwardDqTurns.cpp) assume the key blocks that add into a
  // query block are a contiguous range of them, which a block mask breaks.
  if (isDeterministic(config) && spec.isBlockSparse())
    return configError(
        "the deterministic backward does not take block masks yet: leave "
        "BackwardOptions::deterministic off for a block-sparse spec");
  // A key block lies in one mask block, a query step in one.
  if (auto err = checkSparseTile(spec, config))
    return configError(llvm::toString(std::move(err)));
  if (WgmmaBackward::owns(config))
    return WgmmaBackward::checkConfig(spec, config);
  if (config.family != family() && !isDeterministic(config))
    return configError(llvm::formatv("config family '{0}' given to it (it "
                                     "builds {1}, {2}, {3} and {4})",
                                     config.family, family(),
                                     deterministicFamily(),
                                     WgmmaBackward::family(),
                                     WgmmaBackward::deterministicFamily())
                           .str());
  if (config.stages != 1 && config.stages != 2)
    return configError(
        llvm::formatv("stages must be 1 (one Q and dO buffer) or 2 (the "
                      "next query block loads during this one), got {0}",
                      config.stages)
            .str());
  const int64_t parts = kvColumnParts(spec);
  if (config.warps < parts || config.warps > 8 ||
      config.blockN * parts != config.warps * kKeyRowsPerWarp)
    return configError(
        llvm::formatv("each warp owns {0} key rows{1}: block_n must be 16 x "
                      "warps{2} with {3} to 8 warps, got block_n {4} and {5} "
                      "warps",
                      kKeyRowsPerWarp,
                      parts > 1 ? " and half of their dK, dV columns" : "",
                      parts > 1 ? " / 2" : "", parts, config.blockN,
                      config.warps)
            .str());
  if (config.blockM < 16 || config.blockM % 16 != 0 ||
      config.blockM > config.blockN ||
      !llvm::isPowerOf2_64(static_cast<uint64_t>(config.blockM)))
    return configError(
        llvm::formatv("block_m must be a power of two from 16 to block_n "
                      "({0}), got {1}",
                      config.blockN, config.blockM)
            .str());
  // dQ = dS K: warp w takes query m tile w % (block_m / 16) and one of
  // warps / (block_m / 16) equal column ranges, each two n8 tiles wide.
  const int64_t split = config.warps / (config.blockM / 16);
  if (config.warps % (config.blockM / 16) != 0 ||
      spec.headDim % (split * 16) != 0)
    return configError(
        llvm::formatv("dQ splits head dim {0} into {1} column ranges of a "
                      "multiple of 16: choose block_m so that warps / "
                      "(block_m / 16) divides head dim / 16",
                      spec.headDim, split)
            .str());
  return llvm::Error::success();
}

llvm::Error MmaSyncBackward::checkConfig(const AttentionSpec &spec,
                                         const TileConfig &config,
                                         const Target &target) {
  if (auto err = checkConfig(spec, config))
    return err;
  if (WgmmaBackward::owns(config))
    return WgmmaBackward::supports(spec, target);
  return llvm::Error::success();
}

TemplateResources MmaSyncBackward::resources(const AttentionSpec &spec,
                                             const TileConfig &config) {
  if (WgmmaBackward::owns(config))
    return WgmmaBackward::resources(spec, config);
  TemplateResources r;
  r.threadsPerBlock = static_cast<unsigned>(config.warps * 32);
  const int64_t eltBytes = dtypeBytes(spec.dtype);
  const int64_t rowBytes =
      (spec.headDim + MmaSyncForward::kRowPadding) * eltBytes;
  // K and V tiles; `stages` buffers of the Q and dO tiles and the query
  // rows' LSE and D (f32); dS^T [block_n][block_m + 8].
  // kvColumnParts > 1: P^T beside dS^T.
  const int64_t bytes =
      2 * config.blockN * rowBytes +
      config.stages * (2 * config.blockM * rowBytes + 2 * config.blockM * 4) +
      kvColumnParts(spec) * config.blockN *
          (config.blockM + MmaSyncForward::kRowPadding) * eltBytes;
  r.sharedMemoryBytes = static_cast<unsigned>(bytes);
  // dK and dV accumulators (d/2 f32 each, over the column parts), S^T
  // and dP^T (block_m/2 each).
  r.registersPerThread = static_cast<unsigned>(
      spec.headDim / kvColumnParts(spec) + config.blockM + 40);
  r.queryRowsPerWarp = static_cast<unsigned>(kKeyRowsPerWarp);
  return r;
}

std::vector<TileConfig> MmaSyncBackward::candidates(const AttentionSpec &spec) {
  std::vector<TileConfig> out;
  const TileConfig preferred = defaultConfig(spec);
  if (llvm::Error err = checkConfig(spec, preferred))
    llvm::consumeError(std::move(err));
  else
    out.push_back(preferred);
  // 64 query rows per step spill at head dim 128 and 96 with 4 warps
  // (defaultConfig), 128 at every head dim; at head dim 256 each warp
  // computes half of the columns of S^T and dP^T, and 64 rows fit.
  for (int64_t stages : {1, 2})
  for (int64_t warps : {4, 8})
    for (int64_t blockM : {32, 64}) {
      if (blockM == 64 && spec.headDim >= 96 && kvColumnParts(spec) == 1)
        continue;
      TileConfig c{family().str(), blockM,
                   warps * kKeyRowsPerWarp / kvColumnParts(spec), stages,
                   warps};
      if (llvm::Error err = checkConfig(spec, c))
        llvm::consumeError(std::move(err));
      else if (llvm::find(out, c) == out.end())
        out.push_back(c);
    }
  return out;
}

std::vector<TileConfig> MmaSyncBackward::candidates(const AttentionSpec &spec,
                                                    const Target &target) {
  std::vector<TileConfig> out;
  if (llvm::Error err = WgmmaBackward::supports(spec, target))
    llvm::consumeError(std::move(err));
  else
    for (TileConfig &c : WgmmaBackward::candidates(spec))
      if (llvm::Error err = checkConfig(spec, c))
        llvm::consumeError(std::move(err));
      else
        out.push_back(std::move(c));
  for (TileConfig &c : candidates(spec))
    out.push_back(std::move(c));
  return out;
}

TileConfig MmaSyncBackward::defaultConfig(const AttentionSpec &spec,
                                          const Target &target) {
  TileConfig preferred = defaultConfig(spec);
  if (llvm::Error err = WgmmaBackward::supports(spec, target))
    llvm::consumeError(std::move(err));
  else
    preferred = WgmmaBackward::defaultConfig(spec);
  // A block mask whose blocks the preferred tiles do not divide: the first
  // candidate whose tiles do (none: the preferred, which checkConfig then
  // refuses with the reason).
  if (llvm::Error err = checkConfig(spec, preferred)) {
    llvm::consumeError(std::move(err));
    std::vector<TileConfig> fitting = candidates(spec, target);
    if (!fitting.empty())
      return fitting.front();
  }
  return preferred;
}

TileConfig MmaSyncBackward::defaultConfig(const AttentionSpec &spec) {
  // 8 warps (128 keys per block) with the next query step loading during
  // this one were the fastest candidates on an H100 (docs/backward.md).
  // At head dim 128, 64 query rows per step keep S^T and dP^T (32 f32
  // each) beside dK and dV (64 each) and spill; 32 fit in 255 registers
  // (ptxas -v, sm_80 and sm_90a). Head dim 96 keeps 4 warps and 32 rows:
  // with 8 warps, 32 rows would split dQ's columns into ranges of 24
  // (checkConfig); 64 rows build without spills but have not run on a GPU.
  if (spec.headDim == 96)
    return {family().str(), 32, 64, 1, 4};
  // Head dim 256: 8 warps on 64 keys (two per key tile, kvColumnParts).
  if (spec.headDim == 256)
    return {family().str(), 32, 64, 2, 8};
  return {family().str(), spec.headDim >= 128 ? 32 : 64, 128, 2, 8};
}

KernelInfo MmaSyncBackward::mainKernelInfo(const AttentionSpec &spec,
                                           const TileConfig &config,
                                           llvm::StringRef baseName) {
  TemplateResources r = resources(spec, config);
  KernelInfo info;
  info.name = BackwardKernelNames::of(baseName).main;
  info.config = config;
  info.threadsPerBlock = r.threadsPerBlock;
  info.sharedMemoryBytes = r.sharedMemoryBytes;
  info.numHeads = spec.numHeads;
  return info;
}

} // namespace flashjit
