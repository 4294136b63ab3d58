//===- TuningOptions.h - which tuning database a Context reads ----*- C++
//-*-===//
// Why: a deployment ships its tuning database beside it and points
// $FLASHJIT_TUNING_DB at it; everyone else gets the one `flashjit autotune`
// wrote under the kernel cache. The style guide asks for one place that
// reads the environment: fromEnvironment() is it, and the rest of the
// runtime sees only this struct.
#ifndef FLASHJIT_RUNTIME_TUNINGOPTIONS_H
#define FLASHJIT_RUNTIME_TUNINGOPTIONS_H

#include "flashjit/Autotune/TuningDatabase.h"

#include "llvm/ADT/StringRef.h"
#include <optional>
#include <string>

namespace flashjit {

struct TuningOptions {
  /// False: never read a database; every config is the heuristic's.
  bool enabled = true;
  /// A database file, or a folder holding one file per GPU model
  /// (<sanitized GPU name>.json, as `flashjit autotune --db FOLDER` writes).
  /// Empty: <kernel cache directory>/tuning/<sanitized GPU name>.json.
  std::string database;
  /// The GPU the database must have been tuned on, when that is not the
  /// local one: kernels built ahead of time for a deployment's GPU, tests.
  /// None: the local GPU; with no local GPU either, no database is read.
  std::optional<autotune::GpuIdentity> gpu;

  /// `database` from $FLASHJIT_TUNING_DB (unset or empty: the default);
  /// the only function in flashjit that reads it.
  static TuningOptions fromEnvironment();
};

/// Where the database of one GPU is.
struct DatabaseLocation {
  std::string path;
  /// True when `path` is a file the user named (TuningOptions::database or
  /// `--db`): a missing file is then worth a warning. False for the default
  /// path and for a file inside a named folder, which may not exist yet.
  bool namedFile = false;
};

/// `database` when it names a file (or does not exist yet), the GPU's file
/// inside it when it is a folder, else the default path under
/// `cacheDirectory`; an empty path when there is neither.
DatabaseLocation locateDatabase(llvm::StringRef database,
                                llvm::StringRef cacheDirectory,
                                llvm::StringRef gpuName);

} // namespace flashjit

#endif
