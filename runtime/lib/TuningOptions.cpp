//===- TuningOptions.cpp - which tuning database a Context reads ----------===//
// Why: see TuningOptions.h. Keep every getenv of the tuning database here.
#include "flashjit/Runtime/TuningOptions.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstdlib>

namespace flashjit {

TuningOptions TuningOptions::fromEnvironment() {
  TuningOptions options;
  if (const char *path = std::getenv("FLASHJIT_TUNING_DB"))
    options.database = path;
  return options;
}

DatabaseLocation locateDatabase(llvm::StringRef database,
                                llvm::StringRef cacheDirectory,
                                llvm::StringRef gpuName) {
  if (!database.empty()) {
    if (!llvm::sys::fs::is_directory(database))
      return {database.str(), /*namedFile=*/true};
    llvm::SmallString<256> path(database);
    llvm::sys::path::append(path, autotune::sanitizeGpuName(gpuName) + ".json");
    return {std::string(path), /*namedFile=*/false};
  }
  if (cacheDirectory.empty())
    return {};
  return {autotune::defaultDatabasePath(cacheDirectory, gpuName),
          /*namedFile=*/false};
}

} // namespace flashjit
