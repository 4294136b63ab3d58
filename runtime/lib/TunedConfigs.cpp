//===- TunedConfigs.cpp - the tuning database one Context consults --------===//
// Why: see TunedConfigs.h. A missing file is told apart from an unreadable
// one by its status, so a folder that cannot be listed is reported, not
// mistaken for "not tuned yet".
#include "flashjit/Runtime/TunedConfigs.h"

#include "llvm/Support/FileSystem.h"

namespace flashjit {

namespace {
constexpr const char *kFallback = "; using the heuristic's tile configs";
} // namespace

TunedConfigs TunedConfigs::open(const DatabaseLocation &location,
                                const autotune::GpuIdentity &gpu,
                                llvm::StringRef flashjitVersion, WarnFn warn) {
  TunedConfigs table;
  if (location.path.empty())
    return table;
  llvm::sys::fs::file_status status;
  std::error_code ec = llvm::sys::fs::status(location.path, status);
  if (ec == std::errc::no_such_file_or_directory) {
    if (location.namedFile)
      warn("tuning database '" + location.path + "' does not exist" +
           kFallback);
    return table;
  }
  auto db = autotune::TuningDatabase::load(location.path);
  if (!db) {
    warn("ignoring " + llvm::toString(db.takeError()) + kFallback);
    return table;
  }
  if (auto stale = db->isStaleFor(gpu, flashjitVersion)) {
    warn("ignoring tuning database '" + location.path + "': " + *stale +
         kFallback);
    return table;
  }
  table.Path = location.path;
  table.Entries = std::move(db->entries);
  table.BackwardEntries = std::move(db->backwardEntries);
  table.DecodeEntries = std::move(db->decodeEntries);
  return table;
}

std::optional<size_t> TunedConfigs::find(const AttentionSpec &spec,
                                         int64_t seqlen) const {
  for (size_t i = 0; i < Entries.size(); ++i)
    if (Entries[i].bucket.contains(spec, seqlen))
      return i;
  return std::nullopt;
}

const autotune::TuningEntry *
TunedConfigs::findBackward(const AttentionSpec &spec, int64_t seqlen) const {
  for (const autotune::TuningEntry &entry : BackwardEntries)
    if (entry.bucket.contains(spec, seqlen))
      return &entry;
  return nullptr;
}

std::vector<autotune::DecodeTuningEntry>
TunedConfigs::decodeEntriesFor(const DecodeSpec &spec) const {
  std::vector<autotune::DecodeTuningEntry> out;
  for (const autotune::DecodeTuningEntry &e : DecodeEntries)
    if (e.bucket.contains(spec, e.bucket.batchMin, e.bucket.kvMin))
      out.push_back(e);
  return out;
}

} // namespace flashjit
