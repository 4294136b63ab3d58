//===- Candidates.cpp - fit, occupancy and waves of tile configs ----------===//
// Why: the occupancy arithmetic follows the hardware's allocation rules, so a
// config reported as fitting launches, and blocks per SM match what the
// driver will make resident:
//  - shared memory: each resident block takes its bytes plus the driver's
//    reserved bytes; the carveout is assumed at its largest.
//  - registers: allocated per warp in units of 256 (8 per thread); an SM's
//    register file is split among its 4 sub-partitions (Volta to Hopper), a
//    warp lives on one, and a block's warps are spread over them.
//  - threads and block slots: per-SM limits of the compute capability.
#include "flashjit/Autotune/Candidates.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace flashjit::autotune {
namespace {

constexpr unsigned kWarpSize = 32;
/// Sub-partitions of an SM, each with a quarter of the register file.
constexpr unsigned kRegisterBanks = 4;
/// Registers per thread are allocated in multiples of this.
constexpr unsigned kRegisterUnit = 8;

/// Every per-block limit the resources break, joined; "" when they fit.
std::string blockLimitViolations(const TemplateResources &r,
                                 const DeviceModel &device) {
  const std::string &gpu = device.name;
  if (r.threadsPerBlock == 0)
    return "uses no threads";
  std::vector<std::string> broken;
  if (r.threadsPerBlock > device.maxThreadsPerBlock)
    broken.push_back(llvm::formatv("needs {0} threads per block, the {1} "
                                   "allows {2}",
                                   r.threadsPerBlock, gpu,
                                   device.maxThreadsPerBlock));
  if (r.sharedMemoryBytes > device.sharedMemoryPerBlockOptin)
    broken.push_back(llvm::formatv(
        "needs {0} of shared memory, the {1} allows {2} per block",
        formatBytes(r.sharedMemoryBytes), gpu,
        formatBytes(device.sharedMemoryPerBlockOptin)));
  if (r.registersPerThread > device.maxRegistersPerThread)
    broken.push_back(llvm::formatv("needs about {0} registers per thread, the "
                                   "{1} allows {2}",
                                   r.registersPerThread, gpu,
                                   device.maxRegistersPerThread));
  uint64_t blockRegisters =
      static_cast<uint64_t>(r.registersPerThread) * r.threadsPerBlock;
  if (blockRegisters > device.registersPerSM)
    broken.push_back(llvm::formatv("needs {0} registers per block ({1} per "
                                   "thread x {2} threads), the {3} has {4} "
                                   "per SM",
                                   blockRegisters, r.registersPerThread,
                                   r.threadsPerBlock, gpu,
                                   device.registersPerSM));
  return llvm::join(broken, "; and ");
}

struct Occupancy {
  unsigned blocks = 0;
  OccupancyLimit limit = OccupancyLimit::BlockSlots;
};

Occupancy residentBlocks(const TemplateResources &r,
                         const DeviceModel &device) {
  unsigned warps = llvm::divideCeil(r.threadsPerBlock, kWarpSize);
  unsigned sharedPerBlock =
      r.sharedMemoryBytes + device.reservedSharedMemoryPerBlock;
  unsigned bySharedMemory = sharedPerBlock == 0
                                ? UINT_MAX
                                : device.sharedMemoryPerSM / sharedPerBlock;
  unsigned byRegisters = UINT_MAX;
  if (r.registersPerThread > 0) {
    unsigned perWarp =
        llvm::alignTo(r.registersPerThread, kRegisterUnit) * kWarpSize;
    unsigned warpsPerBank = device.registersPerSM / kRegisterBanks / perWarp;
    byRegisters = warpsPerBank * kRegisterBanks / warps;
  }
  unsigned byThreads = device.maxThreadsPerSM / (warps * kWarpSize);
  // Ties name the first limit in this order.
  const std::pair<unsigned, OccupancyLimit> limits[] = {
      {bySharedMemory, OccupancyLimit::SharedMemory},
      {byRegisters, OccupancyLimit::Registers},
      {byThreads, OccupancyLimit::Threads},
      {device.maxBlocksPerSM, OccupancyLimit::BlockSlots}};
  Occupancy out{UINT_MAX, OccupancyLimit::BlockSlots};
  for (const auto &[blocks, limit] : limits)
    if (blocks < out.blocks)
      out = {blocks, limit};
  return out;
}

/// Why no block is resident although each limit of one block holds.
std::string zeroOccupancyReason(const TemplateResources &r,
                                const DeviceModel &device,
                                OccupancyLimit limit) {
  if (limit == OccupancyLimit::SharedMemory)
    return llvm::formatv("needs {0} of shared memory plus the {1} the driver "
                         "reserves per block, more than the {2} of an SM of "
                         "the {3}",
                         formatBytes(r.sharedMemoryBytes),
                         formatBytes(device.reservedSharedMemoryPerBlock),
                         formatBytes(device.sharedMemoryPerSM), device.name);
  if (limit == OccupancyLimit::Registers)
    return llvm::formatv(
        "needs about {0} registers per thread: its {1} warps put {2} warps "
        "on one of the {3} register-file partitions of an SM, more than its "
        "{4} registers hold",
        r.registersPerThread, llvm::divideCeil(r.threadsPerBlock, kWarpSize),
        llvm::divideCeil(r.threadsPerBlock, kWarpSize * kRegisterBanks),
        kRegisterBanks, device.registersPerSM / kRegisterBanks);
  return llvm::formatv("no block of {0} threads fits an SM of the {1}",
                       r.threadsPerBlock, device.name);
}

/// K and V rows each query block reads, summed over the blocks of one head.
/// Causal: block i reads min(seqlen, (i + 1) * block_m) rows.
double kvRowsPerHead(int64_t seqlen, int64_t blockM, bool causal) {
  double blocks = static_cast<double>(llvm::divideCeil(seqlen, blockM));
  if (!causal)
    return blocks * static_cast<double>(seqlen);
  double whole = static_cast<double>(seqlen / blockM);
  return static_cast<double>(blockM) * whole * (whole + 1) / 2 +
         (blocks - whole) * static_cast<double>(seqlen);
}

/// The target a template is modelled on: the device's own when the template
/// runs there, else the lowest chip the template accepts.
llvm::Expected<Target> modelTarget(const KernelTemplate &tmpl,
                                   const DeviceModel &device) {
  auto own = Target::fromComputeCapability(device.ccMajor, device.ccMinor);
  if (own && own->computeCapability >= tmpl.minComputeCapability())
    return *own;
  if (!own)
    llvm::consumeError(own.takeError());
  std::optional<Target> best;
  for (const std::string &chip : Target::supportedChips()) {
    auto target = Target::parse(chip);
    if (!target) {
      llvm::consumeError(target.takeError());
      continue;
    }
    if (target->computeCapability < tmpl.minComputeCapability())
      continue;
    if (!best || target->computeCapability < best->computeCapability ||
        (target->computeCapability == best->computeCapability &&
         target->archSpecific))
      best = *target;
  }
  if (!best)
    return llvm::createStringError(
        llvm::formatv("the {0} template needs compute capability {1}, above "
                      "every chip flashjit builds for ({2})",
                      tmpl.family(), tmpl.minComputeCapability(),
                      llvm::join(Target::supportedChips(), ", "))
            .str());
  return *best;
}

/// CandidateReport::computedWork for sequences of `seqlen` (queries and
/// keys alike).
double computedScores(const AttentionSpec &spec, const TileConfig &config,
                      int64_t seqlen) {
  if (config.blockM <= 0 || config.blockN <= 0)
    return 0;
  int64_t keyTiles = static_cast<int64_t>(llvm::divideCeil(seqlen, config.blockN));
  if (!spec.hasRightBound())
    return static_cast<double>(seqlen) *
           static_cast<double>(keyTiles * config.blockN);
  double work = 0;
  for (int64_t row = 0; row < seqlen; row += config.blockM) {
    int64_t last = std::min(row + config.blockM, seqlen); // past its rows
    int64_t tiles =
        std::min<int64_t>(llvm::divideCeil(last, config.blockN), keyTiles);
    work += static_cast<double>(config.blockM) *
            static_cast<double>(tiles * config.blockN);
  }
  return work;
}

} // namespace

llvm::Error checkProblemShape(const ProblemShape &shape) {
  if (shape.batch < 1 || shape.seqlen < 1)
    return llvm::createStringError(
        llvm::formatv("problem shape batch {0} x seqlen {1}: both must be at "
                      "least 1",
                      shape.batch, shape.seqlen)
            .str());
  return llvm::Error::success();
}

ProblemShape shapeForSeqlen(int64_t seqlen) {
  ProblemShape shape;
  if (seqlen < 1)
    return shape;
  const int64_t tokens = shape.batch * shape.seqlen;
  shape.seqlen = seqlen;
  shape.batch = std::max<int64_t>(1, tokens / seqlen);
  return shape;
}

const char *occupancyLimitName(OccupancyLimit limit) {
  switch (limit) {
  case OccupancyLimit::SharedMemory:
    return "shared memory";
  case OccupancyLimit::Registers:
    return "registers";
  case OccupancyLimit::Threads:
    return "threads";
  case OccupancyLimit::BlockSlots:
    return "block slots";
  }
  return "block slots";
}

CandidateReport
evaluateConfig(const KernelTemplate &tmpl, const AttentionSpec &spec,
               const TileConfig &config, const DeviceModel &device,
               const ProblemShape &shape, unsigned templateRank) {
  CandidateReport report;
  report.config = config;
  report.templateRank = templateRank;
  report.persistent = tmpl.persistent();
  report.clusterSize = tmpl.clusterSize();
  report.unmaskedSmallHead = !spec.hasStructuralMask() && spec.headDim < 128;
  report.varlenBoxLoads =
      spec.varlen && tmpl.tensorMapBoxes(spec, config).has_value();
  report.rightBound = spec.hasRightBound();
  report.specialFunctionScores = specialFunctionBound(spec);
  report.plainHeadDim128 = plainHeadDim128(spec);
  report.computedWork = computedScores(spec, config, shape.seqlen);
  report.diagonalAligned =
      !spec.causal || !tmpl.prefersAlignedCausalTiles() ||
      (config.blockN > 0 && config.blockM % config.blockN == 0);
  if (auto err = device.validate()) {
    report.rejection = llvm::toString(std::move(err));
    return report;
  }
  if (auto err = tmpl.checkConfig(spec, config)) {
    report.rejection = "the " + tmpl.family().str() + " template rejects it: " +
                       llvm::toString(std::move(err));
    return report;
  }
  const TemplateResources &r = report.resources = tmpl.resources(spec, config);
  report.rejection = blockLimitViolations(r, device);
  if (!report.fits())
    return report;
  Occupancy occupancy = residentBlocks(r, device);
  if (occupancy.blocks == 0) {
    report.rejection = zeroOccupancyReason(r, device, occupancy.limit);
    return report;
  }
  unsigned warps = llvm::divideCeil(r.threadsPerBlock, kWarpSize);
  report.blocksPerSM = occupancy.blocks;
  report.limitedBy = occupancy.limit;
  report.warpsPerSM = occupancy.blocks * warps;
  report.occupancy = static_cast<double>(report.warpsPerSM) /
                     (device.maxThreadsPerSM / kWarpSize);

  int64_t queryBlocks = llvm::divideCeil(shape.seqlen, config.blockM);
  report.gridBlocks = shape.batch * spec.numHeads * queryBlocks;
  int64_t slots = static_cast<int64_t>(device.smCount) * occupancy.blocks;
  report.waves = static_cast<double>(report.gridBlocks) / slots;
  int64_t fullWaves = (report.gridBlocks - 1) / slots;
  report.lastWaveFill =
      static_cast<double>(report.gridBlocks - fullWaves * slots) / slots;
  report.tailEfficiency = report.waves / std::ceil(report.waves);
  report.activeWarps = std::min(report.gridBlocks, slots) * warps;
  report.kvBytesRead = static_cast<double>(shape.batch * spec.numHeads) *
                       kvRowsPerHead(shape.seqlen, config.blockM, spec.causal) *
                       2.0 * static_cast<double>(spec.headDim) *
                       dtypeBytes(spec.dtype);
  return report;
}

llvm::Expected<std::vector<CandidateReport>>
evaluateTemplate(const KernelTemplate &tmpl, const AttentionSpec &spec,
                 const DeviceModel &device, const ProblemShape &shape,
                 unsigned templateRank) {
  if (auto err = checkProblemShape(shape))
    return err;
  if (auto err = device.validate())
    return err;
  auto target = modelTarget(tmpl, device);
  if (!target)
    return target.takeError();
  if (auto err = tmpl.supports(spec, *target))
    return err;
  std::vector<CandidateReport> reports;
  for (const TileConfig &config : tmpl.candidates(spec))
    reports.push_back(
        evaluateConfig(tmpl, spec, config, device, shape, templateRank));
  return reports;
}

llvm::Expected<CandidateSet> enumerateCandidates(const AttentionSpec &spec,
                                                 const DeviceModel &device,
                                                 const ProblemShape &shape) {
  if (auto err = spec.validate())
    return err;
  if (auto err = checkProblemShape(shape))
    return err;
  if (auto err = device.validate())
    return err;
  CandidateSet set;
  auto target = Target::fromComputeCapability(device.ccMajor, device.ccMinor);
  std::string targetError;
  if (!target)
    targetError = llvm::toString(target.takeError());
  const std::vector<const KernelTemplate *> &templates = allTemplates();
  for (unsigned rank = 0; rank < templates.size(); ++rank) {
    const KernelTemplate &tmpl = *templates[rank];
    if (tmpl.measurementOnly()) // built only when a config names it
      continue;
    std::string family = tmpl.family().str();
    if (!targetError.empty()) {
      set.skippedTemplates.push_back(family + ": " + targetError);
      continue;
    }
    if (auto err = tmpl.supports(spec, *target)) {
      set.skippedTemplates.push_back(family + ": " +
                                     llvm::toString(std::move(err)));
      continue;
    }
    for (const TileConfig &config : tmpl.candidates(spec))
      set.candidates.push_back(
          evaluateConfig(tmpl, spec, config, device, shape, rank));
  }
  return set;
}

} // namespace flashjit::autotune
