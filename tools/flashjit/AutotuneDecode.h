//===- AutotuneDecode.h - `flashjit autotune --decode` ------------*- C++
//-*-===//
// Why: the decode tuner shares the autotune command's options (database,
// buckets filter, timing) but measures decode kernels; runAutotune hands
// over to it once the database is opened.
#ifndef FLASHJIT_TOOLS_AUTOTUNEDECODE_H
#define FLASHJIT_TOOLS_AUTOTUNEDECODE_H

#include "Commands.h"

#include "flashjit/Autotune/TuningDatabase.h"
#include "flashjit/FlashJIT.h"

#include <optional>
#include <string>
#include <vector>

namespace flashjit::tools {

/// The autotune options the decode tuner reads.
struct DecodeAutotuneSettings {
  std::vector<int64_t> headDims;
  std::vector<std::string> dtypes, bucketFilter;
  double timeBudget = 540, minGain = 2;
  int warmup = 2, iterations = 5;
  bool dryRun = false, json = false;
  uint64_t seed = 1;
};

/// `--decode` was given.
bool decodeAutotuneRequested();
/// Tunes the decode buckets and merges them into `existing` (or a new
/// database) at `dbPath`; the exit status.
int runDecodeAutotune(Context &ctx, const std::string &dbPath,
                      std::optional<autotune::TuningDatabase> existing,
                      const autotune::GpuIdentity &gpu,
                      const DecodeAutotuneSettings &settings);

} // namespace flashjit::tools

#endif
