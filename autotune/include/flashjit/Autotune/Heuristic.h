//===- Heuristic.h - the default tile config of a spec on a device -*- C++
//-*-===//
// Why: without a tuning-database entry, the compiler builds the config this
// picks. The ranking is a fixed list of rules, so the choice is
// deterministic, testable per GPU without a GPU, and explainable
// (`flashjit compile --explain` prints the deciding rule).
#ifndef FLASHJIT_AUTOTUNE_HEURISTIC_H
#define FLASHJIT_AUTOTUNE_HEURISTIC_H

#include "flashjit/Autotune/Candidates.h"

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace flashjit::autotune {

struct HeuristicOptions {
  ProblemShape shape;
  /// Resident warps per SM that hide latency well enough (2 per scheduler);
  /// past it, larger tiles rank above more occupancy.
  unsigned enoughWarpsPerSM = 8;
  /// Sequences up to this length count as short: a tile's key loop is a
  /// few blocks long, so its prologue (Q and first K/V loads) and epilogue
  /// (O store) weigh as much as the loop, and a persistent template, which
  /// overlaps them with the neighbouring tiles', ranks first. Longer
  /// unmasked sequences of a head dim below 128 rank a non-persistent
  /// template first instead.
  int64_t shortSeqlen = 1024;
  /// Varlen sequences up to this length rank the families that load with
  /// TMA last: their boxes read whole tiles of the packed K and V (the next
  /// sequences' rows) for a few keys each (bench/results/varlen-*.md:
  /// 34-token sequences ran 1.8x faster in mma_sync than in wgmma).
  int64_t shortVarlenSeqlen = 64;
  /// Between two persistent configs, the computed scores decide when one
  /// computes this fraction more than the other: keys padded to whole
  /// tiles without a right bound, tiles up to the diagonal with one.
  double paddedKeysMargin = 0.05;
  double diagonalWorkMargin = 0.10;
  /// With a score_mod on the special-function unit at head dim 128
  /// (CandidateReport::specialFunctionScores), three softmax warpgroups
  /// rank first from this length on and last below it (soft-cap 30 on an
  /// H200: 1.01-1.07x two warpgroups at 1k, 0.99x at 512).
  int64_t specialFunctionSeqlen = 1024;
  /// Plain attention at head dim 128 (CandidateReport::plainHeadDim128):
  /// three softmax warpgroups rank first from this length on and last
  /// below it (H200, against cuDNN in the same run: 1.02-1.07x two
  /// warpgroups from 4k, 1.00x at 2k, 0.96x at 1k).
  int64_t plainThreeWarpgroupSeqlen = 4096;
};

/// The ranking rules, in the order they are applied to two fitting
/// candidates; the first that tells them apart decides.
enum class RankingRule {
  LengthGrid,    ///< persistent or not, by the hint length
  ThreeWarpgroups, ///< a score_mod busy on the SFU, or plain head dim 128 long: three softmax warpgroups
  TemplateOrder, ///< the more capable template (earlier in allTemplates())
  FillsGpu,      ///< at least one full wave of blocks at the hint shape
  ComputedWork,  ///< persistent: fewer computed scores at the hint length
  RowsPerWarp,   ///< more query rows per warp: fewer shared reads per FLOP
  EnoughWarps,   ///< more resident warps, counted up to enoughWarpsPerSM
  DiagonalTiles, ///< causal: block_n divides block_m
  BlockM,        ///< larger block_m: fewer passes over K/V in memory
  BlockN,        ///< larger block_n: fewer tiles and softmax rescales
  Stages,        ///< more pipeline stages (fewer at the register cap)
  ActiveWarps,   ///< more resident warps, uncapped
  FewerThreads,  ///< fewer threads for the same tile
  ConfigName,    ///< stable tie-break: canonical() in byte order
};
/// Words for explanations, e.g. "a larger block_m (fewer passes over K/V)".
std::string describeRule(RankingRule rule, const HeuristicOptions &options);
/// The rule that separates two fitting candidates; ConfigName when only their
/// names differ.
RankingRule decidingRule(const CandidateReport &a, const CandidateReport &b,
                         const DeviceModel &device,
                         const HeuristicOptions &options);
/// Whether fitting candidate `a` ranks above fitting candidate `b`.
bool ranksAbove(const CandidateReport &a, const CandidateReport &b,
                const DeviceModel &device, const HeuristicOptions &options);

struct Choice {
  TileConfig config;
  /// The fitting candidates best first (the chosen one at index 0), then the
  /// rejected ones in the order the templates offered them.
  std::vector<CandidateReport> considered;
  /// One paragraph: the chosen config's numbers and the rule that put it
  /// above the runner-up.
  std::string why;
  /// Templates left out, with the reason (see CandidateSet).
  std::vector<std::string> skippedTemplates;
  /// What the choice was made for, so it renders on its own.
  AttentionSpec spec;
  DeviceModel device;
  HeuristicOptions options;
  /// True when the device cannot run the template (below its minimum compute
  /// capability): the choice says what would fit there, for analysis only.
  bool modelOnly = false;
};

/// The config of the best-ranked fitting candidate of every template that
/// runs the spec on the device. The error lists why nothing fits (templates
/// skipped, candidates rejected).
llvm::Expected<Choice> chooseConfig(const AttentionSpec &spec,
                                    const DeviceModel &device,
                                    const HeuristicOptions &options = {});

/// The same for one template, whatever the device's compute capability
/// (modelOnly tells when the device cannot run it): what the device's limits
/// would make it pick.
llvm::Expected<Choice>
chooseConfigForTemplate(const KernelTemplate &tmpl, const AttentionSpec &spec,
                        const DeviceModel &device,
                        const HeuristicOptions &options = {});

/// Ranks evaluated candidates into a Choice; the error explains why none
/// fits.
llvm::Expected<Choice> rankCandidates(std::vector<CandidateReport> reports,
                                      std::vector<std::string> skipped,
                                      const AttentionSpec &spec,
                                      const DeviceModel &device,
                                      const HeuristicOptions &options);

/// The explanation printed by `flashjit compile --explain`: device, shape,
/// choice, why, and a table of every candidate.
std::string renderChoiceText(const Choice &choice);
/// The same as JSON, for `--explain --json`.
nlohmann::json choiceToJson(const Choice &choice);

} // namespace flashjit::autotune

#endif
