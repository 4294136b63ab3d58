//===- DecodeConfig.cpp - decode spec, tiling, ABI and split rule ---------===//
// Why: see DecodeKernel.h. Everything here is plain C++ (no IR), so the
// runtime, the command line and the unit tests reason about a decode
// kernel without building it.
#include "flashjit/Templates/DecodeKernel.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

namespace flashjit {

llvm::Error DecodeSpec::validate() const {
  if (headDim != 64 && headDim != 128 && headDim != 256)
    return llvm::createStringError(
        llvm::formatv("decode supports head dims 64, 128 and 256, not {0}",
                      headDim)
            .str());
  if (numHeads < 1 || numKVHeads < 1 || numHeads % numKVHeads != 0)
    return llvm::createStringError(
        llvm::formatv("decode needs heads ({0}) a positive multiple of KV "
                      "heads ({1})",
                      numHeads, numKVHeads)
            .str());
  if (qLen < 1 || qLen > 16)
    return llvm::createStringError(
        llvm::formatv("decode takes 1 to 16 query tokens per sequence, not "
                      "{0} (use the forward kernels for prefill)",
                      qLen)
            .str());
  if (pageSize != 0 && (pageSize < 16 || pageSize > 256))
    return llvm::createStringError(
        llvm::formatv("the page size must be 0 (a contiguous cache) or 16 to "
                      "256 tokens, not {0}",
                      pageSize)
            .str());
  if (blockN != 0 && blockN != 32 && blockN != 64 && blockN != 128)
    return llvm::createStringError(
        llvm::formatv("the decode tile's keys (blockN) must be 0 (the "
                      "default), 32, 64 or 128, not {0}",
                      blockN)
            .str());
  if (stages != 0 && (stages < 2 || stages > 8))
    return llvm::createStringError(
        llvm::formatv("decode stages must be 0 (the default) or 2 to 8, not "
                      "{0}",
                      stages)
            .str());
  if (l2Prefetch != 0 && l2Prefetch != -1 && l2Prefetch != 64 &&
      l2Prefetch != 128 && l2Prefetch != 256)
    return llvm::createStringError(
        llvm::formatv("the L2 prefetch is 0 (the default), -1 (none), 64, "
                      "128 or 256 bytes, not {0}",
                      l2Prefetch)
            .str());
  if (copyMode < 0 || copyMode > 2)
    return llvm::createStringError(
        llvm::formatv("the decode copy mode is 0 (the default), 1 (cp.async) "
                      "or 2 (bulk copies, sm_90 and newer), not {0}",
                      copyMode)
            .str());
  if (evictFirst < -1 || evictFirst > 1)
    return llvm::createStringError(
        llvm::formatv("evictFirst is 0 (the default), -1 (normal) or 1 "
                      "(evict_first), not {0}",
                      evictFirst)
            .str());
  if (evictFirst > 0 && copyMode != 2)
    return llvm::createStringError(
        "the L2 evict_first hint (evictFirst 1) goes with bulk copies (copy "
        "mode 2) only: with per-thread cp.async at 2 stages it faulted on an "
        "H100 (docs/inference.md)");
  DecodeTiling t = decodeTiling(*this);
  if (t.keysPerWarp % 16 != 0)
    return llvm::createStringError(
        llvm::formatv("a tile of {0} keys over {1} warps gives each {2} keys, "
                      "not a multiple of 16: choose a larger blockN",
                      t.blockN, t.warpsN, t.keysPerWarp)
            .str());
  if (t.sharedBytes(*this) > 227 * 1024)
    return llvm::createStringError(
        llvm::formatv("{0} stages of {1} keys need {2} bytes of shared "
                      "memory, more than 227 KiB",
                      t.stages, t.blockN, t.sharedBytes(*this))
            .str());
  return llvm::Error::success();
}

std::string DecodeSpec::canonical() const {
  std::string text =
      llvm::formatv("decode;d={0};dtype={1};hq={2};hkv={3};q={4};"
                    "causal={5};page={6}",
                    headDim, dtypeName(dtype), numHeads, numKVHeads, qLen,
                    causal ? 1 : 0, pageSize)
          .str();
  if (blockN || stages || l2Prefetch)
    text +=
        llvm::formatv(";n={0};s={1};l2={2}", blockN, stages, l2Prefetch).str();
  if (copyMode || evictFirst)
    text += llvm::formatv(";copy={0};ef={1}", copyMode, evictFirst).str();
  return text;
}

std::string DecodeSpec::kernelName() const {
  std::string name =
      llvm::formatv("flashjit_decode_d{0}_{1}_h{2}_kv{3}_q{4}_c{5}_p{6}",
                    headDim, dtypeName(dtype), numHeads, numKVHeads, qLen,
                    causal ? 1 : 0, pageSize)
          .str();
  if (blockN || stages || l2Prefetch)
    name += llvm::formatv("_n{0}_s{1}_l{2}", blockN, stages,
                          l2Prefetch < 0 ? 0 : l2Prefetch)
                .str();
  if (copyMode || evictFirst)
    name += llvm::formatv("_c{0}_e{1}", copyMode, evictFirst + 1).str();
  return name;
}

AttentionSpec DecodeSpec::attentionSpec() const {
  AttentionSpec spec;
  spec.headDim = headDim;
  spec.dtype = dtype;
  spec.numHeads = numHeads;
  spec.numKVHeads = numKVHeads;
  spec.causal = causal;
  spec.causalAlign = CausalAlign::BottomRight;
  return spec;
}

double DecodeSpec::defaultScale() const {
  return 1.0 / std::sqrt(static_cast<double>(headDim));
}

DecodeTiling decodeTiling(const DecodeSpec &spec) {
  DecodeTiling t;
  // Swizzled rows wherever the kernel copies by cp.async on every target
  // (bulk copies, which only sm_90 and newer make, write whole rows and
  // need the padded layout).
  t.swizzledRows = !decodeUsesBulkCopy(spec, /*computeCapability=*/90);
  const int64_t group = std::max<int64_t>(spec.groupSize(), 1);
  const int64_t qLen = std::max<int64_t>(spec.qLen, 1);
  // The most heads of the group whose rows fit one block (128 rows: two
  // m16 tiles for each of 4 warps; 64 at head dim 256, one m16 tile each,
  // whose accumulators take 128 registers).
  const int64_t maxRows = spec.headDim == 256 ? 64 : 128;
  t.headsPerBlock = 1;
  for (int64_t h = group; h >= 1; --h)
    if (group % h == 0 && h * qLen <= maxRows) {
      t.headsPerBlock = h;
      break;
    }
  t.headChunks = group / t.headsPerBlock;
  t.rows = t.headsPerBlock * qLen;
  const int64_t mTiles = (t.rows + 15) / 16;
  if (mTiles <= 2) {
    t.warpsM = mTiles;
  } else {
    t.warpsM = 4;
    t.mTilesPerWarp = (mTiles + 3) / 4;
  }
  t.warpsN = t.warps / t.warpsM;
  t.rowsPadded = t.warpsM * t.mTilesPerWarp * 16;
  // Keys per warp: 16 or 32 of a 64-key tile at head dim 128 (32 with two
  // m tiles per warp, where the accumulators take the registers), 32 or
  // 64 of a 128- or 64-key tile at head dim 64.
  // Head dim 128 with one m16 tile of rows (4 warps over the keys): two
  // buffers of 128-key tiles, one 132 KiB block per SM, which read the
  // cache faster on an H100 than two blocks of three 64-key buffers
  // (docs/inference.md); a GPU with less shared memory per block gets the
  // 64-key tiles (Context::decodeKernel).
  // Pages of 16 tokens take 64-key tiles in three buffers instead (two
  // blocks per SM), which read them faster on an H200
  // (docs/inference.md).
  const bool wideTiles = spec.headDim == 128 && t.warpsN == 4;
  const bool shortPages = spec.pageSize > 0 && spec.pageSize <= 16;
  if (spec.headDim == 64)
    t.blockN = t.warpsN == 4 ? 128 : 64;
  else if (spec.headDim == 128)
    t.blockN = wideTiles && !shortPages ? 128
               : t.mTilesPerWarp == 2   ? 32
                                        : 64;
  else
    t.blockN = t.warpsN == 1 ? 32 : 64;
  if (spec.blockN > 0)
    t.blockN = spec.blockN;
  t.keysPerWarp = t.blockN / t.warpsN;
  // Head dim 256: two buffers of 64-key tiles (three would pass 227 KiB).
  // A paged cache whose pages are shorter than the tile keeps three: each
  // tile's rows then come from several pages, whose block-table reads come
  // before the copies, and a third buffer hides them (measured in
  // docs/inference.md).
  const bool splitPages = spec.pageSize > 0 && spec.pageSize < t.blockN;
  t.stages = spec.stages > 0 ? spec.stages
             : (spec.headDim == 256 && t.blockN == 64) ||
                     (wideTiles && t.blockN == 128 && !splitPages)
                 ? 2
                 : 3;
  // Two blocks of pages of 16 fit an SM, but where the KV length is split
  // a wave of one per SM reads the cache faster: half the splits, each
  // twice as long (measured in docs/inference.md). From batch 14 up (with
  // 8 KV heads) the rule does not split.
  if (wideTiles && shortPages)
    t.splitBlocksPerSM = 1;
  return t;
}

int64_t DecodeTiling::barrierOffset(const DecodeSpec &spec) const {
  const int64_t rowBytes = rowElems(spec.headDim) * dtypeBytes(spec.dtype);
  return rowsPadded * rowBytes + stages * 2 * blockN * rowBytes;
}

unsigned DecodeTiling::sharedBytes(const DecodeSpec &spec) const {
  return static_cast<unsigned>(barrierOffset(spec) + 8 * stages);
}

namespace {
/// Bulk K/V copies by default on sm_90 and newer.
constexpr bool kBulkCopyOnHopper = false;
/// The L2 evict_first hint by default (sm_80 and newer).
constexpr bool kEvictFirst = false;
} // namespace

bool decodeBulkCopyDefault(int computeCapability) {
  return computeCapability >= 90 && kBulkCopyOnHopper;
}

bool decodeUsesEvictFirst(const DecodeSpec &spec, int computeCapability) {
  if (spec.evictFirst != 0)
    return spec.evictFirst > 0;
  return computeCapability >= 80 && kEvictFirst;
}

bool decodeUsesBulkCopy(const DecodeSpec &spec, int computeCapability) {
  return spec.copyMode == 2 ||
         (spec.copyMode == 0 && decodeBulkCopyDefault(computeCapability));
}

TileConfig DecodeTiling::config(const DecodeSpec &spec) const {
  TileConfig c;
  c.family = spec.paged() ? "decode_paged" : "decode";
  c.blockM = rowsPadded;
  c.blockN = blockN;
  c.stages = stages;
  c.warps = warps;
  return c;
}

std::array<void *, DecodeKernelArgs::kNumParams>
DecodeKernelArgs::paramPointers() {
  std::array<void *, kNumParams> p{};
  unsigned i = 0;
  p[i++] = &q;
  p[i++] = &k;
  p[i++] = &v;
  p[i++] = &o;
  p[i++] = &lse;
  p[i++] = &oPartial;
  p[i++] = &lsePartial;
  p[i++] = &kvLens;
  p[i++] = &blockTable;
  for (auto *strides :
       {&qStrides, &kStrides, &vStrides, &oStrides, &lseStrides})
    for (int64_t &s : *strides)
      p[i++] = &s;
  p[i++] = &blockTableStride;
  p[i++] = &kvCapacity;
  p[i++] = &numPages;
  p[i++] = &numSplits;
  p[i++] = &scaleLog2;
  return p;
}

std::array<void *, DecodeCombineArgs::kNumParams>
DecodeCombineArgs::paramPointers() {
  std::array<void *, kNumParams> p{};
  unsigned i = 0;
  p[i++] = &oPartial;
  p[i++] = &lsePartial;
  p[i++] = &o;
  p[i++] = &lse;
  for (auto *strides : {&oStrides, &lseStrides})
    for (int64_t &s : *strides)
      p[i++] = &s;
  p[i++] = &rows;
  p[i++] = &numSplits;
  return p;
}

LaunchGeometry decodeGeometry(const DecodeSpec &spec, int64_t batch,
                              int64_t numSplits) {
  DecodeTiling t = decodeTiling(spec);
  LaunchGeometry g;
  g.gridX = static_cast<unsigned>(numSplits * t.headChunks);
  g.gridY = static_cast<unsigned>(spec.numKVHeads);
  g.gridZ = static_cast<unsigned>(batch);
  g.blockX = static_cast<unsigned>(t.threads());
  g.sharedMemoryBytes = t.sharedBytes(spec);
  return g;
}

LaunchGeometry decodeCombineGeometry(const DecodeSpec &spec, int64_t batch) {
  const int64_t rows = batch * spec.numHeads * spec.qLen;
  const int64_t rowsPerBlock = kDecodeCombineThreads / 32;
  LaunchGeometry g;
  g.gridX = static_cast<unsigned>((rows + rowsPerBlock - 1) / rowsPerBlock);
  g.blockX = kDecodeCombineThreads;
  return g;
}

int64_t chooseDecodeSplits(const DecodeSpec &spec, int64_t batch,
                           int64_t maxKvLen, int64_t residentBlocks,
                           int64_t splitWaves) {
  DecodeTiling t = decodeTiling(spec);
  const int64_t work = batch * spec.numKVHeads * t.headChunks;
  const int64_t tiles =
      (std::max<int64_t>(maxKvLen, 1) + t.blockN - 1) / t.blockN;
  residentBlocks = std::max<int64_t>(residentBlocks, 1);
  if (work * 10 >= residentBlocks * 8)
    return 1;
  // One wave: as many splits as fit the resident blocks next to the
  // others, then the fewest that give the same tiles per split (no split
  // left empty). A decode reads memory: a wave that holds every block
  // keeps the most bytes in flight, with no tail of a second wave.
  int64_t splits = std::clamp<int64_t>(
      std::max<int64_t>(splitWaves, 1) * residentBlocks / work, 1,
                                       std::min(kMaxDecodeSplits, tiles));
  const int64_t perSplit = (tiles + splits - 1) / splits;
  return (tiles + perSplit - 1) / perSplit;
}

int64_t decodeWorkspaceFloats(const DecodeSpec &spec, int64_t batch,
                              int64_t numSplits) {
  if (numSplits <= 1)
    return 0;
  return batch * spec.numHeads * spec.qLen * numSplits * (spec.headDim + 1);
}

KernelInfo decodeKernelInfo(const DecodeSpec &spec) {
  DecodeTiling t = decodeTiling(spec);
  KernelInfo info;
  info.name = spec.kernelName();
  info.config = t.config(spec);
  info.threadsPerBlock = static_cast<unsigned>(t.threads());
  info.sharedMemoryBytes = t.sharedBytes(spec);
  info.numHeads = spec.numHeads;
  return info;
}

} // namespace flashjit
