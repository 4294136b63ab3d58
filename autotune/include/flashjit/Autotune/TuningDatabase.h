//===- TuningDatabase.h - measured best configs of one GPU -------*- C++
//-*-===//
// Why: `flashjit autotune` measures configs once per GPU model and keeps the
// winners in a JSON file beside the deployment; compiles then look their
// shape up there before falling back to the heuristic. Measurements hold only
// for the GPU, driver and flashjit they were taken with, so the file records
// them and a stale file is detected (callers ignore it with a warning).
// The library reads no environment: callers pass every path.
#ifndef FLASHJIT_AUTOTUNE_TUNINGDATABASE_H
#define FLASHJIT_AUTOTUNE_TUNINGDATABASE_H

#include "flashjit/Autotune/DecodeTuning.h"
#include "flashjit/Autotune/ShapeBuckets.h"
#include "flashjit/Templates/TileConfig.h"

#include "llvm/Support/Error.h"
#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace flashjit::autotune {

/// What a measurement depends on besides the kernel.
struct GpuIdentity {
  /// The driver's device name, e.g. "NVIDIA H100 80GB HBM3".
  std::string name;
  int ccMajor = 0;
  int ccMinor = 0;
  /// Driver version, e.g. "580.159.04".
  std::string driver;
};

struct FailedConfig {
  TileConfig config;
  /// Why it could not be built or run, e.g. a launch error.
  std::string error;
};

struct TuningEntry {
  ShapeBucket bucket;
  /// The fastest config measured for the bucket.
  TileConfig config;
  /// Its throughput at the bucket's tuning seqlen.
  double tflops = 0;
  /// The heuristic's choice at the same size, for comparison (absent when it
  /// could not be measured).
  std::optional<double> heuristicTflops;
  std::vector<FailedConfig> failed;
};

struct TuningDatabase {
  /// The file format this flashjit reads and writes.
  static constexpr int kFormat = 1;

  TuningDatabase() = default;
  TuningDatabase(GpuIdentity gpu, std::string flashjitVersion)
      : gpu(std::move(gpu)), flashjitVersion(std::move(flashjitVersion)) {}

  GpuIdentity gpu;
  std::string flashjitVersion;
  std::vector<TuningEntry> entries;
  /// The backward kernels' winners (`flashjit autotune --backward`): the
  /// same buckets, backward configs (wgmma_bwd, mma_sync_bwd), TFLOP/s by
  /// the backward's convention (2.5 x the forward's FLOPs).
  std::vector<TuningEntry> backwardEntries;
  /// Decode kernels' winners (`flashjit autotune --decode`), by bucket.
  std::vector<DecodeTuningEntry> decodeEntries;

  /// Adds the entry, replacing one with the same bucket; an entry overlapping
  /// another bucket is an error.
  llvm::Error upsert(TuningEntry entry);
  /// Adds the entry after removing every entry whose bucket overlaps it (a
  /// new measurement supersedes the old ones, whatever their ranges);
  /// returns how many were removed.
  size_t replace(TuningEntry entry);
  /// replace() for the backward entries.
  size_t replaceBackward(TuningEntry entry);
  /// Adds a decode entry after removing those whose bucket overlaps it;
  /// returns how many were removed.
  size_t replaceDecode(DecodeTuningEntry entry);
  /// The tuned config of the bucket holding (spec, seqlen), if any.
  std::optional<TileConfig> lookup(const AttentionSpec &spec,
                                   int64_t seqlen) const;
  /// The tuned backward config of the bucket holding (spec, seqlen), if
  /// any.
  std::optional<TileConfig> lookupBackward(const AttentionSpec &spec,
                                           int64_t seqlen) const;
  /// Why the database does not apply to this GPU, driver and flashjit (each
  /// difference named), or std::nullopt when it does.
  std::optional<std::string> isStaleFor(const GpuIdentity &current,
                                        llvm::StringRef flashjitVersion) const;

  /// {"format": 1, "flashjit_version", "gpu": {"name", "cc", "driver"},
  ///  "entries": [{"bucket", "config", "tflops", "heuristic_tflops",
  ///  "failed": [{"config", "error"}]}]}, "backward_entries" (the same
  ///  form) and "decode_entries" (decodeEntryToJson's form), both read when
  ///  present and written when not empty.
  nlohmann::json toJson() const;
  /// Reads toJson()'s form; errors name the field ("entries[2].config.block_m:
  /// expected an integer ...").
  static llvm::Expected<TuningDatabase> fromJson(const nlohmann::json &json);

  /// Reads a database file; an unreadable file, bad JSON or a wrong schema is
  /// an error naming the path and the problem.
  static llvm::Expected<TuningDatabase> load(llvm::StringRef path);
  /// Writes the file atomically (a temporary file in the same folder, then a
  /// rename), creating the folder if needed.
  llvm::Error save(llvm::StringRef path) const;
};

/// `<cacheRoot>/tuning/<sanitized gpu name>.json`.
std::string defaultDatabasePath(llvm::StringRef cacheRoot,
                                llvm::StringRef gpuName);
/// Lower-case letters and digits, other runs as one '-':
/// "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"; "gpu" when empty.
std::string sanitizeGpuName(llvm::StringRef gpuName);
/// The flashjit version this library was built as (CMake's project version).
llvm::StringRef builtFlashjitVersion();

} // namespace flashjit::autotune

#endif
