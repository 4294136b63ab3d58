//===- TunedConfigs.h - the tuning database one Context consults --*- C++
//-*-===//
// Why: compiles look their bucket up in the tuning database before asking
// the heuristic. The file is read once per Context and checked against the
// GPU, the driver and the flashjit version; a database that does not apply
// (stale, corrupt, unreadable, or named but missing) is dropped with one
// warning and never fails a compile: the heuristic still gives a kernel.
#ifndef FLASHJIT_RUNTIME_TUNEDCONFIGS_H
#define FLASHJIT_RUNTIME_TUNEDCONFIGS_H

#include "flashjit/Autotune/TuningDatabase.h"
#include "flashjit/Runtime/TuningOptions.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include <optional>
#include <string>
#include <vector>

namespace flashjit {

class TunedConfigs {
public:
  using WarnFn = llvm::function_ref<void(llvm::StringRef)>;

  /// No database: every lookup misses.
  TunedConfigs() = default;

  /// Reads the database at `location`. Returns an empty table, after one
  /// call of `warn` saying why, when the file is unreadable, corrupt, stale
  /// for `gpu` or `flashjitVersion`, or missing although the user named it;
  /// silently when a default location simply has no file.
  static TunedConfigs open(const DatabaseLocation &location,
                           const autotune::GpuIdentity &gpu,
                           llvm::StringRef flashjitVersion, WarnFn warn);

  /// The index of the entry whose bucket holds (spec, seqlen).
  std::optional<size_t> find(const AttentionSpec &spec, int64_t seqlen) const;
  /// The backward entry whose bucket holds (spec, seqlen), if any.
  const autotune::TuningEntry *findBackward(const AttentionSpec &spec,
                                            int64_t seqlen) const;
  const autotune::TuningEntry &entry(size_t index) const {
    return Entries[index];
  }
  /// Entries in use (0 when the database was dropped or absent).
  size_t size() const { return Entries.size(); }
  /// The file the entries came from; empty when none is in use.
  const std::string &path() const { return Path; }
  /// The decode entries whose problem is `spec`'s (tile knobs aside).
  std::vector<autotune::DecodeTuningEntry>
  decodeEntriesFor(const DecodeSpec &spec) const;

private:
  std::string Path;
  std::vector<autotune::TuningEntry> Entries;
  std::vector<autotune::TuningEntry> BackwardEntries;
  std::vector<autotune::DecodeTuningEntry> DecodeEntries;
};

} // namespace flashjit

#endif
