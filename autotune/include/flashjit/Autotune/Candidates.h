//===- Candidates.h - tile configs evaluated on one device -------*- C++
//-*-===//
// Why: before ranking, every config a template offers is checked against the
// device's limits (shared memory, threads, registers) and given the numbers
// the ranking and the explanation need: resident blocks per SM and what
// limits them, warps per SM, blocks of the problem and waves over the SMs.
// Nothing here is specific to one kernel family: templates report their
// resources through KernelTemplate::resources().
#ifndef FLASHJIT_AUTOTUNE_CANDIDATES_H
#define FLASHJIT_AUTOTUNE_CANDIDATES_H

#include "flashjit/Autotune/DeviceModel.h"
#include "flashjit/Templates/KernelTemplate.h"

#include <string>
#include <vector>

namespace flashjit::autotune {

/// The problem size the choice is made for: a kernel serves every size, but
/// the grid of a typical call decides whether a tile keeps the GPU busy.
/// Heads come from the spec. Default: batch*seqlen = 16k, the FlashAttention
/// benchmark convention.
struct ProblemShape {
  int64_t batch = 8;
  int64_t seqlen = 2048;
};
/// Batch and seqlen must be at least 1.
llvm::Error checkProblemShape(const ProblemShape &shape);
/// The shape a choice for sequences of `seqlen` reasons with: the same
/// 16k tokens (batch = 16384 / seqlen, at least 1), so that the grid of a
/// short-sequence call is as large as a long one's and the length alone
/// changes the choice. seqlen < 1 gives the default shape.
ProblemShape shapeForSeqlen(int64_t seqlen);

/// The resource that caps the resident blocks of one SM.
enum class OccupancyLimit { SharedMemory, Registers, Threads, BlockSlots };
/// "shared memory", "registers", "threads", "block slots".
const char *occupancyLimitName(OccupancyLimit limit);

struct CandidateReport {
  TileConfig config;
  TemplateResources resources;
  /// Position of the config's template in allTemplates() (0: most capable).
  unsigned templateRank = 0;
  /// The template's kernels are persistent (one block per SM looping over
  /// tiles, a tile's loads overlapping the previous tile's epilogue).
  bool persistent = false;
  /// Blocks per cluster of its kernels (KernelTemplate::clusterSize).
  unsigned clusterSize = 1;
  /// Whether the spec has no structural mask and a head dim below 128: its
  /// tiles are cheap, and from the short lengths on a persistent grid's
  /// per-tile bookkeeping does not pay for itself.
  bool unmaskedSmallHead = false;
  /// A varlen spec in a template whose kernels load tiles with TMA boxes
  /// (whole tiles of the packed tensors, past short sequences' ends).
  bool varlenBoxLoads = false;
  /// Scores the kernel computes per batch and head at the hint shape's
  /// length: with a right bound (causal), every query tile's keys up to its
  /// diagonal in whole key tiles; without, the query rows times the keys
  /// padded to whole key tiles.
  double computedWork = 0;
  bool rightBound = false;
  /// specialFunctionBound(spec): head dim 128, a score_mod that spends the
  /// special-function unit per score and nothing bounding the keys on the
  /// right; a persistent grid of three softmax warpgroups is then the
  /// faster (HeuristicOptions::specialFunctionSeqlen).
  bool specialFunctionScores = false;
  /// plainHeadDim128(spec): nothing on the scores but the softmax; three
  /// softmax warpgroups pay from HeuristicOptions::plainThreeWarpgroupSeqlen.
  bool plainHeadDim128 = false;
  /// Causal: block_n divides block_m, so the diagonal of every query block
  /// crosses whole K/V tiles and no tile straddles it needlessly. Always
  /// true without a mask, and for templates that do not ask for it
  /// (KernelTemplate::prefersAlignedCausalTiles).
  bool diagonalAligned = true;
  /// Empty when the config fits the device; otherwise why not, every limit
  /// it breaks, e.g. "needs 80 KB of shared memory, the Tesla T4 allows 64 KB
  /// per block".
  std::string rejection;

  // Filled for configs that fit.
  unsigned blocksPerSM = 0;
  OccupancyLimit limitedBy = OccupancyLimit::BlockSlots;
  /// Resident warps per SM at blocksPerSM (theoretical occupancy).
  unsigned warpsPerSM = 0;
  /// warpsPerSM over the SM's warp slots, in [0, 1].
  double occupancy = 0;
  /// Blocks of the hint shape: batch * heads * ceil(seqlen / block_m).
  int64_t gridBlocks = 0;
  /// gridBlocks over the blocks resident at once on the whole GPU.
  double waves = 0;
  /// Share of the block slots of the last wave that hold a block: 0.1 for
  /// 1.1 waves, 1 when the blocks divide into full waves.
  double lastWaveFill = 0;
  /// waves / ceil(waves), the share of slots busy over the whole run: what
  /// the partly empty last wave costs (0.55 for 1.1 waves, 0.98 for 51.2).
  double tailEfficiency = 0;
  /// Warps resident on the whole GPU in the first wave:
  /// min(gridBlocks, SMs * blocksPerSM) * warps per block.
  int64_t activeWarps = 0;
  /// Bytes of K and V read from memory for the hint shape (every query block
  /// reads the K/V rows it attends to): falls as block_m grows.
  double kvBytesRead = 0;

  bool fits() const { return rejection.empty(); }
  /// At least one full wave: every SM holds blocksPerSM blocks at the start.
  bool fillsGpu(const DeviceModel &device) const {
    return fits() && gridBlocks >= static_cast<int64_t>(device.smCount) *
                                       static_cast<int64_t>(blocksPerSM);
  }
  /// Resident warps per SM in the first wave, averaged over the SMs.
  double activeWarpsPerSM(const DeviceModel &device) const {
    return static_cast<double>(activeWarps) / device.smCount;
  }
};

/// Evaluates one config of `tmpl` on the device for the hint shape. The
/// template's checkConfig() errors become rejections.
CandidateReport
evaluateConfig(const KernelTemplate &tmpl, const AttentionSpec &spec,
               const TileConfig &config, const DeviceModel &device,
               const ProblemShape &shape, unsigned templateRank = 0);

/// Every candidate of one template evaluated on the device, whatever the
/// device's compute capability: what would fit if the template ran there.
/// The template must support the spec on its own lowest target (head dim,
/// dtype); the error says why not.
llvm::Expected<std::vector<CandidateReport>>
evaluateTemplate(const KernelTemplate &tmpl, const AttentionSpec &spec,
                 const DeviceModel &device, const ProblemShape &shape,
                 unsigned templateRank = 0);

struct CandidateSet {
  /// Candidates of every template that runs the spec on the device, fitting
  /// or not, in template order then candidate order.
  std::vector<CandidateReport> candidates;
  /// One line per template left out, e.g. "cuda_core: compute capability 7.5
  /// is not supported: flashjit needs 8.0 (Ampere) or newer".
  std::vector<std::string> skippedTemplates;
};

/// Candidates of every template in allTemplates() that supports the spec on
/// the device's target (Target::fromComputeCapability). A device below a
/// template's minimum compute capability leaves it in skippedTemplates.
llvm::Expected<CandidateSet> enumerateCandidates(const AttentionSpec &spec,
                                                 const DeviceModel &device,
                                                 const ProblemShape &shape);

} // namespace flashjit::autotune

#endif
