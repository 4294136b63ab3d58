//===- ExplainChoice.cpp - a choice as text and as JSON -------------------===//
// Why: users and fleet operators need to see why a config was picked (and
// why others were not) without reading the heuristic; this renders the same
// facts for people (`--explain`) and for programs (`--explain --json`).
#include "flashjit/Autotune/ConfigJson.h"
#include "flashjit/Autotune/Heuristic.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

namespace flashjit::autotune {
namespace {

/// "320", "165.2": one decimal, none when it is zero.
std::string formatNumber(double value) {
  std::string text = llvm::formatv("{0:f1}", value).str();
  if (llvm::StringRef(text).ends_with(".0"))
    text.resize(text.size() - 2);
  return text;
}

std::string describeDevice(const DeviceModel &d) {
  std::string text = llvm::formatv(
      "{0} (compute capability {1}, {2} SMs, {3} shared memory per block, {4} "
      "per SM, {5} registers per SM, {6} MB L2",
      d.name, d.computeCapabilityText(), d.smCount,
      formatBytes(d.sharedMemoryPerBlockOptin),
      formatBytes(d.sharedMemoryPerSM), d.registersPerSM,
      d.l2Bytes / (1024 * 1024));
  if (d.memoryBandwidthGBs)
    text += ", " + formatNumber(*d.memoryBandwidthGBs) + " GB/s";
  if (d.denseTensorTflops)
    text += ", " + formatNumber(*d.denseTensorTflops) + " dense tensor TFLOP/s";
  return text + ")";
}

} // namespace

std::string renderChoiceText(const Choice &choice) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "tile config for " << choice.spec.canonical() << "\n";
  os << "  device:     " << describeDevice(choice.device) << "\n";
  os << llvm::formatv("  shape hint: batch {0} x seqlen {1} x {2} heads\n",
                      choice.options.shape.batch, choice.options.shape.seqlen,
                      choice.spec.numHeads);
  os << "  chosen:     " << choice.config.canonical()
     << (choice.modelOnly ? " (model only)" : "") << "\n";
  os << "  why:        " << choice.why << "\n";
  for (const std::string &line : choice.skippedTemplates)
    os << "  skipped:    " << line << "\n";
  os << "  candidates, fitting ones best first:\n";
  os << llvm::formatv("    {0,-4} {1,-28} {2,7} {3,9} {4,5}  {5}\n", "rank",
                      "config", "threads", "shared", "regs",
                      "blocks/SM (limit), warps/SM, waves (last wave "
                      "full, slots busy)");
  unsigned rank = 0;
  for (const CandidateReport &c : choice.considered) {
    std::string rankText = c.fits() ? std::to_string(++rank) : "-";
    std::string detail =
        c.fits() ? llvm::formatv("{0} ({1}), {2}, {3:f2} ({4:f0}%, {5:f0}%)",
                                 c.blocksPerSM, occupancyLimitName(c.limitedBy),
                                 c.warpsPerSM, c.waves, c.lastWaveFill * 100.0,
                                 c.tailEfficiency * 100.0)
                       .str()
                 : "rejected: " + c.rejection;
    os << llvm::formatv("    {0,-4} {1,-28} {2,7} {3,9} {4,5}  {5}\n", rankText,
                        c.config.canonical(), c.resources.threadsPerBlock,
                        formatBytes(c.resources.sharedMemoryBytes),
                        c.resources.registersPerThread, detail);
  }
  return out;
}

nlohmann::json choiceToJson(const Choice &choice) {
  using nlohmann::json;
  json candidates = json::array();
  unsigned rank = 0;
  for (const CandidateReport &c : choice.considered) {
    json entry = {{"config", tileConfigToJson(c.config)},
                  {"name", c.config.canonical()},
                  {"fits", c.fits()},
                  {"threads", c.resources.threadsPerBlock},
                  {"shared_bytes", c.resources.sharedMemoryBytes},
                  {"registers_per_thread", c.resources.registersPerThread}};
    if (!c.fits()) {
      entry["rejection"] = c.rejection;
    } else {
      entry["rank"] = ++rank;
      entry["blocks_per_sm"] = c.blocksPerSM;
      entry["limited_by"] = occupancyLimitName(c.limitedBy);
      entry["warps_per_sm"] = c.warpsPerSM;
      entry["occupancy"] = c.occupancy;
      entry["grid_blocks"] = c.gridBlocks;
      entry["waves"] = c.waves;
      entry["last_wave_fill"] = c.lastWaveFill;
      entry["tail_efficiency"] = c.tailEfficiency;
      entry["active_warps_per_sm"] = c.activeWarpsPerSM(choice.device);
      entry["fills_gpu"] = c.fillsGpu(choice.device);
      entry["kv_bytes_read"] = c.kvBytesRead;
    }
    candidates.push_back(std::move(entry));
  }
  json spec = specToJson(choice.spec);
  spec["canonical"] = choice.spec.canonical();
  return {{"spec", spec},
          {"device", choice.device.toJson()},
          {"shape",
           {{"batch", choice.options.shape.batch},
            {"seqlen", choice.options.shape.seqlen}}},
          {"config", tileConfigToJson(choice.config)},
          {"model_only", choice.modelOnly},
          {"why", choice.why},
          {"skipped_templates", choice.skippedTemplates},
          {"candidates", candidates}};
}

} // namespace flashjit::autotune
