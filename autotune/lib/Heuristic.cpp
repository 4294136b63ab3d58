//===- Heuristic.cpp - ranking tile configs -------------------------------===//
// Why: the ranking rules in one place, applied in a fixed order, so every
// choice can be derived by hand and explained by the rule that decided it.
// The order encodes what matters for attention kernels: for short
// sequences a persistent template first (a tile's few key blocks leave its
// prologue and epilogue exposed unless the next tile's loads overlap them),
// for longer unmasked ones of a small head dim a non-persistent one; then a
// faster template; then a grid that keeps every SM busy; then, between
// persistent configs, clearly fewer computed scores at the hint length
// (padded key tiles, or tiles up to the diagonal); then more query rows per
// warp (two m16 tiles per warp halve the mma_sync template's shared-memory
// reads per FLOP); then enough resident warps to hide latency; then, causal
// and for the wgmma templates, a block_n that divides block_m, so the
// diagonal crosses whole K/V tiles (as FlashAttention-3 tiles causal); then
// larger tiles, since K/V traffic from memory falls as block_m grows
// (~ seqlen^2 * d / block_m) and larger block_n means fewer tiles and
// rescales. What each rule gains on an H100 is in docs/performance.md.
#include "flashjit/Autotune/Heuristic.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <set>

namespace flashjit::autotune {
namespace {

constexpr RankingRule kRules[] = {
    RankingRule::LengthGrid, RankingRule::ThreeWarpgroups,
    RankingRule::TemplateOrder,
    RankingRule::FillsGpu,        RankingRule::ComputedWork,
    RankingRule::RowsPerWarp,   RankingRule::EnoughWarps,
    RankingRule::DiagonalTiles, RankingRule::BlockM,
    RankingRule::BlockN,        RankingRule::Stages,
    RankingRule::ActiveWarps,   RankingRule::FewerThreads,
    RankingRule::ConfigName,
};

/// Registers per thread from which a config counts as at the cap.
constexpr unsigned kTightRegisters = 250;

/// +1 when `a` is better under `rule`, -1 when `b` is, 0 when equal.
template <typename T> int higherIsBetter(T a, T b) {
  return a > b ? 1 : (a < b ? -1 : 0);
}

/// The LengthGrid rule's order. Short: a persistent template taking tiles
/// one block at a time, then one taking them in lockstep clusters (a pair
/// waits for its slower block on every short tile), then the rest. Longer,
/// unmasked, head dim below 128: the non-persistent templates first. Short
/// varlen sequences: the templates that load with TMA last.
int lengthGridRank(const CandidateReport &c, const HeuristicOptions &options) {
  if (c.varlenBoxLoads && options.shape.seqlen <= options.shortVarlenSeqlen)
    return -1;
  if (options.shape.seqlen > options.shortSeqlen)
    return c.unmaskedSmallHead && !c.persistent ? 1 : 0;
  if (!c.persistent)
    return 0;
  return c.clusterSize == 1 ? 2 : 1;
}

/// The ThreeWarpgroups rule's order: a persistent grid of three or more
/// softmax warpgroups first where one warpgroup's softmax pays for running
/// under the products of two others: a score_mod that keeps the
/// special-function unit as busy as the tensor cores (soft-cap 30 at head
/// dim 128: 7% faster than two ping-ponging consumers from 1k), or plain
/// attention at head dim 128 from 4k (2-7% faster); below those lengths,
/// last (docs/performance.md).
int threeWarpgroupRank(const CandidateReport &c,
                       const HeuristicOptions &options) {
  if (!c.specialFunctionScores && !c.plainHeadDim128)
    return 0;
  const int64_t from = c.specialFunctionScores
                           ? options.specialFunctionSeqlen
                           : options.plainThreeWarpgroupSeqlen;
  bool three = c.persistent && c.resources.softmaxWarpgroups >= 3;
  if (options.shape.seqlen < from)
    return three ? -1 : 0;
  return three ? 1 : 0;
}

int compareUnder(RankingRule rule, const CandidateReport &a,
                 const CandidateReport &b, const DeviceModel &device,
                 const HeuristicOptions &options) {
  switch (rule) {
  case RankingRule::LengthGrid:
    return higherIsBetter(lengthGridRank(a, options),
                          lengthGridRank(b, options));
  case RankingRule::ThreeWarpgroups:
    return higherIsBetter(threeWarpgroupRank(a, options),
                          threeWarpgroupRank(b, options));
  case RankingRule::TemplateOrder:
    return higherIsBetter(b.templateRank, a.templateRank);
  case RankingRule::FillsGpu:
    return higherIsBetter(a.fillsGpu(device), b.fillsGpu(device));
  case RankingRule::ComputedWork: {
    if (!a.persistent || !b.persistent || a.computedWork <= 0 ||
        b.computedWork <= 0)
      return 0;
    double margin = 1.0 + (a.rightBound ? options.diagonalWorkMargin
                                        : options.paddedKeysMargin);
    if (a.computedWork * margin < b.computedWork)
      return 1;
    if (b.computedWork * margin < a.computedWork)
      return -1;
    return 0;
  }
  case RankingRule::RowsPerWarp:
    return higherIsBetter(a.resources.queryRowsPerWarp,
                          b.resources.queryRowsPerWarp);
  case RankingRule::EnoughWarps: {
    int64_t enough =
        static_cast<int64_t>(options.enoughWarpsPerSM) * device.smCount;
    return higherIsBetter(std::min(a.activeWarps, enough),
                          std::min(b.activeWarps, enough));
  }
  case RankingRule::DiagonalTiles:
    return higherIsBetter(a.diagonalAligned, b.diagonalAligned);
  case RankingRule::BlockM:
    return higherIsBetter(a.config.blockM, b.config.blockM);
  case RankingRule::BlockN:
    return higherIsBetter(a.config.blockN, b.config.blockN);
  case RankingRule::Stages: {
    // Another buffer keeps more addresses live: with the register estimate
    // at the cap ptxas has no room left to schedule, and one buffer is the
    // faster (docs/performance.md).
    bool tight = a.resources.registersPerThread >= kTightRegisters &&
                 b.resources.registersPerThread >= kTightRegisters;
    return tight ? higherIsBetter(b.config.stages, a.config.stages)
                 : higherIsBetter(a.config.stages, b.config.stages);
  }
  case RankingRule::ActiveWarps:
    return higherIsBetter(a.activeWarps, b.activeWarps);
  case RankingRule::FewerThreads:
    return higherIsBetter(b.resources.threadsPerBlock,
                          a.resources.threadsPerBlock);
  case RankingRule::ConfigName:
    return higherIsBetter(b.config.canonical(), a.config.canonical());
  }
  return 0;
}

/// The chosen config's numbers, for the explanation.
std::string describeChosen(const CandidateReport &c, const DeviceModel &device,
                           const HeuristicOptions &options) {
  return llvm::formatv(
      "{0} block(s) per SM (limited by {1}), {2} warps per SM; the "
      "{3} x {4} hint shape gives {5} blocks, {6:f2} waves on {7} SMs (the "
      "last {8:f0}% full, {9:f0}% of block slots busy over the run); {10} "
      "shared memory, {11} threads, about {12} registers per thread",
      c.blocksPerSM, occupancyLimitName(c.limitedBy), c.warpsPerSM,
      options.shape.batch, options.shape.seqlen, c.gridBlocks, c.waves,
      device.smCount, c.lastWaveFill * 100.0, c.tailEfficiency * 100.0,
      formatBytes(c.resources.sharedMemoryBytes), c.resources.threadsPerBlock,
      c.resources.registersPerThread);
}

std::string whyChosen(const std::vector<CandidateReport> &ranked,
                      size_t fitting, const DeviceModel &device,
                      const HeuristicOptions &options) {
  const CandidateReport &best = ranked.front();
  std::string text =
      llvm::formatv("{0} ranks first of {1} fitting "
                    "candidate(s) ({2} rejected): {3}.",
                    best.config.canonical(), fitting, ranked.size() - fitting,
                    describeChosen(best, device, options));
  if (fitting > 1) {
    const CandidateReport &second = ranked[1];
    text +=
        llvm::formatv(
            " It ranks above {0} by {1}.", second.config.canonical(),
            describeRule(decidingRule(best, second, device, options), options))
            .str();
  }
  return text;
}

/// Why nothing fits: skipped templates and the distinct rejections.
llvm::Error nothingFits(const std::vector<CandidateReport> &reports,
                        const std::vector<std::string> &skipped,
                        const AttentionSpec &spec, const DeviceModel &device) {
  std::string text = llvm::formatv(
      "no tile config runs {0} on the {1} (compute capability "
      "{2})",
      spec.canonical(), device.name, device.computeCapabilityText());
  for (const std::string &line : skipped)
    text += "\n  skipped " + line;
  std::set<std::string> seen;
  for (const CandidateReport &report : reports)
    if (seen.insert(report.rejection).second)
      text += "\n  " + report.config.canonical() + ": " + report.rejection;
  if (reports.empty() && skipped.empty())
    text += ": no template offers a candidate";
  return llvm::createStringError(text);
}

} // namespace

std::string describeRule(RankingRule rule, const HeuristicOptions &options) {
  switch (rule) {
  case RankingRule::LengthGrid:
    return llvm::formatv(
        "the grid for the length: up to {0}, a persistent template, "
        "clusters last (a short key loop leaves a tile's loads and epilogue "
        "exposed unless the next tile's overlap them); longer, unmasked and "
        "head dim below 128, a non-persistent one; varlen sequences up to "
        "{1}, a template without TMA box loads",
        options.shortSeqlen, options.shortVarlenSeqlen);
  case RankingRule::ThreeWarpgroups:
    return llvm::formatv(
        "head dim 128 and a score_mod on the special-function unit (tanh, "
        "exp, log, sqrt) with no right bound from {0}, or plain attention "
        "(no mask, no mods) from {1}: a persistent grid of three softmax "
        "warpgroups first (one warpgroup's softmax runs under two others' "
        "products), below those lengths last",
        options.specialFunctionSeqlen, options.plainThreeWarpgroupSeqlen);
  case RankingRule::TemplateOrder:
    return "template preference (a more capable kernel family)";
  case RankingRule::FillsGpu:
    return "a full first wave of blocks at the hint shape (no SM left idle)";
  case RankingRule::ComputedWork:
    return llvm::formatv("fewer computed scores at the hint length "
                         "(persistent templates; more than {0:f0}% fewer "
                         "padded keys, or {1:f0}% fewer with a diagonal)",
                         options.paddedKeysMargin * 100.0,
                         options.diagonalWorkMargin * 100.0);
  case RankingRule::RowsPerWarp:
    return "more query rows per warp (each K/V fragment read from shared "
           "memory feeds more rows)";
  case RankingRule::EnoughWarps:
    return llvm::formatv("occupancy (more resident warps, counted up to {0} "
                         "per SM)",
                         options.enoughWarpsPerSM);
  case RankingRule::DiagonalTiles:
    return "causal: block_n dividing block_m (the diagonal crosses whole "
           "K/V tiles)";
  case RankingRule::BlockM:
    return "a larger block_m (fewer passes over K/V in memory)";
  case RankingRule::BlockN:
    return "a larger block_n (fewer K/V tiles and softmax rescales per block)";
  case RankingRule::Stages:
    return llvm::formatv("more pipeline stages (fewer when both need {0} or "
                         "more registers per thread)",
                         kTightRegisters);
  case RankingRule::ActiveWarps:
    return "more resident warps";
  case RankingRule::FewerThreads:
    return "fewer threads for the same tile";
  case RankingRule::ConfigName:
    return "the stable tie-break (config name order)";
  }
  return "the stable tie-break (config name order)";
}

RankingRule decidingRule(const CandidateReport &a, const CandidateReport &b,
                         const DeviceModel &device,
                         const HeuristicOptions &options) {
  for (RankingRule rule : kRules)
    if (compareUnder(rule, a, b, device, options) != 0)
      return rule;
  return RankingRule::ConfigName;
}

bool ranksAbove(const CandidateReport &a, const CandidateReport &b,
                const DeviceModel &device, const HeuristicOptions &options) {
  for (RankingRule rule : kRules)
    if (int order = compareUnder(rule, a, b, device, options))
      return order > 0;
  return false;
}

llvm::Expected<Choice> rankCandidates(std::vector<CandidateReport> reports,
                                      std::vector<std::string> skipped,
                                      const AttentionSpec &spec,
                                      const DeviceModel &device,
                                      const HeuristicOptions &options) {
  // Fitting first (in rank order), rejected after in their original order.
  auto firstRejected =
      std::stable_partition(reports.begin(), reports.end(),
                            [](const CandidateReport &r) { return r.fits(); });
  size_t fitting = static_cast<size_t>(firstRejected - reports.begin());
  if (fitting == 0)
    return nothingFits(reports, skipped, spec, device);
  std::stable_sort(reports.begin(), firstRejected,
                   [&](const CandidateReport &a, const CandidateReport &b) {
                     return ranksAbove(a, b, device, options);
                   });
  Choice choice;
  choice.config = reports.front().config;
  choice.why = whyChosen(reports, fitting, device, options);
  choice.considered = std::move(reports);
  choice.skippedTemplates = std::move(skipped);
  choice.spec = spec;
  choice.device = device;
  choice.options = options;
  return choice;
}

llvm::Expected<Choice> chooseConfig(const AttentionSpec &spec,
                                    const DeviceModel &device,
                                    const HeuristicOptions &options) {
  auto set = enumerateCandidates(spec, device, options.shape);
  if (!set)
    return set.takeError();
  return rankCandidates(std::move(set->candidates),
                        std::move(set->skippedTemplates), spec, device,
                        options);
}

llvm::Expected<Choice>
chooseConfigForTemplate(const KernelTemplate &tmpl, const AttentionSpec &spec,
                        const DeviceModel &device,
                        const HeuristicOptions &options) {
  if (auto err = spec.validate())
    return err;
  unsigned rank = 0;
  for (const KernelTemplate *t : allTemplates()) {
    if (t == &tmpl)
      break;
    ++rank;
  }
  auto reports = evaluateTemplate(tmpl, spec, device, options.shape, rank);
  if (!reports)
    return reports.takeError();
  auto choice = rankCandidates(std::move(*reports), {}, spec, device, options);
  if (!choice)
    return choice.takeError();
  auto target = Target::fromComputeCapability(device.ccMajor, device.ccMinor);
  choice->modelOnly =
      !target || target->computeCapability < tmpl.minComputeCapability();
  if (!target)
    llvm::consumeError(target.takeError());
  if (choice->modelOnly)
    choice->why = llvm::formatv("Model only: the {0} (compute capability "
                                "{1}) cannot run the {2} template, which "
                                "needs compute capability {3}.{4}; this is "
                                "what its limits "
                                "would pick. {5}",
                                device.name, device.computeCapabilityText(),
                                tmpl.family(), tmpl.minComputeCapability() / 10,
                                tmpl.minComputeCapability() % 10, choice->why)
                      .str();
  return choice;
}

} // namespace flashjit::autotune
