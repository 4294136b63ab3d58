//===- WgmmaForwardConfig.cpp - what the wgmma template supports ----------===//
// Why: the autotuner needs the template's limits and resource use without
// building IR; this file holds them apart from the IR builder.
#include "flashjit/Templates/WgmmaForward.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace flashjit {
namespace {

llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError("wgmma: " + message.str());
}

/// Registers a consumer thread needs beyond its accumulators: row state,
/// descriptors, addresses and loop state (fitted to ptxas -v, CUDA 13.0).
constexpr int64_t kConsumerOverhead = 32;
/// Widest K/V tile: S, O and P must fit the consumers' registers (the
/// estimate below checks that per config); past 192 keys nothing fits.
constexpr int64_t kMaxBlockN = 192;
/// Shared memory beyond the tiles: slack to align the base to the 1024
/// bytes of the 128-byte swizzle pattern, then the mbarriers.
constexpr int64_t kAlignSlack = 1024;
/// Dynamic shared memory a block may opt into on sm_90 (H100, H200).
constexpr int64_t kMaxSharedBytes = 232448;
/// An SM's shared memory on sm_90, and what the hardware keeps of it per
/// resident block.
constexpr int64_t kSharedPerSM = 233472, kReservedPerBlock = 1024;
constexpr int64_t kBarrierBytes = 8;

int64_t consumersOf(const TileConfig &config) {
  return config.blockM / WgmmaForward::kRowsPerWarpgroup;
}

/// Registers per thread at entry: the block's share of the register file
/// (WgmmaForward::blocksPerSM), in multiples of 8.
int64_t entryRegisters(int64_t threads, int64_t blocks) {
  return std::min<int64_t>(255, (65536 / (threads * blocks)) & ~int64_t(7));
}

/// The most dynamic shared memory one block may take so that `blocks` of
/// them fit an SM.
int64_t sharedLimit(int64_t blocks) {
  return std::min(kMaxSharedBytes, kSharedPerSM / blocks - kReservedPerBlock);
}

/// What a persistent causal consumer keeps beyond kConsumerOverhead: its
/// tile's rows and K/V tile count. Fitted as kConsumerOverhead is: head dim
/// 64 m192 n128 (an estimate of 160, 160 available) spilled 108 bytes.
constexpr int64_t kPersistentCausalOverhead = 4;
/// What a persistent varlen consumer keeps beyond that: its tile's sequence
/// (row bases, lengths, the narrowed pointers). Fitted the same way: head
/// dim 128 block_n 176 (an estimate of 228, 240 available) spilled 48
/// bytes, block_n 160 none. Paged, the block table's row besides: head dim
/// 64 causal block_m 192 block_n 96 spilled 16 bytes.
constexpr int64_t kPersistentVarlenOverhead = 16, kPersistentPagedOverhead = 8;

/// Per consumer thread: S (block_n/2 f32), O (D/2 f32) and the previous
/// tile's P, packed (block_n/4), are live together in the pipeline.
int64_t consumerEstimate(const AttentionSpec &spec, const TileConfig &config,
                         bool persistent) {
  int64_t estimate = config.blockN / 2 + spec.headDim / 2 +
                     config.blockN / 4 + kConsumerOverhead;
  if (persistent && spec.hasStructuralMask())
    estimate += kPersistentCausalOverhead;
  if (persistent && spec.varlen)
    estimate += kPersistentVarlenOverhead;
  if (persistent && spec.paged())
    estimate += kPersistentPagedOverhead;
  return estimate;
}

} // namespace

// The producer's loops fit 24 registers with two consumers and 32 with
// three, the persistent tile loop too: it recomputes its shared addresses
// and the tile order's values for each tile rather than keeping them
// (WgmmaProducer.cpp, WgmmaPersistent.cpp). Causal with two consumers, its
// per-tile K/V count and GQA's kv head still spill below 40 (ptxas, CUDA
// 13.0), as does a varlen producer's sequence search and rows (`causal` is
// passed set for varlen too).
unsigned WgmmaForward::producerRegisters(int64_t consumers, bool persistent,
                                         bool causal) {
  if (consumers >= 3)
    return 32;
  return persistent && causal ? 40 : 24;
}
int64_t WgmmaForward::blocksPerSM(int64_t consumers) {
  return consumers == 1 ? 2 : 1;
}

// What the producer leaves of the block's registers at entry, split among
// the consumers in multiples of 8: 240 for two (232 beside a 40-register
// producer), 160 for three, 232 for one (two blocks per SM, 128 at entry).
unsigned WgmmaForward::consumerRegisters(int64_t consumers, bool persistent,
                                         bool causal) {
  int64_t threads = (consumers + 1) * kWarpsPerWarpgroup * 32;
  int64_t pool = entryRegisters(threads, blocksPerSM(consumers)) * threads -
                 kWarpsPerWarpgroup * 32 *
                     producerRegisters(consumers, persistent, causal);
  return static_cast<unsigned>((pool / (consumers * kWarpsPerWarpgroup * 32)) &
                               ~int64_t(7));
}

WgmmaForward::SharedLayout
WgmmaForward::sharedLayout(const AttentionSpec &spec, const TileConfig &config,
                           bool persistent) {
  const int64_t rowBytes = spec.headDim * dtypeBytes(spec.dtype);
  const int64_t qBytes = config.blockM * rowBytes;
  const int64_t kvBytes = config.stages * config.blockN * rowBytes;
  const int64_t consumers = consumersOf(config);
  // Per Q tile: Q full and Q empty per consumer; then K full, V full, K
  // empty and V empty per K/V slot. A tile record per consumer and Q tile.
  auto barrierBytes = [&](int64_t qBuffers) {
    return (2 * consumers * qBuffers + 4 * config.stages) * kBarrierBytes;
  };
  auto recordBytes = [&](int64_t qBuffers) {
    return consumers * qBuffers * WgmmaForward::recordBytes(spec);
  };
  // A mask_mod's staged key-column reads: a tile's columns per consumer
  // warp, 16-byte aligned.
  const int64_t maskColumnBytes =
      spec.maskMod.empty()
          ? 0
          : consumers * kWarpsPerWarpgroup * config.blockN * 4 + 12;
  // Bytes of the whole block with `qBuffers` Q tiles and O staged apart.
  auto apartBytes = [&](int64_t qBuffers) {
    return kAlignSlack + (qBuffers + 1) * qBytes + 2 * kvBytes +
           barrierBytes(qBuffers) + recordBytes(qBuffers) + maskColumnBytes;
  };
  const int64_t limit = sharedLimit(blocksPerSM(consumers));
  SharedLayout l;
  l.outputApart = persistent && apartBytes(1) <= limit;
  // A second Q tile pays at head dim 64, where a tile's products are short
  // beside its Q load and epilogue; at head dim 128 it does not
  // (docs/performance.md, two Q tiles per consumer).
  l.qBuffers =
      l.outputApart && spec.headDim <= 64 && apartBytes(2) <= limit ? 2 : 1;
  l.k = l.qBuffers * qBytes;
  l.v = l.k + kvBytes;
  l.o = l.v + kvBytes;
  l.barriers = l.o + (l.outputApart ? qBytes : 0);
  l.records = l.barriers + barrierBytes(l.qBuffers);
  l.maskColumns = (l.records + recordBytes(l.qBuffers) + 15) / 16 * 16;
  l.bytes = kAlignSlack + l.records + recordBytes(l.qBuffers) + maskColumnBytes;
  return l;
}

bool WgmmaForward::stagesOutputApart(const AttentionSpec &spec,
                                     const TileConfig &config,
                                     bool persistent) {
  return sharedLayout(spec, config, persistent).outputApart;
}

std::optional<TensorMapBoxes>
WgmmaForward::tensorMapBoxes(const AttentionSpec &spec,
                             const TileConfig &config) const {
  TensorMapBoxes boxes;
  // Each consumer warpgroup loads its own 64 rows of Q.
  boxes.qRows = static_cast<unsigned>(kRowsPerWarpgroup);
  // In a cluster each block loads its share of the K/V tile rows for all.
  boxes.kvRows = static_cast<unsigned>(config.blockN / clusterSize());
  // Paged K/V: one box per page the tile spans (tmaLoadPagedTile).
  if (spec.paged())
    boxes.kvRows = std::min<unsigned>(boxes.kvRows, spec.pageSize);
  // Each consumer warpgroup stores its own 64 rows of O.
  boxes.oRows = static_cast<unsigned>(kRowsPerWarpgroup);
  boxes.cols = static_cast<unsigned>(kPanelCols);
  return boxes;
}

llvm::Error WgmmaForward::checkConfig(const AttentionSpec &spec,
                                      const TileConfig &config) const {
  if (config.family != family())
    return configError(llvm::formatv("config family '{0}' given to it",
                                     config.family)
                           .str());
  if (auto err = checkSparseTile(spec, config))
    return err;
  if (dtypeBytes(spec.dtype) != 2)
    return configError("only 2-byte elements (f16, bf16) are supported");
  int64_t consumers = consumersOf(config);
  if (config.blockM % kRowsPerWarpgroup != 0 || consumers < 1 ||
      consumers > 3)
    return configError(
        llvm::formatv("block_m must be 64, 128 or 192 (one to three consumer "
                      "warpgroups of 64 query rows), got {0}",
                      config.blockM)
            .str());
  if (config.warps != (consumers + 1) * kWarpsPerWarpgroup)
    return configError(
        llvm::formatv("block_m {0} has {1} consumer warpgroups and one "
                      "producer: warps must be {2}, got {3}",
                      config.blockM, consumers,
                      (consumers + 1) * kWarpsPerWarpgroup, config.warps)
            .str());
  if (config.blockN < 16 || config.blockN > kMaxBlockN ||
      config.blockN % 16 != 0)
    return configError(
        llvm::formatv("block_n must be a multiple of 16 from 16 to {0}, got "
                      "{1}",
                      kMaxBlockN, config.blockN)
            .str());
  if (spec.paged() && config.blockN % spec.pageSize != 0 &&
      spec.pageSize % config.blockN != 0)
    return configError(
        llvm::formatv("block_n {0} and pages of {1} tokens: a K/V tile must "
                      "hold whole pages or lie in one page (block_n a "
                      "multiple or a divisor of the page size)",
                      config.blockN, spec.pageSize)
            .str());
  if (Kind == Grid::Cluster && spec.hasStructuralMask())
    return configError(
        "a cluster's blocks share every K/V tile, so both need the same "
        "K/V tiles, which causal query blocks do not: use wgmma_persistent "
        "for causal attention and windows");
  if (config.stages < 1 || config.stages > 4)
    return configError(
        llvm::formatv("stages (K/V buffers in the ring) must be 1 to 4, got "
                      "{0}",
                      config.stages)
            .str());
  int64_t shared = resources(spec, config).sharedMemoryBytes;
  const int64_t blocks = blocksPerSM(consumers);
  if (shared > sharedLimit(blocks))
    return configError(
        llvm::formatv("block_m {0}, block_n {1} and {2} stages with head dim "
                      "{3} need {4} bytes of shared memory; sm_90 allows at "
                      "most {5} per block{6}: use a smaller block_n or fewer "
                      "stages",
                      config.blockM, config.blockN, config.stages,
                      spec.headDim, shared, sharedLimit(blocks),
                      blocks > 1 ? " when two share an SM (block_m 64 runs "
                                   "two blocks per SM)"
                                 : "")
            .str());
  int64_t estimate = consumerEstimate(spec, config, persistent());
  unsigned available =
      consumerRegisters(consumers, persistent(),
                        spec.hasStructuralMask() || spec.varlen);
  if (estimate > available)
    return configError(
        llvm::formatv("block_n {0} with head dim {1} needs about {2} "
                      "registers per consumer thread, more than the {3} "
                      "that {4} consumer warpgroups get",
                      config.blockN, spec.headDim, estimate,
                      available, consumers)
            .str());
  return llvm::Error::success();
}

TemplateResources WgmmaForward::resources(const AttentionSpec &spec,
                                          const TileConfig &config) const {
  TemplateResources r;
  r.threadsPerBlock = static_cast<unsigned>(config.warps * 32);
  r.sharedMemoryBytes =
      static_cast<unsigned>(sharedLayout(spec, config, persistent()).bytes);
  // At entry every thread has the block's share of the register file
  // (blocksPerSM); setmaxnreg then moves registers from the producer to
  // the consumers.
  r.registersPerThread = static_cast<unsigned>(entryRegisters(
      r.threadsPerBlock, blocksPerSM(consumersOf(config))));
  r.queryRowsPerWarp = static_cast<unsigned>(kRowsPerWarpgroup /
                                             kWarpsPerWarpgroup);
  r.softmaxWarpgroups = static_cast<unsigned>(consumersOf(config));
  return r;
}

std::vector<TileConfig>
WgmmaForward::candidates(const AttentionSpec &spec) const {
  // Two consumer warpgroups (block_m 128), and for head dim 64 three
  // (block_m 192, 160 registers each: FlashAttention-3's tile there, the
  // faster), with two stages of K/V.
  // The persistent grid without a mask only with O staged apart
  // (WgmmaForward.h), or varlen (its O goes out through bounded stores,
  // not staged); below head dim 128 the heuristic ranks it first for
  // short sequences alone (its LengthGrid rule).
  // Clusters share K/V without a mask only, and from head dim 128 (with the
  // persistent kernel's configs): at sustained clocks an H100 runs at its
  // power cap, and the K/V bytes L2 sends to the SMs cost power; halving
  // them gains most at head dim 128 (docs/performance.md).
  // At head dim 128 the persistent grid offers three consumers (block_n
  // 64 or 80, all that 160 registers hold) where the score_mod spends the
  // special-function unit and nothing bounds the keys on the right: its
  // tanh and the softmax's ex2 keep that unit as busy as the products,
  // and a third warpgroup's products run under two softmaxes
  // (ScoreModCost.cpp; a causal kernel's diagonal tiles gained nothing),
  // and for plain attention (plainHeadDim128), whose softmax alone is
  // enough for the third warpgroup to pay from 4k (docs/performance.md).
  std::vector<TileConfig> out;
  if (Kind == Grid::Cluster &&
      (spec.hasStructuralMask() || spec.headDim < 128))
    return out;
  const bool threeConsumers128 =
      Kind == Grid::Persistent &&
      (specialFunctionBound(spec) || plainHeadDim128(spec));
  for (int64_t consumers : {2, 3}) {
    if (consumers == 3 && spec.headDim != 64 && !threeConsumers128)
      continue;
    const std::vector<int64_t> widths =
        consumers == 3 && spec.headDim == 128
            ? std::vector<int64_t>{64, 80}
            : std::vector<int64_t>{64, 96, 128, 160, 176};
    for (int64_t blockN : widths) {
      TileConfig config{family().str(), consumers * kRowsPerWarpgroup, blockN,
                        /*stages=*/2, (consumers + 1) * kWarpsPerWarpgroup};
      if (auto err = checkConfig(spec, config)) {
        llvm::consumeError(std::move(err));
        continue;
      }
      if (persistent() && !spec.hasStructuralMask() && !spec.varlen &&
          !stagesOutputApart(spec, config, persistent()))
        continue;
      out.push_back(config);
    }
  }
  return out;
}

bool plainHeadDim128(const AttentionSpec &spec) {
  return spec.headDim == 128 && !spec.hasStructuralMask() &&
         spec.scoreMod.empty() && spec.maskMod.empty() && !spec.varlen;
}

} // namespace flashjit
